"""The `shard_key` table's statements (runtime.placement.sealing)."""

KEY = "SELECT public_key, private_key FROM shard_key WHERE shard = :s"
# Made once per shard: a second process making one at the same time keeps the first.
CREATE = (
    "INSERT INTO shard_key (shard, public_key, private_key, created_at) VALUES (:s, :pub, :priv, :at)"
    " ON CONFLICT (shard) DO NOTHING"
)
