"""The `erasure` table's statements."""

THROUGH = "SELECT max(through_ms) FROM erasure WHERE account_id = ? AND conversation_key = ?"
ANY_ERASED = "SELECT 1 FROM erasure WHERE account_id = ? LIMIT 1"
# For a statement that reads the account's row anyway (the usual page costs no lookup of its own).
ANY_ERASED_COLUMN = "EXISTS (SELECT 1 FROM erasure WHERE account_id = :a) AS any_erased"
RECORD = (
    "INSERT INTO erasure (erased_customer, account_id, conversation_key, conversation_type, through_ms,"
    " erased_at, operator, counts) VALUES (:erased_customer, :account_id, :conversation_key,"
    " :conversation_type, :through_ms, :erased_at, :operator, :counts)"
)
TOMBSTONE = "SELECT * FROM erasure WHERE erased_customer = :c"

# runtime.placement.slices, an account moving between shards: the account's rows (:a) as its
# slice carries them, their removal.
SLICE = "SELECT * FROM erasure WHERE account_id = :a"
DELETE_OF_ACCOUNT = "DELETE FROM erasure WHERE account_id = :a"
