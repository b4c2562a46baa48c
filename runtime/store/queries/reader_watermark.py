"""The `reader_watermark` table's statements."""

DELETE_OF_CUSTOMER = "DELETE FROM reader_watermark WHERE customer_id = :c"

# runtime.placement.slices, an account moving between shards: the account's rows (:a) as its
# slice carries them, their removal.
SLICE = "SELECT * FROM reader_watermark WHERE customer_id IN (SELECT id FROM customer WHERE account_id = :a)"
DELETE_OF_ACCOUNT = "DELETE FROM reader_watermark WHERE customer_id IN (SELECT id FROM customer WHERE account_id = :a)"


# Max semantics: an older watermark never moves it back.
ADVANCE = (
    "INSERT INTO reader_watermark (customer_id, reader, watermark, updated_at) VALUES (:c, :r, :w, :at)"
    " ON CONFLICT (customer_id, reader) DO UPDATE SET watermark = max(watermark, excluded.watermark),"
    " updated_at = excluded.updated_at RETURNING watermark"
)
