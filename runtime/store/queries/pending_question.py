"""The `pending_question` table's statements."""

DELETE_OF_CUSTOMER = "DELETE FROM pending_question WHERE customer_id = :c"
# `:ids`: a JSON array of request ids.
DELETE_OF_REQUESTS = "DELETE FROM pending_question WHERE request_id IN (SELECT value FROM json_each(:ids))"
# The customer's questions in state `:p` become `:s` (a new question supersedes those nobody saw).
SUPERSEDE = "UPDATE pending_question SET state = :s WHERE customer_id = :c AND state = :p"
RECORD = (
    "INSERT OR IGNORE INTO pending_question (request_id, customer_id, question, asked_at, state)"
    " VALUES (:r, :c, :q, :t, :p)"
)


def offerable(never_sent: tuple[str, ...]) -> str:
    """The customer's latest question batch `:b` may be offered: pending (`:p`), or offered (`:o`)
    to this batch before; never one batch `:b` asked, nor one whose reply is in a `never_sent`
    state (it never reached the buyer)."""
    states = ", ".join(f"'{state}'" for state in never_sent)
    return (
        "SELECT q.* FROM pending_question q JOIN outbox_request r USING (request_id) WHERE q.customer_id = :c"
        " AND (q.state = :p OR (q.state = :o AND q.offered_batch = :b)) AND r.batch_id IS NOT :b"
        f" AND r.state NOT IN ({states}) ORDER BY q.asked_at DESC LIMIT 1"
    )


MARK_OFFERED = "UPDATE pending_question SET state = :o, offered_batch = :b WHERE request_id = :r"

# runtime.placement.slices, an account moving between shards: the account's rows (:a) as its
# slice carries them, their removal.
SLICE = "SELECT * FROM pending_question WHERE customer_id IN (SELECT id FROM customer WHERE account_id = :a)"
DELETE_OF_ACCOUNT = "DELETE FROM pending_question WHERE customer_id IN (SELECT id FROM customer WHERE account_id = :a)"
