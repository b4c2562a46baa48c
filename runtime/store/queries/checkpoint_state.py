"""The `checkpoint_state` table's statements."""

# runtime.inbound.checkpoints: the account's (:a) state, created on first use.
ENSURE = "INSERT OR IGNORE INTO checkpoint_state (account_id) VALUES (:a)"
BY_ACCOUNT = "SELECT * FROM checkpoint_state WHERE account_id = :a"
# A report's slot claimed (reports are throttled per account).
CLAIM_ATTEMPT = "UPDATE checkpoint_state SET last_attempt_at = :now WHERE account_id = :a"
RECORD_ACCEPTED = (
    "UPDATE checkpoint_state SET last_report = :r, last_reported_at = :at, failure_class = NULL WHERE account_id = :a"
)
# The sink refused this generation: no reports until an operator resumes with a new one.
RECORD_REJECTED = (
    "UPDATE checkpoint_state SET rejected_generation = generation, failure_class = :f WHERE account_id = :a"
)
RECORD_FAILURE = "UPDATE checkpoint_state SET failure_class = :f WHERE account_id = :a"
NEW_GENERATION = (
    "UPDATE checkpoint_state SET generation = :g, failure_class = NULL, last_attempt_at = NULL WHERE account_id = :a"
)

# runtime.placement.slices, an account moving between shards: the account's row (:a) as its
# slice carries it, its removal.
SLICE = BY_ACCOUNT
DELETE_OF_ACCOUNT = "DELETE FROM checkpoint_state WHERE account_id = :a"
