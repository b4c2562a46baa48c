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
