"""The `agent_session` table's statements."""

DELETE_OF_CUSTOMER = "DELETE FROM agent_session WHERE customer_id = :c"
# Sessions that ended (their customer went on in another) and began before `:cutoff`.
ENDED_BEFORE = (
    "SELECT s.id FROM agent_session s JOIN customer c ON c.id = s.customer_id"
    " WHERE c.session_id IS NOT s.id AND s.created_at < :cutoff"
)
RECORD = (
    "INSERT OR REPLACE INTO agent_session (id, customer_id, created_at, model, origin, reason, parent,"
    " inherited, profile) VALUES (:id, :customer_id, :created_at, :model, :origin, :reason, :parent, :inherited,"
    " :profile)"
)
BY_ID = "SELECT * FROM agent_session WHERE id = :s"
OF_CUSTOMER = "SELECT * FROM agent_session WHERE customer_id = :c ORDER BY created_at, id"

# runtime.placement.slices, an account moving between shards: the account's rows (:a) as its
# slice carries them, their removal.
SLICE = "SELECT * FROM agent_session WHERE customer_id IN (SELECT id FROM customer WHERE account_id = :a)"
DELETE_OF_ACCOUNT = "DELETE FROM agent_session WHERE customer_id IN (SELECT id FROM customer WHERE account_id = :a)"
