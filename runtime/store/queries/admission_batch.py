"""The `admission_batch` table's statements."""

from runtime.store.queries.account import of_source
from runtime.store.queries.customer import nothing_to_admit_term

# Batches by state, of the customers whose account of_source keeps: :sim, see account.of_source.
STATE_COUNTS = (
    "SELECT b.state, count(*) FROM admission_batch b JOIN customer c ON c.id = b.customer_id"
    f" WHERE {of_source('c.account_id')} GROUP BY b.state"
)


# The model calls of the batches finished since :since, and their time (ms).
MODEL_USE_SINCE = (
    "SELECT coalesce(sum(model_calls), 0), coalesce(sum(model_ms), 0) FROM admission_batch"
    " WHERE model_calls > 0 AND updated_at >= :since"
)
OPEN = (
    "SELECT * FROM admission_batch WHERE customer_id = :c AND state IN ('claimed', 'committed')"
    " ORDER BY created_at LIMIT 1"
)
CLAIM = (
    "INSERT INTO admission_batch (id, customer_id, handling_epoch, route_id, route_generation, state,"
    " message_count, created_at, updated_at) VALUES (:id, :c, :epoch, :route, :generation, 'claimed',"
    " :count, :at, :at)"
)
LAST_CREATED = "SELECT max(created_at) FROM admission_batch WHERE customer_id = :c"
COMMIT = "UPDATE admission_batch SET state = 'committed', updated_at = :at WHERE id = :b AND state = 'claimed'"
REVOKE = "UPDATE admission_batch SET state = 'revoked', updated_at = :at WHERE id = :b"


# The batch :b done, with its turn's model calls (:c) and their time (:ms); returns whether
# admission has something to decide for its customer now (customer.nothing_to_admit_term).
FINISH = (
    "UPDATE admission_batch SET state = 'done', updated_at = :at, model_calls = :c, model_ms = :ms WHERE id = :b"
    f" RETURNING NOT {nothing_to_admit_term('admission_batch.customer_id')}"
)


# Open batches that have not moved since :t: their turn was lost.
LEFT_OPEN = (
    "SELECT customer_id FROM admission_batch WHERE state IN ('claimed', 'committed') AND updated_at < :t LIMIT :n"
)
# Open batches whose customer's writer lease lapsed (expired unrenewed, or its holder seen gone).
STRANDED = (
    "SELECT b.customer_id FROM admission_batch b JOIN lease l ON l.name = 'customer:' || b.customer_id"
    " WHERE b.state IN ('claimed', 'committed') AND l.expires_at > 0 AND l.expires_at < :now LIMIT :n"
)

DELETE_OF_CUSTOMER = "DELETE FROM admission_batch WHERE customer_id = :c"
# Retention: finished batches, older than `:cutoff`, no message or reply refers to; `:n` at a time.
PRUNE = (
    "DELETE FROM admission_batch WHERE id IN (SELECT id FROM admission_batch b WHERE updated_at < :cutoff"
    " AND state IN ('done', 'revoked') AND NOT EXISTS (SELECT 1 FROM inbound_message m WHERE m.batch_id = b.id)"
    " AND NOT EXISTS (SELECT 1 FROM outbox_request r WHERE r.batch_id = b.id AND r.customer_id = b.customer_id)"
    " LIMIT :n)"
)
STATE = "SELECT state FROM admission_batch WHERE id = :b"
# The batch still waits for its answer (`:claimed`, `:committed`: those states).
IS_OPEN = "SELECT 1 FROM admission_batch WHERE id = :b AND state IN (:claimed, :committed)"

# worker.audit.ledger_audit.
ALL_STATES = "SELECT id, state FROM admission_batch"

# runtime.placement.slices, an account moving between shards: the account's rows (:a) as its
# slice carries them, their removal.
SLICE = "SELECT * FROM admission_batch WHERE customer_id IN (SELECT id FROM customer WHERE account_id = :a)"
DELETE_OF_ACCOUNT = "DELETE FROM admission_batch WHERE customer_id IN (SELECT id FROM customer WHERE account_id = :a)"


# runtime.inbound.checkpoints: the account's (:a) admitted batches whose turn is not verified
# complete. CROSS JOIN: open batches first, then their customers (not all of the account's customers).
OPEN_COUNT = (
    "SELECT count(*) FROM admission_batch b CROSS JOIN customer c ON c.id = b.customer_id"
    " WHERE c.account_id = :a AND b.state IN ('claimed', 'committed')"
)
