"""The `received_page` table's statements."""

from runtime.store.queries.account import of_source
from runtime.store.queries.inbound_message import AGENT_INPUT_ROLES

# Pages by outcome, of the accounts of_source keeps (:sim, see account.of_source).
OUTCOME_COUNTS = (
    f"SELECT coalesce(outcome, 'not ingested'), count(*) FROM received_page WHERE {of_source('account_id')} GROUP BY 1"
)


# A row when anything is received and not ingested, waiting for admission (lines of
# AGENT_INPUT_ROLES, runtime.inbound.classification), claimed, in a turn, or waiting to be sent.
ANY_IN_FLIGHT = (
    "SELECT 1 FROM received_page WHERE ingested_at IS NULL"
    " UNION ALL SELECT 1 FROM inbound_message WHERE state = 'claimed'"
    " UNION ALL SELECT 1 FROM inbound_message WHERE state = 'pending'"
    f" AND sender_role IN {AGENT_INPUT_ROLES}"
    " UNION ALL SELECT 1 FROM admission_batch WHERE state IN ('claimed', 'committed')"
    " UNION ALL SELECT 1 FROM outbox_request WHERE state IN ('pending', 'sending') LIMIT 1"
)


# The account's (`:a`) kept pages that carry conversation `:conv` (an erasure cuts its group out).
CARRIES_CONVERSATION = (  # a WHERE term of a page column (held_page's too)
    " AND EXISTS (SELECT 1 FROM json_each(page, '$.groups') WHERE json_extract(value, '$.conversation_id') = :conv)"
)
COUNT_CARRYING_CONVERSATION = f"SELECT count(*) FROM received_page WHERE account_id = :a{CARRIES_CONVERSATION}"
# The key, then the page.
CARRYING_CONVERSATION = f"SELECT id, page FROM received_page WHERE account_id = :a{CARRIES_CONVERSATION}"
SET_PAGE = "UPDATE received_page SET page = ? WHERE id = ?"

# runtime.inbound.inbox: the received record of a page (?1 account, ?2 stream, ?3 page op, ?4 the
# page, ?5 now), unless it was committed before (its record may be forgotten since).
RECORD = (
    "INSERT OR IGNORE INTO received_page (account_id, stream_id, page_op_id, page, received_at, published_at)"
    " SELECT ?1, ?2, ?3, ?4, ?5, ?5"
    " WHERE NOT EXISTS (SELECT 1 FROM page_receipt WHERE account_id = ?1 AND stream_id = ?2 AND page_op_id = ?3)"
)
# The usual page, of an account nobody was erased from, in this one statement.
RECORD_UNLESS_ERASED = RECORD + " AND NOT EXISTS (SELECT 1 FROM erasure WHERE account_id = ?1)"
_KEY = "account_id = ? AND stream_id = ? AND page_op_id = ?"
# Still pending: published again (a committed page's record is marked ingested).
REPUBLISH_PENDING = (
    f"UPDATE received_page SET published_at = ?, publishes = publishes + 1 WHERE {_KEY} AND ingested_at IS NULL"
)
MARK_INGESTED = (
    "UPDATE received_page SET outcome = CASE WHEN ingested_at IS NULL THEN ? ELSE outcome END,"
    f" ingested_at = coalesce(ingested_at, ?) WHERE {_KEY}"
)
# A page that never went through a receiver, recorded as ingested.
RECORD_INGESTED = (
    "INSERT INTO received_page (account_id, stream_id, page_op_id, page, received_at, published_at,"
    " ingested_at, outcome) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)
# A page that can never be ingested: done, with its outcome (an error code).
REFUSE = f"UPDATE received_page SET ingested_at = ?, outcome = ? WHERE {_KEY} AND ingested_at IS NULL"
# Pages not ingested, published more than a grace ago (doubling with each publish), oldest first;
# not those an input pause holds.
OVERDUE = (
    "SELECT id, page FROM received_page r WHERE ingested_at IS NULL"
    " AND published_at <= :at - :grace * (1 << min(publishes - 1, :doublings))"
    " AND NOT EXISTS (SELECT 1 FROM input_pause WHERE scope IN ('*', r.account_id))"
    " ORDER BY id LIMIT :n"
)
MARK_REPUBLISHED = (
    "UPDATE received_page SET published_at = :at, publishes = publishes + 1"
    " WHERE id IN (SELECT value FROM json_each(:ids))"
)
# Messages of the account's pages received and not ingested yet.
PENDING_MESSAGE_COUNT = (
    "SELECT coalesce(sum((SELECT sum(json_array_length(g.value, '$.messages'))"
    " FROM json_each(r.page, '$.groups') g)), 0)"
    " FROM received_page r INDEXED BY received_page_pending WHERE account_id = :a AND ingested_at IS NULL"
)
ANY_INGESTED_BEFORE = "SELECT 1 FROM received_page WHERE ingested_at < :t LIMIT 1"
PRUNE_INGESTED = "DELETE FROM received_page WHERE ingested_at < :t"

# runtime.placement.moves._release: the account's pages not ingested here (forwarded to its new shard).
PENDING_PAGES_OF_ACCOUNT = "SELECT page FROM received_page WHERE account_id = :a AND ingested_at IS NULL ORDER BY id"
# runtime.placement.slices.remove_slice: their ids; the account's other pages leave with it.
PENDING_IDS_OF_ACCOUNT = "SELECT id FROM received_page WHERE account_id = :a AND ingested_at IS NULL ORDER BY id"
DELETE_INGESTED_OF_ACCOUNT = "DELETE FROM received_page WHERE account_id = :a AND ingested_at IS NOT NULL"

# runtime.placement.slices, an account moving between shards: the account's rows (:a) as its
# slice carries them, their removal.
SLICE = "SELECT * FROM received_page WHERE account_id = :a ORDER BY id"
DELETE_OF_ACCOUNT = "DELETE FROM received_page WHERE account_id = :a"
