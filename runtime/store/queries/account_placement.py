"""The `account_placement` table's statements."""

# runtime.placement.shards: this shard's copy of an account's directory entry.
BY_ACCOUNT = "SELECT account_id, shard, generation, state FROM account_placement WHERE account_id = :a"
RECORD = (
    "INSERT INTO account_placement (account_id, shard, generation, state, updated_at)"
    " VALUES (:a, :s, :g, :st, :at) ON CONFLICT (account_id) DO UPDATE SET shard = excluded.shard,"
    " generation = excluded.generation, state = excluded.state, updated_at = excluded.updated_at"
)
# runtime.placement.slices: the same, writing nothing when the placement is unchanged.
RECORD_IF_CHANGED = (
    "INSERT INTO account_placement (account_id, shard, generation, state, updated_at)"
    " VALUES (:a, :s, :g, :st, :at) ON CONFLICT (account_id) DO UPDATE SET shard = excluded.shard,"
    " generation = excluded.generation, state = excluded.state, updated_at = excluded.updated_at"
    " WHERE (shard, generation, state) IS NOT (excluded.shard, excluded.generation, excluded.state)"
)
DELETE_OF_ACCOUNT = "DELETE FROM account_placement WHERE account_id = :a"
# runtime.placement.directory: every placement this store holds.
ALL = "SELECT account_id, shard, generation, state FROM account_placement ORDER BY account_id"
