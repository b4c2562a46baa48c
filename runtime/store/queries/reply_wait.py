"""The `reply_wait` table's statements: each buyer's wait for the shop and the reply that ended
it, and replies that ended none (runtime.operators.reports); and reads of the operators'
summaries V24's triggers keep from its rows (`report_operator_time`, `report_operator_ever`,
`report_operator_replies`: no statements of their own, as nothing else writes them). Bind
`:sim` as account.of_source says."""

from runtime.store.queries.account import of_source

# Where each customer of `:customers` (a JSON array) stands: its open wait (id, start, whether
# it is the first of its day), its latest wait's start, and whether it has any row (one that
# has none was never counted here).
STANDING = (
    "SELECT c.value, o.id, o.started_at, o.first_of_day,"
    " (SELECT max(w.started_at) FROM reply_wait w WHERE w.customer_id = c.value),"
    " EXISTS (SELECT 1 FROM reply_wait w WHERE w.customer_id = c.value)"
    " FROM json_each(:customers) c LEFT JOIN reply_wait o ON o.customer_id = c.value AND o.answered_at IS NULL"
)
# Positional: customer, account, started_at, day_at, first_of_day, answered_at, answered_day,
# seconds, origin, operator, request_id.
INSERT = (
    "INSERT INTO reply_wait (customer_id, account_id, started_at, day_at, first_of_day, answered_at, answered_day,"
    " seconds, origin, operator, request_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
# Positional: answered_at, answered_day, seconds, origin, operator, request_id, the wait's id.
ANSWER = (
    "UPDATE reply_wait SET answered_at = ?, answered_day = ?, seconds = ?, origin = ?, operator = ?, request_id = ?"
    " WHERE id = ?"
)
# Another shop zone: everything again, from messages and replies (as report_activity.DELETE_ALL).
DELETE_ALL = (
    "DELETE FROM reply_wait",
    "DELETE FROM report_reply_time",
    "DELETE FROM report_operator_time",
    "DELETE FROM report_operator_ever",
    "DELETE FROM report_operator_replies",
)

# The waits begun in a period that no reply has ended yet (their starts, in order).
OPEN_WAITS = (
    "SELECT started_at FROM reply_wait WHERE answered_at IS NULL"
    f" AND started_at >= :from AND started_at < :to AND {of_source('account_id')} ORDER BY started_at"
)
# Manual replies sent in a period, by operator ('': unnamed).
MANUAL_REPLIES = (
    "SELECT operator, sum(replies) FROM report_operator_replies"
    f" WHERE day_at >= :from AND day_at < :to AND {of_source('account_id')} GROUP BY operator"
)
# The waits begun in a period that an operator's reply ended, by operator ('': unnamed) and
# reply time, in that order: the reply times each ever took, each summed over the period's days
# (NULL: none in it).
OPERATOR_TIMES = (
    "SELECT k.operator, k.seconds, (SELECT sum(t.waits) FROM report_operator_time t WHERE t.operator = k.operator"
    " AND t.seconds = k.seconds AND t.account_id = k.account_id AND t.day_at >= :from AND t.day_at < :to)"
    f" FROM report_operator_ever k WHERE {of_source('k.account_id')} ORDER BY k.operator, k.seconds"
)

DELETE_OF_CUSTOMER = "DELETE FROM reply_wait WHERE customer_id = :c"
# Moves (runtime.placement.slices): rebuilt on the target from the moved messages and replies
# (their customers are new there); the source forgets them.
SLICE = "SELECT * FROM reply_wait WHERE false"
DELETE_OF_ACCOUNT = "DELETE FROM reply_wait WHERE account_id = :a"
