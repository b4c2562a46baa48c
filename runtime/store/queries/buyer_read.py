"""The `buyer_read` table's statements."""

# runtime.outbox.read_receipts: a verified receipt, stored once.
RECORD = (
    "INSERT OR IGNORE INTO buyer_read (account_id, platform_message_id, request_id, customer_id,"
    " reader_id, read_at, stored_at) VALUES (:a, :p, :r, :c, :u, :at, :now)"
)
# The customer's (:c) reads its session has not been told of (customer.UNDELIVERED_READS_JSON,
# the same as one JSON column).
UNDELIVERED = "SELECT * FROM buyer_read WHERE customer_id = :c AND delivered_at IS NULL ORDER BY read_at"
MARK_DELIVERED = (
    "UPDATE buyer_read SET delivered_at = :now WHERE account_id = :a AND platform_message_id = :p"
    " AND delivered_at IS NULL"
)

DELETE_OF_CUSTOMER = "DELETE FROM buyer_read WHERE customer_id = :c"
# `:ids`: a JSON array of request ids.
DELETE_OF_REQUESTS = "DELETE FROM buyer_read WHERE request_id IN (SELECT value FROM json_each(:ids))"

# runtime.placement.slices, an account moving between shards: the account's rows (:a) as its
# slice carries them, their removal.
SLICE = "SELECT * FROM buyer_read WHERE account_id = :a"
DELETE_OF_ACCOUNT = "DELETE FROM buyer_read WHERE account_id = :a"
