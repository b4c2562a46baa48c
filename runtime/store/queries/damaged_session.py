"""The `damaged_session` table's statements."""

DELETE_OF_CUSTOMER = "DELETE FROM damaged_session WHERE customer_id = :c"
DELETE_KEPT = "DELETE FROM damaged_session WHERE kept_path = :p"
REPLACED_BY = "SELECT * FROM damaged_session WHERE replaced_by = :s"
RECORD = (
    "INSERT OR IGNORE INTO damaged_session (session_id, customer_id, replaced_by, kept_path, problem,"
    " detected_at) VALUES (:session_id, :customer_id, :replaced_by, :kept_path, :problem, :detected_at)"
)
ALL = "SELECT * FROM damaged_session ORDER BY detected_at"

# runtime.placement.slices, an account moving between shards: the account's rows (:a) as its
# slice carries them, their removal.
SLICE = "SELECT * FROM damaged_session WHERE customer_id IN (SELECT id FROM customer WHERE account_id = :a)"
DELETE_OF_ACCOUNT = "DELETE FROM damaged_session WHERE customer_id IN (SELECT id FROM customer WHERE account_id = :a)"
