"""The `provider_cursor` table's statements."""

# runtime.inbound: a stream's committed cursor.
CURSOR = "SELECT cursor FROM provider_cursor WHERE account_id = ? AND stream_id = ?"
# In the transaction that ingested a page (?4, its cursor ?5): its stream's committed cursor up
# to the newest ingested page (outcome ?3) that no pending page precedes, never backwards. That
# is most often the page itself, whose cursor is at hand: only another page's is read from its JSON.
ADVANCE = (
    "INSERT INTO provider_cursor (account_id, stream_id, cursor, page_op_id, updated_at, received_id)"
    " SELECT * FROM (SELECT ?1, ?2, CASE page_op_id WHEN ?4 THEN ?5 ELSE json_extract(page, '$.cursor') END,"
    "  page_op_id, ?6, id FROM received_page WHERE account_id = ?1 AND stream_id = ?2 AND outcome = ?3"
    "  AND id < coalesce((SELECT min(id) FROM received_page"
    "   WHERE account_id = ?1 AND stream_id = ?2 AND ingested_at IS NULL), 9223372036854775807)"
    "  ORDER BY id DESC LIMIT 1) WHERE true"
    " ON CONFLICT (account_id, stream_id) DO UPDATE SET"
    " cursor = excluded.cursor, page_op_id = excluded.page_op_id, updated_at = excluded.updated_at,"
    " received_id = excluded.received_id"
    " WHERE provider_cursor.received_id IS NULL OR provider_cursor.received_id < excluded.received_id"
)
# runtime.inbound.checkpoints, runtime.placement.slices: (stream id, cursor) of the account's streams.
OF_ACCOUNT = "SELECT stream_id, cursor FROM provider_cursor WHERE account_id = :a"

# runtime.accounts.listener_policy.committed_since: when a page of the account last committed.
LAST_COMMITTED_AT = "SELECT max(updated_at) FROM provider_cursor WHERE account_id = :a"

# runtime.placement.slices, an account moving between shards: the account's rows (:a) as its
# slice carries them, their removal.
SLICE = "SELECT * FROM provider_cursor WHERE account_id = :a"
DELETE_OF_ACCOUNT = "DELETE FROM provider_cursor WHERE account_id = :a"
