"""The `operator_action` table's statements."""

RECORD = (
    "INSERT INTO operator_action (at, operator, action, customer_id, request_id, detail)"
    " VALUES (:at, :o, :a, :c, :r, :d)"
)

# Erasure: who did what about the customer stays, the free text goes.
CLEAR_DETAIL_OF_CUSTOMER = "UPDATE operator_action SET detail = NULL WHERE customer_id = :c"
