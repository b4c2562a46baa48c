"""The `shard_fence` table's statements."""

# runtime.placement.shards.ShardGuard: the newest grant the store has seen and its instance; a new
# grant claims the store with its first write.
CURRENT = "SELECT token, owner FROM shard_fence WHERE id = 1"
CLAIM = (
    "INSERT INTO shard_fence (id, token, owner, granted_at) VALUES (1, :t, :o, :at)"
    " ON CONFLICT (id) DO UPDATE SET token = excluded.token, owner = excluded.owner, granted_at = excluded.granted_at"
)
# runtime.placement.shards.newest_grant: the floor of this process's grant, read without writing.
NEWEST_TOKEN = "SELECT max(token) FROM (SELECT token FROM shard_fence UNION ALL SELECT token FROM shard_grant)"
