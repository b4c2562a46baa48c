"""The `placement_import` table's statements."""

# runtime.placement.directory: the op id of the account's latest import.
LATEST_OP = "SELECT op_id FROM placement_import WHERE account_id = :a ORDER BY imported_at DESC LIMIT 1"
# runtime.placement.slices: an import recorded under its op id (:o), so that a replay returns it.
RESULT = "SELECT result, files_done FROM placement_import WHERE op_id = :o"
RECORD = (
    'INSERT INTO placement_import ("op_id", "account_id", "result", "files_done", "imported_at")'
    " VALUES (:op_id, :account_id, :result, :files_done, :imported_at)"
)
MARK_FILES_DONE = "UPDATE placement_import SET files_done = 1 WHERE op_id = :o"
# The account of the import, while it is still importing (:st) here.
IMPORTING_ACCOUNT = (
    "SELECT i.account_id FROM placement_import i JOIN account_placement p ON p.account_id = i.account_id"
    " WHERE i.op_id = :o AND p.state = :st"
)
DELETE = "DELETE FROM placement_import WHERE op_id = :o"
# runtime.placement.operations.query_operation: an import this shard made under a move's op id.
SHOW = "SELECT account_id, result, files_done, imported_at FROM placement_import WHERE op_id = :o"
