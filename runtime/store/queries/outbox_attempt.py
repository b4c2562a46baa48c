"""The `outbox_attempt` table's statements."""

# runtime.outbox.requests. In one read: the account's (:a) placement, the request's (:r) last
# attempt, and whether a request of the same customer (:c) registered earlier (rowid order) is
# still pending or sending.
BEGIN_CHECKS = (
    "SELECT (SELECT state FROM account_placement WHERE account_id = :a), last.attempt_no, last.state,"
    " last.started_at, last.owner, EXISTS (SELECT 1 FROM outbox_request WHERE customer_id = :c"
    "  AND state IN ('pending', 'sending') AND rowid < (SELECT rowid FROM outbox_request WHERE request_id = :r))"
    " FROM (SELECT 1) LEFT JOIN (SELECT attempt_no, state, started_at, owner FROM outbox_attempt"
    "  WHERE request_id = :r ORDER BY attempt_no DESC LIMIT 1) AS last"
)
START = (
    "INSERT INTO outbox_attempt (request_id, attempt_no, state, owner, started_at, shard_token)"
    " VALUES (:r, :n, 'started', :o, :at, :token)"
)
MARK = (
    "UPDATE outbox_attempt SET state = :s, finished_at = :at, platform_message_id = :p, error_code = :e"
    " WHERE request_id = :r AND attempt_no = :n"
)
SETTLE_BY_ECHO = (
    "UPDATE outbox_attempt SET state = 'sent', finished_at = :at, platform_message_id = :p, error_code = NULL"
    " WHERE request_id = :r AND attempt_no = (SELECT max(attempt_no) FROM outbox_attempt WHERE request_id = :r)"
)
LAST = "SELECT attempt_no, started_at FROM outbox_attempt WHERE request_id = :r ORDER BY attempt_no DESC LIMIT 1"
LAST_NO = "SELECT max(attempt_no) FROM outbox_attempt WHERE request_id = :r"

DELETE_OF_CUSTOMER = (
    "DELETE FROM outbox_attempt WHERE request_id IN (SELECT request_id FROM outbox_request WHERE customer_id = :c)"
)
# `:ids`: a JSON array of request ids.
DELETE_OF_REQUESTS = "DELETE FROM outbox_attempt WHERE request_id IN (SELECT value FROM json_each(:ids))"

# runtime.placement.slices, an account moving between shards: the account's rows (:a) as its
# slice carries them, their removal.
SLICE = "SELECT * FROM outbox_attempt WHERE request_id IN (SELECT request_id FROM outbox_request WHERE account_id = :a)"
DELETE_OF_ACCOUNT = (
    "DELETE FROM outbox_attempt WHERE request_id IN (SELECT request_id FROM outbox_request WHERE account_id = :a)"
)
