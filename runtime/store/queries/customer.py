"""The `customer` table's statements."""

from runtime.store.queries import message_search, route
from runtime.store.queries.inbound_message import AGENT_INPUT_ROLES

HANDLING = "SELECT handling_paused, handling_epoch, handling_reason FROM customer WHERE id = :c"
# A pause bumps the handling epoch: automatic work admitted under an older epoch is stale. The
# agent's handoff (:h) leaves the conversation waiting for the shop; an operator's is theirs.
PAUSE_HANDLING = (
    "UPDATE customer SET handling_paused = 1, handling_epoch = handling_epoch + 1,"
    " handling_reason = :r, handed_off = :h,"
    " status = CASE WHEN :h THEN 'waiting' ELSE 'open' END, status_at = :at WHERE id = :c"
)
# Handing back: nobody waits for the shop any more (a resolve sets its own status after this).
RESUME_HANDLING = (
    "UPDATE customer SET handling_paused = 0, handling_reason = NULL,"
    " status = CASE WHEN status = 'waiting' THEN 'open' ELSE status END WHERE id = :c"
)


def effective_status(c: str) -> str:
    """SQL of the status of customer row `c` as it reads at :now: a resolved or snoozed
    conversation is open again once the buyer writes after it was set, a snoozed one also when
    its time comes (runtime.customers.assignment)."""
    return (
        f"CASE WHEN {c}.status IN ('resolved', 'snoozed') AND ({c}.snoozed_until <= :now"
        f" OR EXISTS (SELECT 1 FROM inbound_message m WHERE m.customer_id = {c}.id AND m.id > {c}.status_after"
        f" AND m.sender_role = 'external' AND m.origin = 'live')) THEN 'open' ELSE {c}.status END"
    )


# A conversation's place in the team's inbox (runtime.customers.assignment.Assignment).
ASSIGNMENT = (
    "SELECT c.id AS customer_id, c.assignee, " + effective_status("c") + " AS status, c.snoozed_until,"
    " c.handling_paused, c.handling_reason FROM customer c WHERE c.id = :c"
)
ASSIGN = "UPDATE customer SET assignee = :o WHERE id = :c"
# An operator takes a conversation already paused (a handoff nobody took): theirs, and open.
TAKE_PAUSED = (
    "UPDATE customer SET assignee = :o, handling_reason = :r, status = 'open', status_at = :at"
    " WHERE id = :c AND handling_paused"
)
# A new status, as of the conversation's newest message (a buyer's message after it reopens it).
SET_STATUS = (
    "UPDATE customer SET status = :s, status_at = :at, snoozed_until = :until,"
    " status_after = coalesce((SELECT max(id) FROM inbound_message WHERE customer_id = :c), 0) WHERE id = :c"
)

# Handoffs nobody has taken yet (the agent asked for a human; no operator took over).
WAITING_COUNT = "SELECT count(*) FROM customer WHERE status = 'waiting' AND handling_paused"
# The newest handoffs nobody has taken (id, name for people), of either source: what the console notifies.
WAITING_NAMED = (
    "SELECT c.id, coalesce(c.title, (SELECT m.sender_name FROM inbound_message m WHERE m.customer_id = c.id"
    " AND m.sender_role = 'external' ORDER BY m.id DESC LIMIT 1), c.conversation_id)"
    " FROM customer c WHERE c.status = 'waiting' AND c.handling_paused ORDER BY c.last_activity_at DESC LIMIT :n"
)
# The newest conversations assigned to :me (id, name for people).
ASSIGNED_NAMED = (
    "SELECT c.id, coalesce(c.title, (SELECT m.sender_name FROM inbound_message m WHERE m.customer_id = c.id"
    " AND m.sender_role = 'external' ORDER BY m.id DESC LIMIT 1), c.conversation_id)"
    " FROM customer c WHERE c.assignee = :me ORDER BY c.last_activity_at DESC LIMIT :n"
)
# What needs a human now: handoffs waiting, sends result-unknown, sends failed.
NOTICE_COUNTS = (
    "SELECT (SELECT count(*) FROM customer WHERE status = 'waiting' AND handling_paused),"
    " (SELECT count(*) FROM outbox_request WHERE state = 'result-unknown'),"
    " (SELECT count(*) FROM outbox_request WHERE state = 'failed')"
)

DELETE = "DELETE FROM customer WHERE id = :c"
CONVERSATION_BY_ID = (
    "SELECT id, account_id, conversation_id, conversation_type, last_activity_at FROM customer WHERE id = :c"
)
SESSION_ID = "SELECT session_id FROM customer WHERE id = :c"
# Make `:new` the customer's current session if `:old` still is (None: they have none).
SWITCH_SESSION = "UPDATE customer SET session_id = :new WHERE id = :c AND session_id IS :old"

# Column expressions over a customer row `c` (the statements below embed them, and so may a
# statement of another stage that reads the customer):
# The customer's (:c) reads its session has not been told of, as one JSON column: a turn reads
# them beside what else it reads at that point, a statement fewer (buyer_read.UNDELIVERED, as
# rows; runtime.outbox.read_receipts.reads_from_json).
UNDELIVERED_READS_JSON = (
    "(SELECT json_group_array(json_object('account_id', account_id, 'platform_message_id', platform_message_id,"
    " 'request_id', request_id, 'customer_id', customer_id, 'reader_id', reader_id, 'read_at', read_at,"
    " 'stored_at', stored_at)) FROM (SELECT * FROM buyer_read WHERE customer_id = :c AND delivered_at IS NULL"
    " ORDER BY read_at))"
)
# Is a sent manual message's mirror waiting for its echo in the conversation (SQL over the
# named parameters :account_id and :conversation_id)? (runtime.outbox.requests.adopt_console_echoes)
PLACEHOLDER_WAITING = (
    "EXISTS (SELECT 1 FROM inbound_message WHERE account_id = :account_id AND conversation_id = :conversation_id"
    " AND platform_message_id >= 'console-manual:' AND platform_message_id < 'console-manual;')"
)
# What `recipient_of` decides from (runtime.outbox.recipients.RecipientFacts), as columns over a
# customer `c` joined with its account `a`. The stored platform peer is the one the platform
# paged with the conversation, else the `peer_id` an operator stored on the conversation's
# specific direct route (a shop writing first to a buyer who has not written yet). The webhook
# (the latest kept with a message of the customer, as inbound_message.LATEST_WEBHOOK) is looked
# up only for a DingTalk direct conversation without a staff id.
_RECIPIENT_COLUMNS = (
    "c.conversation_type, c.conversation_id,"
    " coalesce(c.direct_peer_id, (SELECT r.peer_id FROM route r WHERE r.account_id = c.account_id"
    "  AND r.conversation_type = 'direct' AND r.target = 'specific' AND r.conversation_id = c.conversation_id"
    "  ORDER BY r.created_at LIMIT 1)),"
    " a.platform,"
    " (SELECT sender_id FROM inbound_message m WHERE m.customer_id = c.id AND m.sender_role = 'external'"
    "  ORDER BY m.id DESC LIMIT 1),"
    " CASE WHEN a.platform = 'dingtalk' AND c.conversation_type = 'direct'"
    "  AND (c.direct_peer_id IS NULL OR substr(c.direct_peer_id, 1, 2) = '$:')"
    " THEN (SELECT m.reply_webhook FROM inbound_message m WHERE m.customer_id = c.id"
    " AND m.reply_webhook IS NOT NULL ORDER BY m.id DESC LIMIT 1) END"
)
# runtime.outbox.recipients.direct_recipient.
RECIPIENT_FACTS = f"SELECT {_RECIPIENT_COLUMNS} FROM customer c JOIN account a ON a.id = c.account_id WHERE c.id = :c"
# runtime.outbox.requests.reply_check: what an automatic reply's registration reads, in one
# statement, before it registers (ReplyCheck, in this order).
REPLY_CHECK = (
    "SELECT NOT c.handling_paused AND c.handling_epoch = :e,"
    " (SELECT request_id FROM outbox_request WHERE customer_id = :c AND batch_id = :b AND body = :t"
    "  AND origin = 'auto' ORDER BY created_at LIMIT 1),"
    " (SELECT state FROM account_placement WHERE account_id = c.account_id),"
    " a.connection_intent = 'connected' AND a.authorization = 'ready',"
    " coalesce((SELECT generation = :g AND enabled FROM route WHERE id = :route), 0)"
    f" AND coalesce({route.governing_id('c')} = :route, 0),"
    " EXISTS (SELECT 1 FROM outbox_request WHERE customer_id = :c AND state IN ('pending', 'sending')),"
    f" {UNDELIVERED_READS_JSON}, {_RECIPIENT_COLUMNS} FROM customer c JOIN account a ON a.id = c.account_id"
    " WHERE c.id = :c"
)
# Whether an automatic send (:c, its batch :b) is stale (runtime.outbox.requests._auto_send_is_stale).
AUTO_SEND_FACTS = (
    f"SELECT c.handling_paused, c.handling_epoch, r.generation, r.enabled AND {route.governing_id('c')} = b.route_id,"
    " a.connection_intent = 'connected' AND a.authorization = 'ready' FROM customer c"
    " JOIN admission_batch b ON b.customer_id = c.id LEFT JOIN route r ON r.id = b.route_id"
    " JOIN account a ON a.id = c.account_id WHERE c.id = :c AND b.id = :b"
)
HANDOFF_BY_CONVERSATION = "SELECT id, handed_off FROM customer WHERE account_id = :a AND conversation_id = :c"

BY_ID = "SELECT * FROM customer WHERE id = :id"


def nothing_to_admit_term(customer: str) -> str:
    """For a known customer not paused (any other answer comes from the full evaluation), SQL
    of the customer id `customer`: no open batch and no buyer input waiting (a line whose sender
    is one of AGENT_INPUT_ROLES)."""
    return (
        f"(EXISTS (SELECT 1 FROM customer cu WHERE cu.id = {customer} AND NOT cu.handling_paused)"
        f" AND NOT EXISTS (SELECT 1 FROM admission_batch ob WHERE ob.customer_id = {customer}"
        "  AND ob.state IN ('claimed', 'committed'))"
        f" AND NOT EXISTS (SELECT 1 FROM inbound_message im WHERE im.customer_id = {customer}"
        f"  AND im.state = 'pending' AND im.sender_role IN {AGENT_INPUT_ROLES}))"
    )


# Admission has nothing to decide for the customer :c (`nothing_to_admit_term`).
NOTHING_TO_ADMIT = "SELECT " + nothing_to_admit_term(":c")


# The open batch's lines, in id order (a subquery's order, which SQLite's aggregate keeps).
_BATCH_LINES_JSON = (
    "(SELECT json_group_array(json_object('id', m.id, 'sender_role', m.sender_role, 'sender_name', m.sender_name,"
    " 'content_type', m.content_type, 'body', m.body, 'received_at', m.received_at, 'occurred_at', m.occurred_at))"
    " FROM (SELECT * FROM inbound_message WHERE batch_id = b.id ORDER BY id) m)"
)


def turn_rows(columns: str) -> str:
    """What a turn of the customer :c starts from, in one read: `columns` of the customer (c),
    its open batch (b), its account (a) and its current session's header (s); the buyer's reads
    its session has not been told of (UNDELIVERED_READS_JSON); the open batch's lines as JSON;
    whether a question the agent asked waits (:asked, :offered)."""
    return (
        f"SELECT {columns}, {UNDELIVERED_READS_JSON}, {_BATCH_LINES_JSON},"
        " EXISTS (SELECT 1 FROM pending_question q WHERE q.customer_id = c.id AND q.state IN (:asked, :offered))"
        " FROM customer c"
        " LEFT JOIN admission_batch b ON b.customer_id = c.id AND b.state IN ('claimed', 'committed')"
        " LEFT JOIN account a ON a.id = c.account_id LEFT JOIN agent_session s ON s.id = c.session_id"
        " WHERE c.id = :c ORDER BY b.created_at LIMIT 1"
    )


_OPEN_BATCH = (
    "SELECT id FROM admission_batch WHERE customer_id = customer.id AND state IN ('claimed', 'committed')"
    " ORDER BY created_at LIMIT 1"
)
# runtime.inbound.ingest: a conversation group's customer, created (its id above the shard's
# base, customer_id_high) or brought up to date.
UPSERT_FROM_GROUP = (
    "INSERT INTO customer (id, account_id, conversation_id, conversation_type, title, direct_peer_id,"
    " last_activity_at) VALUES (coalesce((SELECT last FROM customer_id_high WHERE base = :base), :base) + 1,"
    " :account_id, :conversation_id, :conversation_type, :title, :peer, :at)"
    " ON CONFLICT (account_id, conversation_id) DO UPDATE SET"
    " last_activity_at = max(last_activity_at, excluded.last_activity_at),"
    " title = coalesce(excluded.title, title),"
    " direct_peer_id = coalesce(excluded.direct_peer_id, direct_peer_id)"
    # The customer's row as admission reads it, its open batch, and whether a manual send's
    # mirror waits for its echo: read in passing, not again.
    f" RETURNING *, ({_OPEN_BATCH}) AS open_batch, {PLACEHOLDER_WAITING} AS placeholder"
)
BY_CONVERSATION = "SELECT id FROM customer WHERE account_id = ? AND conversation_id = ?"

# runtime.placement.slices: the account's customers; how many of the slice's customer ids (:ids,
# a JSON array) another account holds here.
IDS_OF_ACCOUNT = "SELECT id FROM customer WHERE account_id = :a ORDER BY id"
TAKEN_ELSEWHERE = "SELECT count(*) FROM customer WHERE account_id != :a AND id IN (SELECT value FROM json_each(:ids))"

# runtime.placement.slices, an account moving between shards: the account's rows (:a) as its
# slice carries them, their removal.
SLICE = "SELECT * FROM customer WHERE account_id = :a"
DELETE_OF_ACCOUNT = "DELETE FROM customer WHERE account_id = :a"


# runtime.customers.summaries.list_customers: the page's rows first (newest activity first), then
# their names and newest lines; {messages}: a search's (queries.message_search: MATCHED or SCANNED).
_LIST_PAGE = (
    "SELECT c.*,"
    " (SELECT m.sender_name FROM inbound_message m WHERE m.customer_id = c.id"
    "  AND m.sender_role = 'external' ORDER BY m.id DESC LIMIT 1) AS name,"
    # The newest line's type and (a text's start of) body, as a JSON pair: runtime.agent.rendering says it.
    " (SELECT json_array(m.content_type, CASE WHEN m.content_type IN ('text', 'markdown')"
    "  THEN substr(m.body, 1, 80) ELSE m.body END) FROM inbound_message m WHERE m.customer_id = c.id"
    "  AND m.sender_role NOT IN ('ai', 'operator-dm') ORDER BY m.id DESC LIMIT 1) AS newest"
    " FROM (SELECT c.id, c.account_id, c.conversation_id, c.conversation_type, c.title,"
    "  c.last_activity_at, c.handling_paused, c.handling_reason, c.assignee, c.snoozed_until, c.session_id,"
    f"  {effective_status('c')} AS status"
    "  FROM customer c JOIN account a ON a.id = c.account_id"
    "  WHERE a.simulated = :sim AND (:a IS NULL OR c.account_id = :a)"
    "  AND (:at IS NULL OR c.last_activity_at < :at OR (c.last_activity_at = :at AND c.id < :id))"
    "  AND (:paused IS NULL OR c.handling_paused = :paused)"
    # :view: 'mine' (assigned to :me), 'unassigned', or NULL (everyone's); :status: one status or NULL.
    "  AND (:view IS NULL OR (:view = 'mine' AND c.assignee = :me) OR (:view = 'unassigned' AND c.assignee IS NULL))"
    f"  AND (:status IS NULL OR {effective_status('c')} = :status)"
    "  AND (:q IS NULL OR coalesce(c.title, '') LIKE :q ESCAPE '!' OR c.conversation_id LIKE :q ESCAPE '!'"
    "   OR c.id IN (SELECT m.customer_id FROM inbound_message m WHERE m.id IN ({messages})))"
    "  ORDER BY c.last_activity_at DESC, c.id DESC LIMIT :n) c"
    " ORDER BY c.last_activity_at DESC, c.id DESC"
)
LIST_PAGE_MATCHED = _LIST_PAGE.replace("{messages}", message_search.MATCHED)
LIST_PAGE = _LIST_PAGE.replace("{messages}", message_search.SCANNED)  # a short search, or none

DISPLAY_NAME = (
    "SELECT coalesce(c.title, (SELECT m.sender_name FROM inbound_message m WHERE m.customer_id = c.id"
    " AND m.sender_role = 'external' ORDER BY m.id DESC LIMIT 1)) FROM customer c WHERE c.id = :c"
)

SIMULATED_IDS = "SELECT c.id FROM customer c WHERE c.account_id IN (SELECT id FROM account WHERE simulated = 1)"

KNOWN_AND_NEWEST_MESSAGE = (
    "SELECT (SELECT 1 FROM customer WHERE id = :c),"
    " coalesce((SELECT max(id) FROM inbound_message WHERE customer_id = :c), 0)"
)


def unread(ids: int) -> str:
    """Unread buyer lines of `ids` customers (`?` each, after the reader's `?`) since the reader's watermark."""
    return (
        "SELECT c.id, (SELECT count(*) FROM inbound_message m"
        " WHERE m.customer_id = c.id AND m.sender_role IN ('external', 'human-native') AND m.origin = 'live' AND m.id >"
        " coalesce((SELECT watermark FROM reader_watermark w WHERE w.customer_id = c.id AND w.reader = ?), 0))"
        f" FROM customer c WHERE c.id IN ({', '.join('?' * ids)})"
    )


# runtime.inbound.history_import: the type a stored conversation has (an import must agree with it).
TYPE_OF_CONVERSATION = "SELECT conversation_type FROM customer WHERE account_id = ? AND conversation_id = ?"
