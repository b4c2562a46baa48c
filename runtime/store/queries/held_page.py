"""The `held_page` table's statements."""

from runtime.store.queries.received_page import CARRIES_CONVERSATION

# The account's (`:a`) held pages that carry conversation `:conv` (an erasure cuts its group out).
COUNT_CARRYING_CONVERSATION = f"SELECT count(*) FROM held_page WHERE account_id = :a{CARRIES_CONVERSATION}"
CARRYING_CONVERSATION = (  # the key columns, then the page
    f"SELECT account_id, stream_id, page_op_id, page FROM held_page WHERE account_id = :a{CARRIES_CONVERSATION}"
)
SET_PAGE = "UPDATE held_page SET page = ? WHERE account_id = ? AND stream_id = ? AND page_op_id = ?"

# runtime.inbound.input_pause: the pages held, of account :a (None: all), oldest first.
PAGES = "SELECT page FROM held_page WHERE :a IS NULL OR account_id = :a ORDER BY held_at"
HOLD = (
    "INSERT OR IGNORE INTO held_page (account_id, stream_id, page_op_id, page, held_at) VALUES (:a, :s, :p, :page, :at)"
)
# The page is ingested: it is no longer held (in the cursor's transaction).
RELEASE = "DELETE FROM held_page WHERE account_id = ? AND stream_id = ? AND page_op_id = ?"

# runtime.placement.slices, an account moving between shards: the account's rows (:a) as its
# slice carries them, their removal.
SLICE = "SELECT * FROM held_page WHERE account_id = :a"
DELETE_OF_ACCOUNT = "DELETE FROM held_page WHERE account_id = :a"
