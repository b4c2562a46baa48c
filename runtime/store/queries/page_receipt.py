"""The `page_receipt` table's statements."""

from runtime.store.queries.account import of_source

# Committed pages, of the accounts of_source keeps (:sim, see account.of_source).
COMMITTED_COUNT = f"SELECT 'committed pages', count(*) FROM page_receipt WHERE {of_source('account_id')}"


# runtime.inbound.ingest: the page is committed (nothing inserted: it was before, a replay).
RECORD = (
    "INSERT OR IGNORE INTO page_receipt (account_id, stream_id, page_op_id, message_count, committed_at)"
    " VALUES (?, ?, ?, ?, ?)"
)

# runtime.placement.slices, an account moving between shards: the account's rows (:a) as its
# slice carries them, their removal.
SLICE = "SELECT * FROM page_receipt WHERE account_id = :a"
DELETE_OF_ACCOUNT = "DELETE FROM page_receipt WHERE account_id = :a"
