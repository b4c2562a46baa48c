"""The `input_pause` table's statements."""

# runtime.inbound.input_pause: whether input is paused for the account :a (the host or this account).
FOR_ACCOUNT = "SELECT 1 FROM input_pause WHERE scope IN ('*', :a) LIMIT 1"
# Read with the page's account (account.FOR_INGEST): a transaction's statement fewer per page.
PAUSED_OR_HELD_COLUMNS = (
    f"EXISTS ({FOR_ACCOUNT}) AS input_paused, EXISTS (SELECT 1 FROM held_page"
    " WHERE account_id = :a AND stream_id = :s AND page_op_id = :p) AS page_held"
)
# A pause of another scope that rules out pausing :s (a host pause and an account pause never coexist).
CONFLICTING = "SELECT scope FROM input_pause WHERE scope != :s AND (:s = '*' OR scope = '*') LIMIT 1"
PAUSE = "INSERT OR IGNORE INTO input_pause (scope, paused_at) VALUES (:s, :at)"
PAUSED_AT = "SELECT paused_at FROM input_pause WHERE scope = :s"
# The pauses in force, each with whether a move between shards holds it.
IN_FORCE = (
    "SELECT scope, paused_at, EXISTS (SELECT 1 FROM account_placement WHERE account_id = scope"
    " AND state != 'active') AS by_move FROM input_pause ORDER BY scope"
)
LIFT = "DELETE FROM input_pause WHERE scope = :s"

# runtime.placement.slices: an imported account stays paused until its move resumes it.
PAUSE_IMPORTED = 'INSERT OR IGNORE INTO input_pause ("scope", "paused_at") VALUES (:scope, :paused_at)'

# runtime.placement.slices, an account moving between shards: the account's rows (:a) as its
# slice carries them, their removal.
SLICE = "SELECT * FROM input_pause WHERE scope = :a"
DELETE_OF_ACCOUNT = "DELETE FROM input_pause WHERE scope = :a"
