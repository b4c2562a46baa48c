"""The `outbox_request` table's statements."""

from runtime.store.queries.account import of_source
from runtime.store.queries.media import INBOUND_MEDIA, STORED_SHA256

# Requests by state, of the accounts of_source keeps (:sim, see account.of_source).
STATE_COUNTS = f"SELECT state, count(*) FROM outbox_request WHERE {of_source('account_id')} GROUP BY state"


ORIGIN_STATE_COUNTS = "SELECT origin, state, count(*) FROM outbox_request GROUP BY origin, state"


def reply_latency(bounds_s: tuple[float, ...]) -> str:
    """Automatic replies sent: how many, their latency's sum (ms) and how many within each
    bound (seconds), from the first buyer message of their batch reaching the store to the
    reply being accepted by the platform."""
    bounds = ", ".join(f"sum(latency_ms <= {int(bound * 1000)})" for bound in bounds_s)
    return (
        f"SELECT count(*), coalesce(sum(latency_ms), 0), {bounds} FROM ("
        " SELECT t.finished_at - (SELECT min(m.received_at) FROM inbound_message m"
        "  WHERE m.batch_id = r.batch_id AND m.sender_role = 'external') AS latency_ms"
        " FROM outbox_request r JOIN outbox_attempt t ON t.request_id = r.request_id AND t.state = 'sent'"
        " WHERE r.origin = 'auto' AND r.follows IS NULL)"
        " WHERE latency_ms IS NOT NULL"  # a reply to the buyer: not to an operator's message alone
    )


# The media only customer `:c`'s messages use: files its replies sent, the images, files, voice
# and video its buyer sent. (`+sha256`: without the column's TEXT affinity, so the copy's
# expression index is searched, not scanned, for each.)
CUSTOMER_ONLY_MEDIA = (
    "SELECT sha256 FROM (SELECT media_sha256 AS sha256 FROM outbox_request WHERE customer_id = :c"
    f" UNION SELECT {STORED_SHA256} FROM inbound_message WHERE customer_id = :c AND {INBOUND_MEDIA})"
    " WHERE sha256 IS NOT NULL"
    " AND NOT EXISTS (SELECT 1 FROM outbox_request o WHERE o.media_sha256 = sha256 AND o.customer_id != :c)"
    f" AND NOT EXISTS (SELECT 1 FROM inbound_message WHERE {INBOUND_MEDIA} AND {STORED_SHA256} = +sha256"
    "  AND customer_id != :c)"
)


SENDING_OF_CUSTOMER = "SELECT 1 FROM outbox_request WHERE customer_id = :c AND state = 'sending'"
DELETE_OF_CUSTOMER = "DELETE FROM outbox_request WHERE customer_id = :c"


def prunable(settled: tuple[str, ...]) -> str:
    """Retention: replies in one of the `settled` states, settled before `:cutoff`, that no later
    one retries or follows; `:n` of them."""
    states = "(" + ", ".join(f"'{state}'" for state in settled) + ")"
    return (
        f"SELECT request_id FROM outbox_request r WHERE state IN {states} AND updated_at < :cutoff"
        " AND NOT EXISTS (SELECT 1 FROM outbox_request o WHERE o.retry_of = r.request_id OR o.follows = r.request_id)"
        " LIMIT :n"
    )


# `:ids`: a JSON array of request ids.
DELETE_LISTED = "DELETE FROM outbox_request WHERE request_id IN (SELECT value FROM json_each(:ids))"


def register(columns: tuple[str, ...]) -> str:
    """Store an intent (idempotent on request id), with a `:column` parameter per column."""
    return f"INSERT OR IGNORE INTO outbox_request ({', '.join(columns)}) VALUES ({', '.join(':' + c for c in columns)})"


BY_ID = "SELECT * FROM outbox_request WHERE request_id = :r"
NEXT_PENDING = (
    "SELECT request_id FROM outbox_request WHERE customer_id = :c AND state = 'pending' ORDER BY rowid LIMIT 1"
)
NEXT_PENDING_AFTER = (
    "SELECT request_id FROM outbox_request WHERE state = 'pending'"
    " AND customer_id = (SELECT customer_id FROM outbox_request WHERE request_id = :r) ORDER BY rowid LIMIT 1"
)
MARK_SENDING = "UPDATE outbox_request SET state = 'sending', updated_at = :at WHERE request_id = :r"
STATE = "SELECT state FROM outbox_request WHERE request_id = :r"
SET_STATE = "UPDATE outbox_request SET state = :s, error_code = :e, updated_at = :at WHERE request_id = :r"
# A sent request's platform message id, when its echo is stored already (else NULL).
_ECHOED = (
    "(SELECT m.platform_message_id FROM inbound_message m WHERE m.account_id = outbox_request.account_id"
    " AND m.conversation_id = outbox_request.conversation_id"
    " AND m.platform_message_id = outbox_request.platform_message_id)"
)
# Evidence of delivery is final: a late failure report never turns a sent request back.
MARK = (
    "UPDATE outbox_request SET state = :rs, updated_at = :at,"
    " platform_message_id = coalesce(:p, platform_message_id), error_code = :e"
    f" WHERE request_id = :r AND (state != 'sent' OR :rs = 'sent') RETURNING origin, {_ECHOED}"
)
SETTLE_BY_ECHO = (
    "UPDATE outbox_request SET state = 'sent', platform_message_id = :p, error_code = NULL, updated_at = :at"
    " WHERE request_id = :r AND account_id = :a AND state IN ('sending', 'result-unknown')"
    f" RETURNING origin, {_ECHOED}"
)
CONSOLE_ECHOES = (
    "SELECT request_id, platform_message_id FROM outbox_request WHERE account_id = ? AND origin = 'manual'"
    " AND state = 'sent' AND platform_message_id IN (SELECT value FROM json_each(?))"
)
COUNT_RECEIPT_QUERY = "UPDATE outbox_request SET receipt_queries = receipt_queries + 1 WHERE request_id = :r"


# Most recently changed first, in state :s (NULL: any), of the accounts of_source keeps (:sim, see
# account.of_source).
RECENT = (
    "SELECT request_id, customer_id, conversation_id, origin, state, error_code,"
    " substr(body, 1, 40) AS preview, updated_at FROM outbox_request"
    f" WHERE (:s IS NULL OR state = :s) AND {of_source('account_id')} ORDER BY updated_at DESC LIMIT :n"
)


TO_ATTEMPT = (
    # Each state its own limit: many quiet pending requests never starve expired attempts.
    "SELECT * FROM (SELECT request_id FROM outbox_request WHERE state = 'pending' AND updated_at < :t LIMIT :n)"
    " UNION ALL SELECT * FROM"
    " (SELECT request_id FROM outbox_request WHERE state = 'sending' AND updated_at < :lease LIMIT :n)"
)
# Sending requests with the owner of their started attempt.
SENDING_WITH_OWNER = (
    "SELECT r.request_id, a.owner FROM outbox_request r"
    " JOIN outbox_attempt a ON a.request_id = r.request_id AND a.state = 'started'"
    " WHERE r.state = 'sending' LIMIT :n"
)
TO_SETTLE = "SELECT request_id FROM outbox_request WHERE state = 'result-unknown' AND receipt_queries < :q LIMIT :n"
REVOKE_UNSENT_AUTO = (
    "UPDATE outbox_request SET state = 'revoked', error_code = :code, updated_at = :at"
    " WHERE customer_id = :c AND origin = 'auto' AND state = 'pending'"
)
ANY_FOR_BATCH = "SELECT 1 FROM outbox_request WHERE customer_id = :c AND batch_id = :b LIMIT 1"
RETRY_OF = "SELECT request_id FROM outbox_request WHERE retry_of = :r"
# A reply registered under :t: its text's request and its attachments' (`{t}-{n}`).
REPLY_PARTS = (
    "SELECT request_id, content_type, state FROM outbox_request"
    " WHERE request_id = :t OR (request_id > :t || '-' AND request_id < :t || '.')"
)
# A sent request by its platform message id, with its customer's conversation (a read receipt's check).
SENT_BY_MESSAGE_ID = (
    "SELECT r.request_id, r.customer_id, r.recipient_id, c.conversation_type, c.conversation_id"
    " FROM outbox_request r JOIN customer c ON c.id = r.customer_id"
    " WHERE r.account_id = :a AND r.platform_message_id = :p AND r.state = 'sent'"
)
AUTO_OF_CUSTOMER = (
    "SELECT request_id, batch_id, state FROM outbox_request WHERE customer_id = :c AND origin = 'auto'"
    " ORDER BY created_at, request_id"
)

# runtime.placement.moves._seal: what of the account is on its way: sends, and a listener's lease.
ACCOUNT_BUSY = (
    "SELECT (SELECT count(*) FROM outbox_request WHERE account_id = :a AND state = 'sending')"
    " + (SELECT count(*) FROM lease WHERE name = 'listener:' || :a AND expires_at >= :at)"
)
# The account's customers with automatic replies still to send.
UNSENT_AUTO_CUSTOMERS = (
    "SELECT DISTINCT customer_id FROM outbox_request WHERE account_id = :a AND origin = 'auto' AND state = 'pending'"
)
# worker.audit.ledger_audit.
STATES_OF_ACCOUNT = "SELECT request_id, batch_id, state FROM outbox_request WHERE account_id = :a"

# runtime.placement.slices, an account moving between shards: the account's rows (:a) as its
# slice carries them, their removal.
SLICE = "SELECT * FROM outbox_request WHERE account_id = :a"
DELETE_OF_ACCOUNT = "DELETE FROM outbox_request WHERE account_id = :a"


# runtime.inbound.checkpoints: the account's requests waiting for or in their attempt.
OPEN_COUNT = (
    "SELECT count(*) FROM outbox_request INDEXED BY outbox_open_by_customer"
    " WHERE account_id = :a AND state IN ('pending', 'sending')"
)
