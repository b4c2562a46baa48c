"""The `restore_window` and `restore_held` tables' statements (runtime.store.backup), and what a
restore marks in the other tables: statements about the restore, run once, in the restored copy
before it is put in place, so they live with it."""

# A restore's window: the backup's delivery snapshot (:at) to the restore (:now).
OPEN = (
    "INSERT INTO restore_window (backup_id, shard, source_instance, backup_at, restored_at)"
    " VALUES (:b, :s, :i, :at, :now) RETURNING id"
)
WINDOWS = "SELECT id, backup_id, shard, source_instance, backup_at, restored_at FROM restore_window ORDER BY id"

# Replies not settled at the backup: the lost host may have sent them after it. Each is held
# (`send`), its attempt in flight ends `unknown`, one that had none gets an `unknown` attempt of
# the restore's (result-unknown always follows an attempt: a receipt query reads the last one),
# and all become result-unknown: never sent blindly again, settled by the platform's receipt or
# echo, or by an operator (SPEC 3.8). The alert trigger of V17 raises each one's alert.
HOLD_SENDS = (
    "INSERT OR IGNORE INTO restore_held (window_id, kind, ref, customer_id)"
    " SELECT :w, 'send', request_id, customer_id FROM outbox_request WHERE state IN ('pending', 'sending')"
)
END_STARTED_ATTEMPTS = (
    "UPDATE outbox_attempt SET state = 'unknown', finished_at = :now, error_code = :code WHERE state = 'started'"
)
ADD_UNKNOWN_ATTEMPTS = (
    "INSERT INTO outbox_attempt (request_id, attempt_no, state, owner, started_at, finished_at, error_code)"
    " SELECT r.request_id, coalesce((SELECT max(a.attempt_no) FROM outbox_attempt a"
    "  WHERE a.request_id = r.request_id), 0) + 1, 'unknown', :owner, :now, :now, :code"
    " FROM outbox_request r WHERE r.state = 'pending'"
)
SENDS_UNKNOWN = (
    "UPDATE outbox_request SET state = 'result-unknown', error_code = :code, updated_at = :now"
    " WHERE state IN ('pending', 'sending')"
)

# Batches admitted and not done at the backup: the lost host may have answered them. Held
# (`batch`), their claimed lines kept and never admitted again, the batches revoked.
HOLD_BATCHES = (
    "INSERT OR IGNORE INTO restore_held (window_id, kind, ref, customer_id)"
    " SELECT :w, 'batch', id, customer_id FROM admission_batch WHERE state IN ('claimed', 'committed')"
)
SUPPRESS_BATCH_LINES = (
    "UPDATE inbound_message SET state = 'suppressed' WHERE state = 'claimed'"
    " AND batch_id IN (SELECT ref FROM restore_held WHERE window_id = :w AND kind = 'batch')"
)
REVOKE_BATCHES = (
    "UPDATE admission_batch SET state = 'revoked', updated_at = :now WHERE state IN ('claimed', 'committed')"
)

# Input waiting for admission at the backup: likewise (`input`).
HOLD_INPUT = (
    "INSERT OR IGNORE INTO restore_held (window_id, kind, ref, customer_id)"
    " SELECT :w, 'input', id, customer_id FROM inbound_message WHERE state = 'pending'"
)
SUPPRESS_INPUT = "UPDATE inbound_message SET state = 'suppressed' WHERE state = 'pending'"

# `kefu restore-gap`: per conversation, what the window :w held of each kind.
HELD_BY_CONVERSATION = (
    "SELECT h.customer_id, c.account_id, c.conversation_id,"
    " sum(h.kind = 'input'), sum(h.kind = 'batch'), sum(h.kind = 'send'), sum(h.kind = 'gap')"
    " FROM restore_held h LEFT JOIN customer c ON c.id = h.customer_id WHERE h.window_id = :w"
    " GROUP BY h.customer_id ORDER BY h.customer_id"
)
# The buyer lines the window :w held (held input, a held batch's lines, input of the gap), as
# (account, conversation, platform message id): what the fault suite's audit reads.
HELD_LINES = (
    "SELECT m.account_id, m.conversation_id, m.platform_message_id FROM restore_held h"
    " JOIN inbound_message m ON m.id = CAST(h.ref AS INTEGER) WHERE h.window_id = :w AND h.kind IN ('input', 'gap')"
    " UNION SELECT m.account_id, m.conversation_id, m.platform_message_id FROM restore_held h"
    " JOIN inbound_message m ON m.batch_id = h.ref WHERE h.window_id = :w AND h.kind = 'batch'"
)

# Identifiers the lost host may have given after the backup are never given again: new
# customers' ids continue `:gap` above the shard's high-water mark (customer_id_high, V13; the
# shard's range starts at :base), and each customer's session continues under a new number
# (runtime.store.backup._continue_sessions). Ids name sessions, memory scopes and (by hash)
# automatic request ids, which the platform keeps as each send's client reference.
SKIP_CUSTOMER_IDS = (
    "INSERT INTO customer_id_high (base, last) VALUES (:base, :base + :gap)"
    " ON CONFLICT (base) DO UPDATE SET last = last + :gap"
)
CUSTOMER_SESSIONS = "SELECT id, session_id FROM customer ORDER BY id"
# The session logs a backup copies: those the delivery snapshot names (a log begun after it
# belongs to a customer or a session the backup does not hold).
NAMED_SESSIONS = (
    "SELECT id FROM agent_session UNION SELECT session_id FROM customer WHERE session_id IS NOT NULL"
    " UNION SELECT session_id FROM damaged_session UNION SELECT replaced_by FROM damaged_session"
)
