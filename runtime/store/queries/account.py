"""The `account` table's statements."""

from runtime.store.queries.erasure import ANY_ERASED_COLUMN
from runtime.store.queries.input_pause import PAUSED_OR_HELD_COLUMNS

LISTENER_STATES = "SELECT id, listener_state FROM account"
FAILED_LISTENERS = "SELECT id FROM account WHERE listener_state = 'failed'"

SIMULATED = "SELECT simulated FROM account WHERE id = :a"

# runtime.inbound.checkpoints.
LISTENER_STATE = "SELECT listener_state FROM account WHERE id = :a"
LISTENER = "SELECT listener_state, last_error FROM account WHERE id = :a"


def of_source(account_column: str) -> str:
    """A WHERE term keeping one source's rows: a row is simulated when its account is (an
    account unknown here counts as real, as alerts do). Bind `:sim` with `source_param`; None
    keeps both. Every report that keeps the two apart says it this one way."""
    return f"(:sim IS NULL OR ({account_column} IN (SELECT id FROM account WHERE simulated = 1)) = :sim)"


# The ids of the accounts of_source keeps (:sim).
IDS_OF_SOURCE = f"SELECT id FROM account WHERE {of_source('id')}"


# runtime.inbound.inbox: (id, platform) of connected accounts to fetch missed pages for; an
# account with received pages not yet ingested waits (its cursor moves once those are in).
TO_CATCH_UP = (
    "SELECT id, platform FROM account a WHERE connection_intent = 'connected' AND deleted_at IS NULL"
    " AND NOT EXISTS (SELECT 1 FROM received_page r WHERE r.account_id = a.id AND r.ingested_at IS NULL)"
)
# runtime.inbound.ingest: the page's account, read with whether its input is paused or the page
# was held, and whether any of its buyers was erased: a transaction's statements fewer per page.
FOR_INGEST = f"SELECT *, {PAUSED_OR_HELD_COLUMNS}, {ANY_ERASED_COLUMN} FROM account WHERE id = :a"

# runtime.accounts.registry.identity_clash: the id or the platform identity already configured. A
# deleted account's id is free for the same identity (the tombstone's identity carries :deleted).
IDENTITY_CLASH = (
    "SELECT id FROM account WHERE (id = :id AND NOT (deleted_at IS NOT NULL AND platform = :platform"
    " AND substr(identity, 1, length(:identity) + :n) = :identity || :deleted))"
    " OR (platform = :platform AND identity = :identity)"
)
# A deleted account of the same identity restored (runtime.accounts.registry.insert_account).
RESTORE = (
    "UPDATE account SET identity = :identity, workspace = :workspace, deleted_at = NULL,"
    " connection_intent = 'connected', authorization = 'ready', last_error = NULL,"
    " revision = revision + 1 WHERE id = :id"
)
BY_ID = "SELECT * FROM account WHERE id = :id"
LIVE = "SELECT * FROM account WHERE deleted_at IS NULL ORDER BY id"
LIVE_IDS = "SELECT id FROM account WHERE deleted_at IS NULL ORDER BY id"
# Accounts that should have a listener now (SPEC 3.1): connected, authorised, with at least one
# enabled route to deliver to, and not in a move (SPEC 3.12). A route that observes counts: it is
# SPEC 3.1's observation lease (its input is stored, never answered).
LISTENING = (
    "SELECT * FROM account a WHERE a.connection_intent = 'connected' AND a.authorization = 'ready'"
    " AND EXISTS (SELECT 1 FROM route r WHERE r.account_id = a.id AND r.enabled)"
    # an account on its way to or from another shard listens nowhere until it arrives
    " AND NOT EXISTS (SELECT 1 FROM account_placement p WHERE p.account_id = a.id AND p.state != 'active')"
    " ORDER BY a.id"
)
# Connecting also clears an authorization the platform refused (:retry).
SET_CONNECTION_INTENT = (
    "UPDATE account SET connection_intent = :i, revision = revision + 1,"
    " authorization = CASE WHEN :retry THEN 'ready' ELSE authorization END WHERE id = :a"
)
# A tombstone: disconnected, its identity free again (it carries :deleted and the time).
MARK_DELETED = (
    "UPDATE account SET deleted_at = :at, connection_intent = 'disconnected',"
    " identity = identity || :deleted || :at, revision = revision + 1 WHERE id = :a"
)
# New credentials accepted: the listener restarts on them, a refused authorization is tried again.
RENEW = "UPDATE account SET revision = revision + 1, authorization = 'ready', last_error = NULL WHERE id = :a"
# runtime.accounts.listener_policy.record_listener_state: refused credentials (:refused) also mark
# the account's authorization failed.
RECORD_LISTENER_STATE = (
    "UPDATE account SET listener_state = :s, last_error = :e,"
    " authorization = CASE WHEN :refused THEN 'failed' ELSE authorization END WHERE id = :a"
)
# runtime.placement.directory: live accounts with no placement row yet.
UNPLACED = (
    "SELECT a.id FROM account a WHERE a.deleted_at IS NULL"
    " AND NOT EXISTS (SELECT 1 FROM account_placement p WHERE p.account_id = a.id) ORDER BY a.id"
)
# runtime.placement.slices: a live account holding the slice's account id (:a) or platform identity.
LIVE_HOLDER = "SELECT id FROM account WHERE deleted_at IS NULL AND (id = :a OR (platform = :p AND identity = :i))"
# worker.console.pages.readyz: the store answers a read.
PROBE = "SELECT 1 FROM account LIMIT 1"

# runtime.placement.slices, an account moving between shards: the account's rows (:a) as its
# slice carries them, their removal.
SLICE = "SELECT * FROM account WHERE id = :a"
DELETE_OF_ACCOUNT = "DELETE FROM account WHERE id = :a"
