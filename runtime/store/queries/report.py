"""What runtime.operators.reports reads of tables other stages own: buyer messages and sent
replies, for the report facts' catch-up (runtime.operators.reports.facts). Kept apart from those
tables' own modules: only the reports read them so."""

# A buyer message is an external sender's line that came in live (history imports are old news).
_BUYER = "sender_role = 'external' AND state != 'history'"

# The next `:n` buyer messages after the id `:after`, in id (= receive) order.
BUYER_MESSAGES_AFTER = (
    f"SELECT id, customer_id, account_id, received_at FROM inbound_message WHERE id > :after AND {_BUYER}"
    " ORDER BY id LIMIT :n"
)
LAST_MESSAGE_ID = "SELECT coalesce(max(id), 0) FROM inbound_message"

# A reply sent: its request is sent, and its one sent attempt says when.
_REPLY_COLUMNS = "r.customer_id, r.account_id, r.request_id, r.origin, r.operator, t.finished_at"
_NOT_PLACED = "NOT EXISTS (SELECT 1 FROM reply_wait w WHERE w.request_id = r.request_id)"

# Replies sent after `:after` up to `:until` that the facts do not hold yet.
REPLIES_SENT_BETWEEN = (
    f"SELECT {_REPLY_COLUMNS} FROM outbox_attempt t JOIN outbox_request r ON r.request_id = t.request_id"
    " WHERE t.state = 'sent' AND t.finished_at > :after AND t.finished_at <= :until AND r.state = 'sent'"
    f" AND {_NOT_PLACED}"
)
# Every reply sent to the customers of `:customers` (a JSON array) up to `:until` that the facts
# do not hold yet: customers new to them (a moved account's arrive with their whole history).
REPLIES_SENT_TO = (
    f"SELECT {_REPLY_COLUMNS} FROM json_each(:customers) c JOIN outbox_request r ON r.customer_id = c.value"
    " JOIN outbox_attempt t ON t.request_id = r.request_id AND t.state = 'sent'"
    f" WHERE r.state = 'sent' AND t.finished_at <= :until AND {_NOT_PLACED}"
)
# Anything for the catch-up: a message after `:after`, or a reply sent after `:since` not held yet.
ANYTHING_NEW = (
    "SELECT EXISTS (SELECT 1 FROM inbound_message WHERE id > :after)"
    " OR EXISTS (SELECT 1 FROM outbox_attempt t JOIN outbox_request r ON r.request_id = t.request_id"
    f"  WHERE t.state = 'sent' AND t.finished_at > :since AND r.state = 'sent' AND {_NOT_PLACED})"
)
