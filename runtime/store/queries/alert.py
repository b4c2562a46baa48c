"""The `alert` table's statements."""

# Raised for a send refused before it was stored; simulated when its account is.
RAISE = (
    "INSERT OR IGNORE INTO alert (kind, account_id, customer_id, request_id, code, simulated, raised_at)"
    " VALUES (:k, :a, :c, :r, :code, coalesce((SELECT simulated FROM account WHERE id = :a), 0), :at)"
)
UNDELIVERED = (
    "SELECT id, key, kind, account_id, customer_id, request_id, code, simulated, raised_at, attempts"
    " FROM alert WHERE state = 'raised' ORDER BY id LIMIT :n"
)
# runtime.agent.profiles.report_unknown: an alert of :kind and :code for customer :c raised
# since their last admitted batch (the news is the same until they are admitted again).
RAISED_SINCE_LAST_BATCH = (
    "SELECT 1 FROM alert WHERE kind = :kind AND customer_id = :c AND code = :code AND raised_at >="
    " coalesce((SELECT max(created_at) FROM admission_batch WHERE customer_id = :c), 0) LIMIT 1"
)
SETTLE = "UPDATE alert SET state = :s, settled_at = :at, last_failure = :f WHERE id = :i AND state = 'raised'"
RETRY = "UPDATE alert SET attempts = attempts + 1, last_failure = :f WHERE id = :i AND state = 'raised'"
PRUNE = "DELETE FROM alert WHERE state != 'raised' AND settled_at < :before"
BACKLOG = (
    "SELECT (SELECT count(*) FROM alert WHERE state = 'raised'),"
    " (SELECT count(*) FROM alert WHERE state = 'refused'),"
    " (SELECT last_failure FROM alert WHERE state = 'raised' ORDER BY id LIMIT 1)"
)

DELETE_OF_CUSTOMER = (
    "DELETE FROM alert WHERE customer_id = :c OR"
    " request_id IN (SELECT request_id FROM outbox_request WHERE customer_id = :c)"
)
