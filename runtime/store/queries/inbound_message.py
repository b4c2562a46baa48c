"""The `inbound_message` table's statements."""

from runtime.store.queries.account import of_source
from runtime.store.queries.media import INBOUND_MEDIA

# What the agent answers: the counterpart's and a native operator's lines, and an operator's
# direct message to the agent under test (`operator-dm`, runtime.agent.operator_dm: never from a
# platform, so never classified). Admission, quiet checks and pending counts mean these.
AGENT_INPUT_ROLES = "('external', 'human-native', 'operator-dm')"


DELETE_OF_CUSTOMER = "DELETE FROM inbound_message WHERE customer_id = :c"
# What erasing the customer removes (its messages, replies, batches, alerts) and the platform
# time of its newest stored message.
CUSTOMER_COUNTS = (
    "SELECT (SELECT count(*) FROM inbound_message WHERE customer_id = :c),"
    " (SELECT count(*) FROM outbox_request WHERE customer_id = :c),"
    " (SELECT count(*) FROM admission_batch WHERE customer_id = :c),"
    " (SELECT count(*) FROM alert WHERE customer_id = :c OR"
    " request_id IN (SELECT request_id FROM outbox_request WHERE customer_id = :c)),"
    " (SELECT coalesce(max(occurred_at), 0) FROM inbound_message WHERE customer_id = :c)"
)
# Retention: input no batch waits on, older than `:cutoff`, `:n` at a time.
PRUNE = (
    "DELETE FROM inbound_message WHERE id IN (SELECT id FROM inbound_message m WHERE received_at < :cutoff"
    " AND state NOT IN ('pending', 'claimed') AND NOT EXISTS (SELECT 1 FROM admission_batch b"
    "  WHERE b.id = m.batch_id AND b.state IN ('claimed', 'committed')) LIMIT :n)"
)
# A conversation as an operator reads it, newest first from the cursor (`:at`, `:key`): the
# buyer's side (not the platform's echoes of our own sends) and the outbox's requests.
TRANSCRIPT_LINES = (
    "SELECT * FROM ("
    " SELECT printf('m%019d', id) AS key, received_at AS at, sender_role AS role, sender_name AS name,"
    "  content_type, body, NULL AS request_id, NULL AS state, NULL AS error_code, 0 AS read, NULL AS operator,"
    "  occurred_at"
    " FROM inbound_message WHERE customer_id = :c AND sender_role NOT IN ('ai', 'human-console')"
    " UNION ALL"
    " SELECT printf('r%019d', r.rowid), r.created_at, r.origin, NULL, r.content_type, r.body, r.request_id, r.state,"
    "  r.error_code, EXISTS (SELECT 1 FROM buyer_read b WHERE b.account_id = r.account_id"
    "   AND b.platform_message_id = r.platform_message_id), r.operator, NULL"
    " FROM outbox_request r WHERE r.customer_id = :c"
    ") WHERE :at IS NULL OR at < :at OR (at = :at AND key < :key) ORDER BY at DESC, key DESC LIMIT :n"
)
# Changes whenever the transcript or the customer's handling does.
TRANSCRIPT_VERSION = (
    "SELECT (SELECT max(id) FROM inbound_message WHERE customer_id = :c),"
    " (SELECT max(updated_at) FROM outbox_request WHERE customer_id = :c),"
    " (SELECT max(updated_at) FROM admission_batch WHERE customer_id = :c),"  # a turn that only spoke
    f" (SELECT count(*) FROM inbound_message WHERE customer_id = :c AND {INBOUND_MEDIA}"
    "  AND json_extract(body, '$.media') IS NOT NULL),"  # an image, a file, voice or video fetched
    " (SELECT count(*) FROM buyer_read WHERE customer_id = :c),"
    " (SELECT max(id) FROM operator_note WHERE customer_id = :c),"
    " handling_paused, handling_reason, assignee, status, status_at, snoozed_until FROM customer WHERE id = :c"
)
# `im_query_history`: the conversation's messages before `:before` (None: the newest), newest first.
HISTORY_PAGE = (
    "SELECT id, sender_role, sender_name, content_type, body, received_at, occurred_at FROM inbound_message"
    " WHERE customer_id = :c AND sender_role != 'operator-dm' AND (:before IS NULL OR id < :before)"
    " ORDER BY id DESC LIMIT :n"
)
RECORD_OPERATOR_DM = (
    "INSERT INTO inbound_message (customer_id, account_id, conversation_id, platform_message_id, sender_id,"
    " sender_role, content_type, body, occurred_at, received_at, mention, origin, state)"
    " VALUES (:c, :a, :conv, :m, 'operator', :role, 'text', :body, :at, :at, 1, 'live', 'pending') RETURNING id"
)
BODY_BY_PLATFORM_ID = (
    "SELECT id, body FROM inbound_message"
    " WHERE account_id = :a AND conversation_id = :conv AND platform_message_id = :m"
)
# An operator DM's state, the batch that took it (its state) and the customer's current session.
ANSWERING_BATCH = (
    "SELECT m.state, b.id, b.state, c.session_id FROM inbound_message m"
    " LEFT JOIN admission_batch b ON b.id = m.batch_id JOIN customer c ON c.id = m.customer_id"
    " WHERE m.id = :m"
)
# A simulated conversation's buyer messages after `:after` (a real one's: none), in received order:
# the anchors of its script clock (runtime.agent.script_clock).
SCRIPT_TIMES = (
    "SELECT received_at, occurred_at, id FROM inbound_message"
    " WHERE customer_id = :c AND sender_role = 'external' AND id > :after"
    " AND EXISTS (SELECT 1 FROM customer c JOIN account a ON a.id = c.account_id WHERE c.id = :c AND a.simulated)"
    " ORDER BY received_at, id"
)

# The latest session webhook kept with a message of the customer (:c), as stored
# (runtime.outbox.recipients.reply_webhook; customer.RECIPIENT_FACTS reads the same for its row).
LATEST_WEBHOOK = (
    "SELECT m.reply_webhook FROM inbound_message m WHERE m.customer_id = :c"
    " AND m.reply_webhook IS NOT NULL ORDER BY m.id DESC LIMIT 1"
)
# runtime.outbox.report: the account's counterpart lines with the auto requests of their batch.
REQUESTS_BY_MESSAGE = (
    "SELECT m.conversation_id, m.platform_message_id, o.request_id FROM inbound_message m"
    " LEFT JOIN outbox_request o ON o.customer_id = m.customer_id AND o.batch_id = m.batch_id"
    " WHERE m.account_id = :a AND m.sender_role IN ('external', 'human-native')"
)
COUNTERPART_LINES = (
    "SELECT platform_message_id, batch_id, state FROM inbound_message"
    " WHERE customer_id = :c AND sender_role IN ('external', 'human-native')"
)
# Anything of the customer in flight: a batch before its turn ends, a reply waiting to go out.
CUSTOMER_BUSY = (
    "SELECT 1 FROM inbound_message WHERE customer_id = :c"
    " AND (state = 'claimed' OR (state = 'pending' AND sender_role = 'operator-dm'))"
    " UNION ALL SELECT 1 FROM admission_batch WHERE customer_id = :c AND state IN ('claimed', 'committed')"
    " UNION ALL SELECT 1 FROM outbox_request WHERE customer_id = :c AND state IN ('pending', 'sending')"
    " LIMIT 1"
)


# A sent manual message is mirrored as the console operator's inbound, under a placeholder id
# that the platform's echo takes over later (ADOPT_PLACEHOLDER).
MIRROR_MANUAL = (
    "INSERT OR IGNORE INTO inbound_message (customer_id, account_id, conversation_id, platform_message_id,"
    " sender_id, sender_role, content_type, body, occurred_at, received_at, origin, state)"
    " SELECT r.customer_id, r.account_id, r.conversation_id, 'console-manual:' || r.request_id, 'console',"
    " 'human-console', r.content_type,"
    " CASE r.content_type WHEN 'image' THEN (SELECT json_object('ref', 'media:' || sha256, 'media', 'stored',"
    "  'sha256', sha256, 'mime', mime, 'size', size) FROM media WHERE sha256 = r.media_sha256) ELSE r.body END,"
    " :at, :at, 'live', CASE c.handling_paused WHEN 1 THEN 'suppressed' ELSE 'pending' END"
    " FROM outbox_request r JOIN customer c ON c.id = r.customer_id"
    " WHERE r.request_id = :r AND r.origin = 'manual' AND NOT EXISTS (SELECT 1 FROM inbound_message m"
    "  WHERE m.account_id = r.account_id AND m.conversation_id = r.conversation_id"
    "  AND m.platform_message_id = r.platform_message_id)"
)
ADOPT_PLACEHOLDER = (
    "UPDATE inbound_message SET platform_message_id = ?"
    " WHERE account_id = ? AND conversation_id = ? AND platform_message_id = 'console-manual:' || ?"
)


# Lines by state, of the accounts of_source keeps (:sim, see account.of_source).
STATE_COUNTS = f"SELECT state, count(*) FROM inbound_message WHERE {of_source('account_id')} GROUP BY state"


EXTERNAL_COUNT = "SELECT count(*) FROM inbound_message WHERE sender_role = 'external'"


# The first :n lines of the customer :c waiting for admission: id, platform id, whether the
# agent answers it (its sender is one of AGENT_INPUT_ROLES, runtime.inbound.classification),
# mention, received_at.
PENDING = (
    f"SELECT id, platform_message_id, sender_role IN {AGENT_INPUT_ROLES}, mention, received_at"
    " FROM inbound_message WHERE customer_id = :c AND state = 'pending' ORDER BY id LIMIT :n"
)


# The customer :c's input waiting for the agent (a sender of AGENT_INPUT_ROLES): how many
# lines, whether one mentions the account, when the oldest was received.
LIVE_INPUT = (
    "SELECT count(*), max(mention IS 1), min(received_at) FROM inbound_message"
    f" WHERE customer_id = :c AND state = 'pending' AND sender_role IN {AGENT_INPUT_ROLES}"
)


CLAIM = (
    "UPDATE inbound_message SET state = 'claimed', batch_id = :b"
    " WHERE customer_id = :c AND state = 'pending' AND id BETWEEN :lo AND :hi"
)
COMMIT = "UPDATE inbound_message SET state = 'committed' WHERE batch_id = :b AND state = 'claimed'"
SUPPRESS_CLAIMED = "UPDATE inbound_message SET state = 'suppressed' WHERE batch_id = :b AND state = 'claimed'"
SUPPRESS_PENDING = "UPDATE inbound_message SET state = 'suppressed' WHERE customer_id = :c AND state = 'pending'"


# Customers of the account :a (NULL: all) with buyer input no batch has claimed yet (a
# sender of AGENT_INPUT_ROLES): what admission is for.
WAITING_CUSTOMERS = (
    "SELECT DISTINCT customer_id FROM inbound_message WHERE state = 'pending'"
    f" AND sender_role IN {AGENT_INPUT_ROLES}"
    " AND (:a IS NULL OR account_id = :a) ORDER BY customer_id"
)


# One customer at a time in the pending index, from the one after :after up to :until (a
# skip scan: a few index probes per customer, however many of its lines wait), each kept when
# a line of its (a sender of AGENT_INPUT_ROLES) waited past the grace, received before :t
# (its oldest usually did); up to :n. What a pass costs grows with the customers it hands
# out, never with the lines waiting behind them.
OVERDUE_CUSTOMERS = (
    "WITH RECURSIVE next(customer_id) AS ("
    " SELECT (SELECT min(customer_id) FROM inbound_message WHERE state = 'pending' AND customer_id > :after)"
    " UNION ALL"
    " SELECT (SELECT min(customer_id) FROM inbound_message WHERE state = 'pending' AND customer_id > n.customer_id)"
    " FROM next n WHERE n.customer_id <= :until)"
    " SELECT customer_id FROM next n WHERE customer_id <= :until AND EXISTS (SELECT 1 FROM inbound_message m"
    f" WHERE m.customer_id = n.customer_id AND m.state = 'pending' AND m.sender_role IN {AGENT_INPUT_ROLES}"
    " AND m.received_at < :t) LIMIT :n"
)


# Who wrote an inbound message (runtime.inbound.classification): an echo of a sent automatic
# outbox request is ours (`ai`), one of a sent manual request the console operator's; else the
# provider's evidence.
_SENDER_ROLE = (
    "coalesce((SELECT CASE origin WHEN 'auto' THEN 'ai' ELSE 'human-console' END FROM outbox_request"
    " WHERE account_id = {account} AND platform_message_id = {message} AND state = 'sent' LIMIT 1), {evidence})"
)


def sender_role(account: str, message: str, evidence: str) -> str:
    """The sender classification as a SQL expression over the given placeholders or column references."""
    return _SENDER_ROLE.format(account=account, message=message, evidence=evidence)


# runtime.inbound.classification.classify_inbound_sender: the expression INSERT runs, alone.
CLASSIFY_SENDER = "SELECT " + sender_role(":a", ":m", ":e")

# runtime.inbound.ingest: a page's messages as ingestion stores them.
# Sender classification (runtime.inbound.classification) runs inside the insert. 'ai' rows are never admitted.
# Live input for a customer whose automatic handling is paused is kept but never admitted.
# A duplicate only raises mention evidence to true; everything else stays as first committed.
INSERT = (
    "INSERT INTO inbound_message (customer_id, account_id, conversation_id, platform_message_id,"
    " sender_id, sender_name, sender_role, content_type, body, occurred_at, received_at, mention,"
    " direct_peer_id, origin, state, reply_webhook)"
    " SELECT ?1, ?2, ?3, ?4, ?5, ?6, role, ?7, ?8, ?9, ?10, ?11, ?12, ?13,"
    " CASE WHEN ?13 = 'history' THEN 'history' WHEN role = 'ai' THEN 'ignored'"
    "  WHEN ?15 THEN 'suppressed' ELSE 'pending' END, ?16"
    f" FROM (SELECT {sender_role('?2', '?4', '?14')} AS role) WHERE true"
    " ON CONFLICT (account_id, conversation_id, platform_message_id) DO UPDATE SET mention = 1"
    " WHERE excluded.mention = 1 AND inbound_message.mention IS NOT 1"
)
# runtime.inbound.media: a buyer's image, file, voice or video not fetched yet (V27's partial index
# serves it). A voice message without a reference (its recognition only) has nothing to fetch.
_PENDING_MEDIA = (
    f"{INBOUND_MEDIA} AND json_extract(body, '$.media') IS NULL AND json_extract(body, '$.ref') IS NOT NULL"
)
# runtime.inbound.ingest: a message of the page just stored whose media is still to fetch.
PENDING_MEDIA_ID = (
    f"SELECT id FROM inbound_message WHERE {_PENDING_MEDIA}"
    " AND account_id = ? AND conversation_id = ? AND platform_message_id = ?"
)
# Media not fetched yet that came in before :t (their own fetch is overdue) and not before :old,
# oldest first; not one whose backoff after a transient failure runs past :now (its `retry_at`).
MEDIA_TO_FETCH = (
    f"SELECT id FROM inbound_message WHERE {_PENDING_MEDIA} AND received_at < :t AND received_at >= :old"
    " AND coalesce(json_extract(body, '$.retry_at'), 0) <= :now ORDER BY id LIMIT :n"
)
MEDIA_TOO_OLD = f"SELECT id FROM inbound_message WHERE {_PENDING_MEDIA} AND received_at < :old ORDER BY id LIMIT :n"
EXPIRE_MEDIA = (
    "UPDATE inbound_message SET body = json_remove(json_set(body, '$.media', 'failed', '$.code', :code),"
    f" '$.retry_at') WHERE id IN (SELECT value FROM json_each(:ids)) AND {_PENDING_MEDIA}"
)
MEDIA_MESSAGE = (
    f"SELECT account_id, body, received_at, content_type FROM inbound_message WHERE id = :m AND {INBOUND_MEDIA}"
)
BODY = "SELECT body FROM inbound_message WHERE id = :m"
# A fetch's outcome, unless another fetcher wrote one first.
RECORD_MEDIA_OUTCOME = f"UPDATE inbound_message SET body = :b WHERE id = :m AND {_PENDING_MEDIA}"
BODIES = "SELECT id, body FROM inbound_message WHERE id IN (SELECT value FROM json_each(:ids))"
# runtime.inbound.checkpoints: input not yet committed to a session. Through the open-state
# indexes (V14): the account's own index would read all it stored.
PENDING_INPUT_COUNT = (
    "SELECT (SELECT count(*) FROM inbound_message INDEXED BY inbound_claimed"
    "  WHERE account_id = :a AND state = 'claimed')"
    " + (SELECT count(*) FROM inbound_message INDEXED BY inbound_pending"
    f"  WHERE account_id = :a AND state = 'pending' AND sender_role IN {AGENT_INPUT_ROLES})"
)

# worker.audit.ledger_audit: the account's buyer messages and how far each got.
BUYER_MESSAGE_STATES = (
    "SELECT conversation_id, platform_message_id, state, batch_id FROM inbound_message"
    " WHERE account_id = :a AND sender_role IN ('external', 'human-native')"
)

# runtime.placement.slices, an account moving between shards: the account's rows (:a) as its
# slice carries them, their removal.
SLICE = "SELECT * FROM inbound_message WHERE account_id = :a ORDER BY id"
DELETE_OF_ACCOUNT = "DELETE FROM inbound_message WHERE account_id = :a"

# The platform's echo arrived before the send (:r) was recorded: classify the stored row again
# with the one rule (now that the request is sent, it says ai or human-console); an ai row is ignored.
_ROW_ROLE = sender_role(
    "inbound_message.account_id", "inbound_message.platform_message_id", "inbound_message.sender_role"
)
RECLASSIFY_EARLY_ECHO = (
    f"UPDATE inbound_message SET sender_role = {_ROW_ROLE},"
    f" state = CASE WHEN state = 'pending' AND {_ROW_ROLE} = 'ai' THEN 'ignored' ELSE state END"
    " WHERE (account_id, conversation_id, platform_message_id) ="
    "  (SELECT account_id, conversation_id, platform_message_id FROM outbox_request WHERE request_id = :r)"
)

# runtime.admission.batches: a customer whose route observes (listens, never answers): its waiting
# input is kept as observed, never admitted, also after the route answers again (only new input is).
OBSERVE_PENDING = "UPDATE inbound_message SET state = 'observed' WHERE customer_id = :c AND state = 'pending'"
# runtime.memory.history: an import batch's messages of one conversation (:ids, a JSON array of
# platform message ids) that are stored as history, as memory archives them, oldest first.
_AS_RENDERED = "id, customer_id, sender_role, sender_name, content_type, body, received_at, occurred_at"
HISTORY_OF_KEYS = (
    f"SELECT {_AS_RENDERED} FROM inbound_message WHERE account_id = :a AND conversation_id = :c"
    " AND state = 'history' AND platform_message_id IN (SELECT value FROM json_each(:ids)) ORDER BY received_at, id"
)
# runtime.memory.history: customers with observed input received in [:since, :until); a customer's.
OBSERVED_CUSTOMERS = (
    "SELECT DISTINCT customer_id FROM inbound_message WHERE state = 'observed'"
    " AND received_at >= :since AND received_at < :until ORDER BY customer_id"
)
OBSERVED_OF_CUSTOMER = (
    f"SELECT {_AS_RENDERED} FROM inbound_message WHERE customer_id = :c AND state = 'observed'"
    " AND received_at >= :since AND received_at < :until ORDER BY received_at, id"
)
