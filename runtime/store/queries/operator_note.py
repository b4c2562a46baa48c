"""The `operator_note` table's statements: operators' private notes on a conversation
(runtime.customers.notes). Nothing that builds a buyer's reply or the agent's history reads them."""

_COLUMNS = "id, customer_id, account_id, operator, body, created_at"

# A note on the customer :c, with the customer's account; no row comes back for no such customer.
INSERT = (
    "INSERT INTO operator_note (customer_id, account_id, operator, body, created_at)"
    f" SELECT id, account_id, :o, :b, :at FROM customer WHERE id = :c RETURNING {_COLUMNS}"
)
OF_CUSTOMER = f"SELECT {_COLUMNS} FROM operator_note WHERE customer_id = :c ORDER BY id"
DELETE_OF_CUSTOMER = "DELETE FROM operator_note WHERE customer_id = :c"

# Moves (runtime.placement.slices): ids are this store's own counter, renumbered on import in this order.
SLICE = "SELECT * FROM operator_note WHERE account_id = :a ORDER BY id"
DELETE_OF_ACCOUNT = "DELETE FROM operator_note WHERE account_id = :a"
