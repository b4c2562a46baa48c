"""The `read_check` table's statements."""

# runtime.outbox.read_checks. None for a reply posted to a session webhook (:hook): no read status.
# Idempotent: a message has one check, whether or not it was made already.
SCHEDULE = (
    "INSERT OR IGNORE INTO read_check (request_id, due_at, checks_left) SELECT :r, :d, 1"
    " WHERE NOT EXISTS (SELECT 1 FROM outbox_request WHERE request_id = :r AND recipient_id = :hook)"
)
# The checks due and not made yet (the partial index read_check_due holds only these), oldest first.
DUE = (
    "SELECT r.request_id, r.account_id, r.conversation_id, r.recipient_id, r.platform_message_id"
    " FROM read_check k JOIN outbox_request r ON r.request_id = k.request_id"
    " WHERE k.due_at <= :now AND k.queried_at IS NULL AND r.state = 'sent' AND r.recipient_id IS NOT NULL"
    " AND r.platform_message_id IS NOT NULL ORDER BY k.due_at LIMIT :n"
)
# In DUE's transaction, before any query is made: the checks (:ids, a JSON array of request ids)
# are spent, whatever becomes of the query.
MARK_QUERIED = (
    "UPDATE read_check SET queried_at = :now WHERE queried_at IS NULL"
    " AND request_id IN (SELECT value FROM json_each(:ids))"
)

DELETE_OF_CUSTOMER = (
    "DELETE FROM read_check WHERE request_id IN (SELECT request_id FROM outbox_request WHERE customer_id = :c)"
)
# `:ids`: a JSON array of request ids.
DELETE_OF_REQUESTS = "DELETE FROM read_check WHERE request_id IN (SELECT value FROM json_each(:ids))"

# runtime.placement.slices, an account moving between shards: the account's rows (:a) as its
# slice carries them, their removal.
SLICE = "SELECT * FROM read_check WHERE request_id IN (SELECT request_id FROM outbox_request WHERE account_id = :a)"
DELETE_OF_ACCOUNT = (
    "DELETE FROM read_check WHERE request_id IN (SELECT request_id FROM outbox_request WHERE account_id = :a)"
)
