"""The `group_receipt` table's statements."""

DELETE_OF_CONVERSATION = "DELETE FROM group_receipt WHERE account_id = :a AND conversation_id = :conv"

# runtime.inbound.input_pause: pages caught midway (group receipts of an earlier version without
# their page receipt) and not held, plus admitted batches whose turn has not ended; of account
# :a (None: all).
IN_FLIGHT = (
    "SELECT (SELECT count(DISTINCT g.page_op_id) FROM group_receipt g"
    "  WHERE (:a IS NULL OR g.account_id = :a)"
    "  AND NOT EXISTS (SELECT 1 FROM page_receipt p WHERE p.account_id = g.account_id"
    "   AND p.stream_id = g.stream_id AND p.page_op_id = g.page_op_id)"
    "  AND NOT EXISTS (SELECT 1 FROM held_page h WHERE h.account_id = g.account_id"
    "   AND h.stream_id = g.stream_id AND h.page_op_id = g.page_op_id))"
    " + (SELECT count(*) FROM admission_batch b JOIN customer c ON c.id = b.customer_id"
    "  WHERE (:a IS NULL OR c.account_id = :a) AND b.state IN ('claimed', 'committed'))"
)

# runtime.placement.slices, an account moving between shards: the account's rows (:a) as its
# slice carries them, their removal.
SLICE = "SELECT * FROM group_receipt WHERE account_id = :a"
DELETE_OF_ACCOUNT = "DELETE FROM group_receipt WHERE account_id = :a"
