"""The `shard_grant` table's statements."""

# runtime.placement.shards.ShardGuard.check: every grant that claimed the store.
RECORD = "INSERT OR IGNORE INTO shard_grant (token, owner, granted_at) VALUES (:t, :o, :at)"
