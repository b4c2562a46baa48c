"""The `operator` table's statements."""

# Create an operator, or set an existing one's role and password (enabling them again).
UPSERT = (
    "INSERT INTO operator (name, role, password_hash, created_at) VALUES (:n, :r, :h, :at)"
    " ON CONFLICT (name) DO UPDATE SET role = excluded.role, password_hash = excluded.password_hash,"
    " disabled_at = NULL"
)
ENABLED_ROLE_AND_HASH = "SELECT role, password_hash FROM operator WHERE name = :n AND disabled_at IS NULL"
ENABLED_BY_NAME = "SELECT role, password_hash, signed_out_at FROM operator WHERE name = :n AND disabled_at IS NULL"
SIGN_OUT = "UPDATE operator SET signed_out_at = max(signed_out_at, :at) WHERE name = :n"
DISABLE = "UPDATE operator SET disabled_at = :at WHERE name = :n AND disabled_at IS NULL"
ENABLED = "SELECT name, role FROM operator WHERE disabled_at IS NULL ORDER BY name"
