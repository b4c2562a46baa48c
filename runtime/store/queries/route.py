"""The `route` table's statements."""

BY_ID = "SELECT * FROM route WHERE id = :id"
# Every route, or an account's (:a; NULL: all).
OF_ACCOUNT = "SELECT * FROM route WHERE :a IS NULL OR account_id = :a ORDER BY account_id, id"
DELETE = "DELETE FROM route WHERE id = :r"
# The route that governs a conversation: a specific route beats `all`, even when disabled.
GOVERNING = (
    "SELECT * FROM route WHERE account_id = :a AND conversation_type = :t"
    " AND (target = 'all' OR conversation_id = :c)"
    " ORDER BY target = 'specific' DESC, created_at LIMIT 1"
)

# runtime.accounts.registry.delete_account; runtime.placement.slices (an account's rows removed).
DELETE_OF_ACCOUNT = "DELETE FROM route WHERE account_id = :a"
# runtime.placement.slices: the slice's route ids (:ids, a JSON array) another account holds here.
TAKEN_ELSEWHERE = (
    "SELECT id FROM route WHERE account_id != :a AND id IN (SELECT value FROM json_each(:ids)) ORDER BY id"
)

# runtime.placement.slices, an account moving between shards: the account's rows (:a) as its
# slice carries them, their removal.
SLICE = "SELECT * FROM route WHERE account_id = :a"
