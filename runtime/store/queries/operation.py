"""The `operation` table's statements."""

# runtime.placement.operations.run_once (and runtime.accounts.setup): an operation id's stored result.
BY_ID = "SELECT kind, result FROM operation WHERE id = :id"
RECORD = "INSERT INTO operation (id, kind, result, created_at) VALUES (:id, :kind, :result, :at)"
# runtime.placement.operations.query_operation: a receipt as it is, read only.
SHOW = "SELECT id, kind, result, created_at FROM operation WHERE id = :id"
