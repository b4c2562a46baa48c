"""The `lease` table's statements."""

GRANT = (
    "INSERT INTO lease (name, owner, expires_at, token) VALUES (:n, :o, :e, 1)"
    " ON CONFLICT (name) DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at,"
    "  token = CASE WHEN lease.owner = excluded.owner AND lease.expires_at >= :now THEN lease.token"
    "  ELSE lease.token + 1 END"
    " WHERE lease.expires_at < :now OR lease.owner = excluded.owner"
    " RETURNING token"
)
RELEASE = "UPDATE lease SET expires_at = 0 WHERE name = :n AND owner = :o"
_HOLDS = "name = :n AND owner = :o AND token = :t AND expires_at >= :now"
RENEW = f"UPDATE lease SET expires_at = :e WHERE {_HOLDS}"
RELEASE_HELD = f"UPDATE lease SET expires_at = 0 WHERE {_HOLDS}"
# A lapsed lease (1, not 0: "released") reads as one its holder never gave back: a turn it held
# is stranded (runtime.admission.batches.stranded_batches), and the next grant takes a new token.
LAPSE = "UPDATE lease SET expires_at = 1 WHERE name = :n AND owner = :o AND expires_at >= :now"
HOLDER = "SELECT owner FROM lease WHERE name = :n AND expires_at >= :now"
UNEXPIRED = "SELECT name, owner FROM lease WHERE expires_at >= :now"

DELETE_OF_CUSTOMER = "DELETE FROM lease WHERE name = 'customer:' || :c"

# runtime.placement.shards.ShardGuard.take_over: every lease in the store when a new grant claims it
# was taken under an earlier grant. Lapsed (1), not released (0), as runtime.store.leases marks a
# holder that never gave its lease back: the rescue beat runs the open batches of those turns at
# once (runtime.admission.batches.stranded_batches).
RELEASE_EARLIER = "UPDATE lease SET expires_at = 1 WHERE expires_at >= :now"
