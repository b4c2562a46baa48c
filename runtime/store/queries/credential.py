"""The `credential` table's statements."""

# runtime.accounts.credentials: saved in the caller's transaction, with its account.
SAVE = (
    "INSERT INTO credential (account_id, secret, updated_at) VALUES (:a, :s, :at)"
    " ON CONFLICT (account_id) DO UPDATE SET secret = excluded.secret, updated_at = excluded.updated_at"
)
SECRET = "SELECT secret FROM credential WHERE account_id = :a"
# runtime.accounts.registry.delete_account; runtime.placement.slices (an account's rows removed).
DELETE_OF_ACCOUNT = "DELETE FROM credential WHERE account_id = :a"
# runtime.placement.slices: the secret a move hands to the account's new shard.
INSERT = 'INSERT INTO credential ("account_id", "secret", "updated_at") VALUES (:account_id, :secret, :updated_at)'
