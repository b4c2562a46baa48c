"""The `route` table's statements."""

BY_ID = "SELECT * FROM route WHERE id = :id"
# Every route, or an account's (:a; NULL: all).
OF_ACCOUNT = "SELECT * FROM route WHERE :a IS NULL OR account_id = :a ORDER BY account_id, id"
DELETE = "DELETE FROM route WHERE id = :r"
# The route that governs a conversation: a specific route beats `all`, even when disabled.
_GOVERNS = (
    "account_id = {a} AND conversation_type = {t} AND (target = 'all' OR conversation_id = {c})"
    " ORDER BY target = 'specific' DESC, created_at, id LIMIT 1"
)
GOVERNING = "SELECT * FROM route WHERE " + _GOVERNS.format(a=":a", t=":t", c=":c")
# A route for the same conversations as a new one (:target 'all', or 'specific' to :c): only the
# oldest would ever govern them (runtime.admission.routes.create_route refuses a second).
SAME_CONVERSATIONS = (
    "SELECT id FROM route WHERE account_id = :a AND conversation_type = :t AND target = :target"
    " AND (:target = 'all' OR conversation_id = :c) ORDER BY created_at LIMIT 1"
)


def governing_id(customer: str) -> str:
    """SQL of the id of the route that governs customer row `customer`'s conversation now (an
    automatic reply admitted under another is stale: a specific route added since, say)."""
    columns = {name: f"{customer}.{column}" for name, column in (("a", "account_id"), ("t", "conversation_type"))}
    return "(SELECT id FROM route WHERE " + _GOVERNS.format(**columns, c=f"{customer}.conversation_id") + ")"


# runtime.accounts.registry.delete_account; runtime.placement.slices (an account's rows removed).
DELETE_OF_ACCOUNT = "DELETE FROM route WHERE account_id = :a"
# runtime.placement.slices: the slice's route ids (:ids, a JSON array) another account holds here.
TAKEN_ELSEWHERE = (
    "SELECT id FROM route WHERE account_id != :a AND id IN (SELECT value FROM json_each(:ids)) ORDER BY id"
)

# runtime.placement.slices, an account moving between shards: the account's rows (:a) as its
# slice carries them, their removal.
SLICE = "SELECT * FROM route WHERE account_id = :a"
