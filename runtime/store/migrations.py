"""Ordered, frozen schema migrations for the delivery store.

Each migration is plain DDL, applied by runtime.store.migrate like every kefu file's schema.
"""

from __future__ import annotations

from runtime.store.migrate import Migration, latest

V1 = Migration(
    1,
    "initial delivery schema",
    (
        """CREATE TABLE account (
            id TEXT PRIMARY KEY,
            platform TEXT NOT NULL CHECK (platform IN ('dingtalk', 'wangwang', 'simulator')),
            identity TEXT NOT NULL,
            workspace TEXT NOT NULL DEFAULT 'default',
            revision INTEGER NOT NULL DEFAULT 1,
            connection_intent TEXT NOT NULL DEFAULT 'connected',
            authorization TEXT NOT NULL DEFAULT 'ready',
            listener_state TEXT NOT NULL DEFAULT 'stopped',
            last_error TEXT,
            simulated INTEGER NOT NULL DEFAULT 0,
            created_at INTEGER NOT NULL,
            UNIQUE (platform, identity)
        )""",
        """CREATE TABLE route (
            id TEXT PRIMARY KEY,
            account_id TEXT NOT NULL REFERENCES account(id),
            conversation_type TEXT NOT NULL CHECK (conversation_type IN ('direct', 'group')),
            target TEXT NOT NULL CHECK (target IN ('all', 'specific')),
            conversation_id TEXT,
            peer_id TEXT,
            workspace TEXT NOT NULL DEFAULT 'default',
            enabled INTEGER NOT NULL DEFAULT 1,
            agent_preset TEXT,
            trigger_mention INTEGER NOT NULL DEFAULT 0,
            trigger_every_n INTEGER,
            trigger_interval_s INTEGER,
            generation INTEGER NOT NULL DEFAULT 1,
            created_at INTEGER NOT NULL
        )""",
        "CREATE INDEX route_by_account ON route (account_id, conversation_type)",
        """CREATE TABLE customer (
            id INTEGER PRIMARY KEY,
            account_id TEXT NOT NULL REFERENCES account(id),
            conversation_id TEXT NOT NULL,
            conversation_type TEXT NOT NULL,
            title TEXT,
            direct_peer_id TEXT,
            handling_paused INTEGER NOT NULL DEFAULT 0,
            handling_epoch INTEGER NOT NULL DEFAULT 0,
            session_id TEXT,
            last_activity_at INTEGER NOT NULL,
            UNIQUE (account_id, conversation_id)
        )""",
        """CREATE TABLE inbound_message (
            id INTEGER PRIMARY KEY,
            customer_id INTEGER NOT NULL REFERENCES customer(id),
            account_id TEXT NOT NULL,
            conversation_id TEXT NOT NULL,
            platform_message_id TEXT NOT NULL,
            sender_id TEXT NOT NULL,
            sender_name TEXT,
            sender_role TEXT NOT NULL,
            content_type TEXT NOT NULL,
            body TEXT NOT NULL,
            occurred_at INTEGER NOT NULL,
            received_at INTEGER NOT NULL,
            mention INTEGER,
            direct_peer_id TEXT,
            origin TEXT NOT NULL DEFAULT 'live',
            state TEXT NOT NULL DEFAULT 'pending',
            batch_id TEXT,
            UNIQUE (account_id, conversation_id, platform_message_id)
        )""",
        "CREATE INDEX inbound_open ON inbound_message (customer_id, id) WHERE state IN ('pending', 'claimed')",
        "CREATE INDEX inbound_by_batch ON inbound_message (batch_id) WHERE batch_id IS NOT NULL",
        """CREATE TABLE page_receipt (
            account_id TEXT NOT NULL,
            stream_id TEXT NOT NULL,
            page_op_id TEXT NOT NULL,
            message_count INTEGER NOT NULL,
            committed_at INTEGER NOT NULL,
            PRIMARY KEY (account_id, stream_id, page_op_id)
        ) WITHOUT ROWID""",
        """CREATE TABLE group_receipt (
            account_id TEXT NOT NULL,
            stream_id TEXT NOT NULL,
            page_op_id TEXT NOT NULL,
            conversation_id TEXT NOT NULL,
            committed_at INTEGER NOT NULL,
            PRIMARY KEY (account_id, stream_id, page_op_id, conversation_id)
        ) WITHOUT ROWID""",
        """CREATE TABLE provider_cursor (
            account_id TEXT NOT NULL,
            stream_id TEXT NOT NULL,
            cursor TEXT NOT NULL,
            page_op_id TEXT NOT NULL,
            updated_at INTEGER NOT NULL,
            PRIMARY KEY (account_id, stream_id)
        ) WITHOUT ROWID""",
        """CREATE TABLE admission_batch (
            id TEXT PRIMARY KEY,
            customer_id INTEGER NOT NULL REFERENCES customer(id),
            handling_epoch INTEGER NOT NULL,
            route_id TEXT NOT NULL,
            route_generation INTEGER NOT NULL,
            state TEXT NOT NULL DEFAULT 'claimed',
            message_count INTEGER NOT NULL,
            created_at INTEGER NOT NULL,
            updated_at INTEGER NOT NULL
        )""",
        "CREATE INDEX batch_open ON admission_batch (customer_id) WHERE state IN ('claimed', 'committed')",
        """CREATE TABLE outbox_request (
            request_id TEXT PRIMARY KEY,
            customer_id INTEGER NOT NULL REFERENCES customer(id),
            account_id TEXT NOT NULL,
            conversation_id TEXT NOT NULL,
            recipient_id TEXT,
            origin TEXT NOT NULL CHECK (origin IN ('auto', 'manual')),
            content_type TEXT NOT NULL,
            body TEXT NOT NULL,
            batch_id TEXT,
            session_id TEXT,
            tool_call_id TEXT,
            route_generation INTEGER,
            account_revision INTEGER,
            handling_epoch INTEGER,
            state TEXT NOT NULL DEFAULT 'pending',
            platform_message_id TEXT,
            error_code TEXT,
            created_at INTEGER NOT NULL,
            updated_at INTEGER NOT NULL
        )""",
        "CREATE INDEX outbox_by_platform_id ON outbox_request (account_id, platform_message_id)",
        "CREATE INDEX outbox_by_batch ON outbox_request (customer_id, batch_id)",
        """CREATE TABLE outbox_attempt (
            request_id TEXT NOT NULL REFERENCES outbox_request(request_id),
            attempt_no INTEGER NOT NULL,
            state TEXT NOT NULL DEFAULT 'started',
            owner TEXT NOT NULL,
            started_at INTEGER NOT NULL,
            finished_at INTEGER,
            platform_message_id TEXT,
            error_code TEXT,
            PRIMARY KEY (request_id, attempt_no)
        )""",
    ),
)

V2 = Migration(
    2,
    "session writer leases and an index of unsettled sends",
    (
        """CREATE TABLE lease (
            name TEXT PRIMARY KEY,
            owner TEXT NOT NULL,
            expires_at INTEGER NOT NULL
        )""",
        "CREATE INDEX outbox_unsettled ON outbox_request (state, updated_at)"
        " WHERE state IN ('pending', 'sending', 'result-unknown')",
    ),
)

V3 = Migration(
    3,
    "why automatic handling of a customer is paused",
    ("ALTER TABLE customer ADD COLUMN handling_reason TEXT",),
)

V4 = Migration(
    4,
    "operation receipts (replaying an operation id returns its stored result) and route revisions",
    (
        """CREATE TABLE operation (
            id TEXT PRIMARY KEY,
            kind TEXT NOT NULL,
            result TEXT NOT NULL,
            created_at INTEGER NOT NULL
        )""",
        "ALTER TABLE route ADD COLUMN revision INTEGER NOT NULL DEFAULT 1",
    ),
)

V5 = Migration(
    5,
    "manual sends and their retries, multi-part replies, staged media, reader watermarks, console echoes",
    (
        # retry_of: the result-unknown request an operator's retry replaces (one retry each).
        "ALTER TABLE outbox_request ADD COLUMN retry_of TEXT REFERENCES outbox_request(request_id)",
        "CREATE UNIQUE INDEX outbox_one_retry ON outbox_request (retry_of) WHERE retry_of IS NOT NULL",
        # follows: the earlier part of the same reply; a part is only submitted after it was sent.
        "ALTER TABLE outbox_request ADD COLUMN follows TEXT REFERENCES outbox_request(request_id)",
        "ALTER TABLE outbox_request ADD COLUMN media_sha256 TEXT REFERENCES media(sha256)",
        # Provider receipt queries made for a result-unknown request (they are bounded).
        "ALTER TABLE outbox_request ADD COLUMN receipt_queries INTEGER NOT NULL DEFAULT 0",
        # A customer's unfinished sends, for the ordering check before every attempt.
        "CREATE INDEX outbox_open_by_customer ON outbox_request (customer_id) WHERE state IN ('pending', 'sending')",
        # History, recipients and previews read one customer's messages newest first.
        "CREATE INDEX inbound_by_customer ON inbound_message (customer_id, id)",
        # An immutable copy of every file kefu was asked to send, so an unknown result can still
        # be inspected after the source path is gone.
        """CREATE TABLE media (
            sha256 TEXT PRIMARY KEY,
            kind TEXT NOT NULL CHECK (kind IN ('image', 'file')),
            mime TEXT NOT NULL,
            file_name TEXT NOT NULL,
            size INTEGER NOT NULL,
            data BLOB NOT NULL,
            created_at INTEGER NOT NULL
        )""",
        """CREATE TABLE reader_watermark (
            customer_id INTEGER NOT NULL REFERENCES customer(id),
            reader TEXT NOT NULL,
            watermark INTEGER NOT NULL,
            updated_at INTEGER NOT NULL,
            PRIMARY KEY (customer_id, reader)
        ) WITHOUT ROWID""",
    ),
)

V6 = Migration(
    6,
    "buyer read receipts: stored once, delivered to the bound session once",
    (
        """CREATE TABLE buyer_read (
            account_id TEXT NOT NULL,
            platform_message_id TEXT NOT NULL,
            request_id TEXT NOT NULL REFERENCES outbox_request(request_id),
            customer_id INTEGER NOT NULL REFERENCES customer(id),
            reader_id TEXT NOT NULL,
            read_at INTEGER NOT NULL,
            stored_at INTEGER NOT NULL,
            delivered_at INTEGER,
            PRIMARY KEY (account_id, platform_message_id)
        ) WITHOUT ROWID""",
        "CREATE INDEX buyer_read_undelivered ON buyer_read (customer_id) WHERE delivered_at IS NULL",
    ),
)

V7 = Migration(
    7,
    "checkpoint reporting state per account",
    (
        """CREATE TABLE checkpoint_state (
            account_id TEXT PRIMARY KEY REFERENCES account(id),
            generation INTEGER NOT NULL DEFAULT 1,
            rejected_generation INTEGER,
            last_attempt_at INTEGER,
            last_report TEXT,
            last_reported_at INTEGER,
            failure_class TEXT
        )""",
    ),
)

V8 = Migration(
    8,
    "input pause: who paused input, and the pages held meanwhile",
    (
        # scope '*' is the whole host; otherwise an account id.
        "CREATE TABLE input_pause (scope TEXT PRIMARY KEY, paused_at INTEGER NOT NULL)",
        """CREATE TABLE held_page (
            account_id TEXT NOT NULL,
            stream_id TEXT NOT NULL,
            page_op_id TEXT NOT NULL,
            page TEXT NOT NULL,
            held_at INTEGER NOT NULL,
            PRIMARY KEY (account_id, stream_id, page_op_id)
        ) WITHOUT ROWID""",
    ),
)

V9 = Migration(
    9,
    "platform credentials, apart from accounts (the file is readable by its owner only)",
    (
        """CREATE TABLE credential (
            account_id TEXT PRIMARY KEY REFERENCES account(id),
            secret TEXT NOT NULL,
            updated_at INTEGER NOT NULL
        ) WITHOUT ROWID""",
    ),
)

V10 = Migration(
    10,
    "read-status checks: a bounded schedule of queries per sent 1:1 message",
    (
        """CREATE TABLE read_check (
            request_id TEXT PRIMARY KEY REFERENCES outbox_request(request_id),
            due_at INTEGER NOT NULL,
            checks_left INTEGER NOT NULL CHECK (checks_left > 0)
        ) WITHOUT ROWID""",
        "CREATE INDEX read_check_due ON read_check (due_at)",
    ),
)

V11 = Migration(
    11,
    "deleted accounts stay as tombstones: their history keeps pointing at them",
    ("ALTER TABLE account ADD COLUMN deleted_at INTEGER",),
)

V12 = Migration(
    12,
    "fenced leases; received pages kept until ingested; damaged session logs kept aside",
    (
        # Increases on every grant of a lease (never on a renewal): a holder that lost its lease
        # finds another token there and writes nothing.
        "ALTER TABLE lease ADD COLUMN token INTEGER NOT NULL DEFAULT 0",
        # Every page a receiver got, recorded before the platform is ACKed: the broker is never the
        # only place a page lives. `id` is the receive order the committed cursor follows.
        """CREATE TABLE received_page (
            id INTEGER PRIMARY KEY AUTOINCREMENT,  -- never reused: the receive order outlives pruning
            account_id TEXT NOT NULL,
            stream_id TEXT NOT NULL,
            page_op_id TEXT NOT NULL,
            received_at INTEGER NOT NULL,
            published_at INTEGER NOT NULL,
            publishes INTEGER NOT NULL DEFAULT 1,
            ingested_at INTEGER,
            outcome TEXT,
            page TEXT NOT NULL,
            UNIQUE (account_id, stream_id, page_op_id)
        )""",
        "CREATE INDEX received_page_order ON received_page (account_id, stream_id, id)",
        "CREATE INDEX received_page_pending ON received_page (id) WHERE ingested_at IS NULL",
        "CREATE INDEX received_page_ingested ON received_page (ingested_at) WHERE ingested_at IS NOT NULL",
        # Pages an input pause held before received pages were kept: pending like any other.
        "INSERT OR IGNORE INTO received_page (account_id, stream_id, page_op_id, received_at, published_at, page)"
        " SELECT account_id, stream_id, page_op_id, held_at, held_at, page FROM held_page",
        "ALTER TABLE provider_cursor ADD COLUMN received_id INTEGER",
        """CREATE TABLE damaged_session (
            session_id TEXT PRIMARY KEY,
            customer_id INTEGER NOT NULL REFERENCES customer(id),
            replaced_by TEXT NOT NULL,
            kept_path TEXT NOT NULL,
            problem TEXT NOT NULL,
            detected_at INTEGER NOT NULL
        ) WITHOUT ROWID""",
    ),
)

V13 = Migration(
    13,
    "shards: the lease holder's fencing token, where each account lives, imported account slices",
    (
        # The fencing token of the shard lease's current grant (worker.shard_lease). Every write
        # transaction of a holder checks it is still its own: a holder whose lease passed on,
        # even one paused past its expiry, writes nothing.
        """CREATE TABLE shard_fence (
            id INTEGER PRIMARY KEY CHECK (id = 1),
            token INTEGER NOT NULL,
            owner TEXT NOT NULL,
            granted_at INTEGER NOT NULL
        )""",
        """CREATE TABLE shard_grant (
            token INTEGER PRIMARY KEY,
            owner TEXT NOT NULL,
            granted_at INTEGER NOT NULL
        )""",
        "ALTER TABLE outbox_attempt ADD COLUMN shard_token INTEGER",
        # This shard's copy of the account directory: an account that moved away keeps a row
        # (state 'moved', shard = where it went), so a late page for it is forwarded.
        """CREATE TABLE account_placement (
            account_id TEXT PRIMARY KEY,
            shard TEXT NOT NULL,
            generation INTEGER NOT NULL,
            state TEXT NOT NULL,
            updated_at INTEGER NOT NULL
        ) WITHOUT ROWID""",
        # The highest customer id ever given in each id range (runtime.placement.shards.customer_id_base):
        # new customers continue above it, even after the customers at the top moved away.
        """CREATE TABLE customer_id_high (
            base INTEGER PRIMARY KEY,
            last INTEGER NOT NULL
        )""",
        "INSERT INTO customer_id_high (base, last)"
        " SELECT id / 1000000000 * 1000000000, max(id) FROM customer GROUP BY id / 1000000000",
        """CREATE TRIGGER customer_id_high_water AFTER INSERT ON customer BEGIN
            INSERT INTO customer_id_high (base, last) VALUES (NEW.id / 1000000000 * 1000000000, NEW.id)
            ON CONFLICT (base) DO UPDATE SET last = max(last, excluded.last);
        END""",
        """CREATE TABLE placement_import (
            op_id TEXT PRIMARY KEY,
            account_id TEXT NOT NULL,
            result TEXT NOT NULL,
            files_done INTEGER NOT NULL DEFAULT 0,
            imported_at INTEGER NOT NULL
        ) WITHOUT ROWID""",
    ),
)

V14 = Migration(
    14,
    "open-work indexes a query can use: one partial index per state",
    (
        # SQLite uses a partial index only for a query whose WHERE repeats the index's: one on
        # `state IN ('pending', 'claimed')` never served `state = 'pending'`, so admission read all
        # of a customer's messages and the reconciler whole tables. One index per open state
        # holds only open work, so these queries cost what is open, not what is stored.
        "DROP INDEX inbound_open",
        "CREATE INDEX inbound_pending ON inbound_message (customer_id, id) WHERE state = 'pending'",
        "CREATE INDEX inbound_claimed ON inbound_message (customer_id) WHERE state = 'claimed'",
        "DROP INDEX outbox_unsettled",
        "CREATE INDEX outbox_pending ON outbox_request (customer_id) WHERE state = 'pending'",
        "CREATE INDEX outbox_sending ON outbox_request (updated_at) WHERE state = 'sending'",
        "CREATE INDEX outbox_unknown ON outbox_request (updated_at) WHERE state = 'result-unknown'",
    ),
)

V15 = Migration(
    15,
    "a stream's oldest page not yet ingested, found by an index",
    (
        # Advancing a stream's cursor asks for that page at every ingest: with only the index
        # on (account, stream, id) it walked every page the stream ever received to find none.
        "CREATE INDEX received_page_pending_in_stream ON received_page (account_id, stream_id, id)"
        " WHERE ingested_at IS NULL",
    ),
)

V16 = Migration(
    16,
    "operators of the console, what each of them did, and who sent a manual message",
    (
        """CREATE TABLE operator (
            name TEXT PRIMARY KEY,
            role TEXT NOT NULL CHECK (role IN ('viewer', 'operator', 'admin')),
            password_hash TEXT NOT NULL,
            created_at INTEGER NOT NULL,
            disabled_at INTEGER
        ) WITHOUT ROWID""",
        """CREATE TABLE operator_action (
            id INTEGER PRIMARY KEY,
            at INTEGER NOT NULL,
            operator TEXT NOT NULL,
            action TEXT NOT NULL,
            customer_id INTEGER,
            request_id TEXT,
            detail TEXT
        )""",
        "CREATE INDEX operator_action_by_customer ON operator_action (customer_id, id)",
        # The console's live view asks per conversation whether the buyer read something new.
        "CREATE INDEX buyer_read_by_customer ON buyer_read (customer_id)",
        "ALTER TABLE outbox_request ADD COLUMN operator TEXT",
    ),
)

_NOW_MS = "CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)"
_SIMULATED = "coalesce((SELECT simulated FROM account WHERE id = NEW.account_id), 0)"

V17 = Migration(
    17,
    "alerts for humans, raised by the change that calls for one (runtime.operators.alerts)",
    (
        """CREATE TABLE alert (
            id INTEGER PRIMARY KEY,
            key TEXT NOT NULL DEFAULT (lower(hex(randomblob(12)))),
            kind TEXT NOT NULL,
            state TEXT NOT NULL DEFAULT 'raised',
            account_id TEXT,
            customer_id INTEGER,
            request_id TEXT,
            code TEXT,
            simulated INTEGER NOT NULL DEFAULT 0,
            raised_at INTEGER NOT NULL,
            attempts INTEGER NOT NULL DEFAULT 0,
            last_failure TEXT,
            settled_at INTEGER
        )""",
        "CREATE INDEX alert_raised ON alert (id) WHERE state = 'raised'",
        "CREATE INDEX alert_settled ON alert (settled_at) WHERE state != 'raised'",
        # One alert per request and kind: a send that goes unknown again after a receipt query
        # sent it back to pending is the same news.
        "CREATE UNIQUE INDEX alert_once_per_request ON alert (request_id, kind) WHERE request_id IS NOT NULL",
        # Who paused a customer: the agent handing off (an alert) or an operator taking over.
        "ALTER TABLE customer ADD COLUMN handed_off INTEGER NOT NULL DEFAULT 0",
        # Triggers, so that no code path that changes these states can forget the alert, and it
        # commits with the change. Only UPDATEs raise one: moving an account to another shard
        # INSERTs its rows there, which must not raise its old alerts again.
        f"""CREATE TRIGGER alert_on_send_outcome AFTER UPDATE OF state ON outbox_request
            WHEN NEW.state IN ('failed', 'result-unknown') AND OLD.state IS NOT NEW.state
             AND NEW.error_code IS NOT 'KEFU_OPERATOR_NOT_DELIVERED'
        BEGIN
            INSERT OR IGNORE INTO alert (kind, account_id, customer_id, request_id, code, simulated, raised_at)
            VALUES (CASE NEW.state WHEN 'failed' THEN 'send-failed' ELSE 'send-unknown' END,
                    NEW.account_id, NEW.customer_id, NEW.request_id, NEW.error_code, {_SIMULATED}, {_NOW_MS});
        END""",
        f"""CREATE TRIGGER alert_on_handoff AFTER UPDATE OF handling_paused ON customer
            WHEN NEW.handling_paused AND NOT OLD.handling_paused AND NEW.handed_off
        BEGIN
            INSERT INTO alert (kind, account_id, customer_id, code, simulated, raised_at)
            VALUES ('handoff', NEW.account_id, NEW.id, 'handoff', {_SIMULATED}, {_NOW_MS});
        END""",
        f"""CREATE TRIGGER alert_on_listener_failed AFTER UPDATE OF listener_state ON account
            WHEN NEW.listener_state = 'failed' AND OLD.listener_state IS NOT 'failed'
        BEGIN
            INSERT INTO alert (kind, account_id, code, simulated, raised_at)
            VALUES ('listener-failed', NEW.id, NEW.last_error, NEW.simulated, {_NOW_MS});
        END""",
    ),
)

V18 = Migration(
    18,
    "tombstones of erased buyers (runtime.customers.erasure), and a customer's batches by an index",
    (
        """CREATE TABLE erasure (
            erased_customer INTEGER PRIMARY KEY,  -- customer ids are never given again
            account_id TEXT NOT NULL,
            conversation_key TEXT NOT NULL,  -- sha256 of the conversation id: known again, not kept
            conversation_type TEXT NOT NULL,
            through_ms INTEGER NOT NULL,  -- the newest erased message's platform time
            erased_at INTEGER NOT NULL,
            operator TEXT NOT NULL,
            counts TEXT NOT NULL  -- JSON: what went, per store
        )""",
        "CREATE INDEX erasure_by_conversation ON erasure (account_id, conversation_key)",
        # Erasing reads a customer's batches in every state (batch_open holds only open ones).
        "CREATE INDEX batch_by_customer ON admission_batch (customer_id)",
    ),
)

V19 = Migration(
    19,
    "buyers' images fetched into the store: the ones still to fetch, and the copies they use",
    (
        # runtime.inbound.media writes the outcome into the image message's body (JSON). The
        # console's own images, mirrored as inbound rows, are stored copies from the start.
        "UPDATE inbound_message SET body = json_set(body, '$.media', 'stored', '$.sha256',"
        " substr(json_extract(body, '$.ref'), 7)) WHERE content_type = 'image'"
        " AND json_extract(body, '$.ref') LIKE 'media:%'",
        "CREATE INDEX inbound_image_pending ON inbound_message (id)"
        " WHERE content_type = 'image' AND json_extract(body, '$.media') IS NULL",
        "CREATE INDEX inbound_image_media ON inbound_message (json_extract(body, '$.sha256'))"
        " WHERE content_type = 'image'",
        # Pruning and erasing look replies up by what refers to them: without these, each
        # reply deleted read the whole table inside the write transaction.
        "CREATE INDEX outbox_by_follows ON outbox_request (follows) WHERE follows IS NOT NULL",
        "CREATE INDEX outbox_by_retry ON outbox_request (retry_of) WHERE retry_of IS NOT NULL",
        "CREATE INDEX outbox_by_media ON outbox_request (media_sha256) WHERE media_sha256 IS NOT NULL",
        "CREATE INDEX buyer_read_by_request ON buyer_read (request_id)",
    ),
)

V20 = Migration(
    20,
    "session headers (customer, model, origin), pending questions, and reply webhooks kept with messages",
    (
        # Written once when a session begins and never changed (seed 002: the header is
        # frozen); which session is a customer's current one stays customer.session_id.
        """CREATE TABLE agent_session (
            id TEXT PRIMARY KEY,
            customer_id INTEGER NOT NULL,
            created_at INTEGER NOT NULL,
            model TEXT,  -- the agent's model when it began; NULL: began before headers
            origin TEXT NOT NULL,  -- runtime.store.states.SessionOrigin
            reason TEXT,  -- why the previous session ended (rotated), or who forked it
            parent TEXT,  -- the session it continues or was forked from
            inherited INTEGER NOT NULL DEFAULT 0  -- events a fork copied from its parent
        )""",
        "CREATE INDEX agent_session_by_customer ON agent_session (customer_id, created_at)",
        # A question the agent asked the buyer, kept until a later turn is offered it
        # (runtime.agent.pending_questions), so a takeover, a restart or a new session loses none.
        """CREATE TABLE pending_question (
            request_id TEXT PRIMARY KEY,  -- the reply that asked it
            customer_id INTEGER NOT NULL,
            question TEXT NOT NULL,
            asked_at INTEGER NOT NULL,
            state TEXT NOT NULL,  -- runtime.store.states.QuestionState
            offered_batch TEXT  -- the batch whose turn was offered it
        )""",
        "CREATE INDEX pending_question_by_customer ON pending_question (customer_id, state)",
        # Where a reply to a buyer without a staff id can be posted for a while (a DingTalk
        # sessionWebhook, runtime.outbox.recipients): JSON {url, expires_at}; the URL is a credential.
        "ALTER TABLE inbound_message ADD COLUMN reply_webhook TEXT",
        "CREATE INDEX inbound_reply_webhook ON inbound_message (customer_id, id) WHERE reply_webhook IS NOT NULL",
        # Sessions begun before headers: their customers' current ones and the damaged ones.
        "INSERT OR IGNORE INTO agent_session (id, customer_id, created_at, origin)"
        " SELECT session_id, customer_id, detected_at, 'legacy' FROM damaged_session",
        "INSERT OR IGNORE INTO agent_session (id, customer_id, created_at, origin)"
        " SELECT session_id, id, last_activity_at, 'legacy' FROM customer WHERE session_id IS NOT NULL",
    ),
)

V21 = Migration(
    21,
    "the model calls of each finished batch's turn, and their time (status and metrics)",
    (
        "ALTER TABLE admission_batch ADD COLUMN model_calls INTEGER NOT NULL DEFAULT 0",
        "ALTER TABLE admission_batch ADD COLUMN model_ms INTEGER NOT NULL DEFAULT 0",  # wall time, slot wait included
        "CREATE INDEX batch_model_calls ON admission_batch (updated_at) WHERE model_calls > 0",
    ),
)

V22 = Migration(
    22,
    "an operator's sign-out time: a console session signed in before it has ended, wherever its cookie is",
    ("ALTER TABLE operator ADD COLUMN signed_out_at INTEGER NOT NULL DEFAULT 0",),
)

V23 = Migration(
    23,
    "a team's inbox: each conversation's assignee and status, the shop's canned replies, operators' private notes",
    (
        # An operator's name (operator.name), or NULL: nobody's. Taking over assigns.
        "ALTER TABLE customer ADD COLUMN assignee TEXT",
        # runtime.store.states.ConversationStatus as set, when, and the newest message then: a
        # buyer's message after it reopens a resolved or snoozed conversation, as does a snooze's
        # end (queries.customer.effective_status).
        "ALTER TABLE customer ADD COLUMN status TEXT NOT NULL DEFAULT 'open'",
        "ALTER TABLE customer ADD COLUMN status_at INTEGER NOT NULL DEFAULT 0",
        "ALTER TABLE customer ADD COLUMN status_after INTEGER NOT NULL DEFAULT 0",
        "ALTER TABLE customer ADD COLUMN snoozed_until INTEGER",
        # A conversation the agent handed off and nobody has taken is waiting for the shop.
        "UPDATE customer SET status = 'waiting' WHERE handling_paused AND handed_off",
        "CREATE INDEX customer_by_assignee ON customer (assignee, last_activity_at) WHERE assignee IS NOT NULL",
        """CREATE TABLE canned_reply (
            id INTEGER PRIMARY KEY,
            shortcut TEXT NOT NULL UNIQUE,  -- what an operator types after `/`
            body TEXT NOT NULL,  -- may name {buyer} and {operator}
            updated_by TEXT NOT NULL,
            updated_at INTEGER NOT NULL
        )""",
        """CREATE TABLE operator_note (
            id INTEGER PRIMARY KEY,
            customer_id INTEGER NOT NULL REFERENCES customer(id),
            account_id TEXT NOT NULL,
            operator TEXT NOT NULL,
            body TEXT NOT NULL,  -- for operators only: never sent, never in the agent's history
            created_at INTEGER NOT NULL
        )""",
        "CREATE INDEX operator_note_by_customer ON operator_note (customer_id, id)",
    ),
)

# V24's summaries are kept by triggers from the facts they count (report_activity's rows per
# conversation and hour, reply_wait's per wait and reply), in the statement that changes a fact:
# whatever writes or deletes facts (the catch-up, an erasure, a move away) leaves the summaries
# equal to a count of them, and a summary row that counts nothing is gone. But for a rebuild
# (another shop zone), which deletes report_state's row first and then facts and summaries
# wholesale: a delete takes from the summaries only while facts are kept (_KEPT), or deleting a
# month of facts would hold the write lock for as long as counting them again.
# Facts' keys are never updated (a conversation's hour stays its hour): report_activity changes
# by insert, its `messages` and delete; reply_wait by insert, the reply that ends a wait, delete.
_DAY_MS = 25 * 3600 * 1000  # a day of the shop's zone is 23 to 25 hours long
_KEPT = "EXISTS (SELECT 1 FROM report_state)"


def _other_hour_that_day(row: str) -> str:
    """Whether `row`'s conversation (NEW or OLD of report_activity) has another hour on its day."""
    return (
        f"EXISTS (SELECT 1 FROM report_activity a WHERE a.customer_id = {row}.customer_id"
        f" AND a.hour_at >= {row}.day_at AND a.hour_at < {row}.day_at + {_DAY_MS}"
        f" AND a.day_at = {row}.day_at AND a.hour_at != {row}.hour_at)"
    )


def _day_before(row: str) -> str:
    """`row`'s conversation's latest day before `row`'s with a buyer message; 0: none."""
    return (
        f"coalesce((SELECT a.day_at FROM report_activity a WHERE a.customer_id = {row}.customer_id"
        f" AND a.hour_at < {row}.day_at ORDER BY a.hour_at DESC LIMIT 1), 0)"
    )


def _day_after(row: str) -> str:
    """`row`'s conversation's first day after `row`'s with a buyer message; NULL: none."""
    return (
        f"(SELECT a.day_at FROM report_activity a WHERE a.customer_id = {row}.customer_id"
        f" AND a.hour_at >= {row}.day_at AND a.day_at > {row}.day_at ORDER BY a.hour_at LIMIT 1)"
    )


def _add(table: str, key: dict[str, str], counts: dict[str, str], when: str = "true") -> str:
    """`table`'s row of `key` (column -> SQL value) counts `counts` (column -> SQL value) more,
    when `when` holds; a row is made for a key first counted."""
    columns, values = ", ".join([*key, *counts]), ", ".join([*key.values(), *counts.values()])
    more = ", ".join(f"{count} = {count} + excluded.{count}" for count in counts)
    return (
        f"INSERT INTO {table} ({columns}) SELECT {values} WHERE {when}"
        f" ON CONFLICT ({', '.join(key)}) DO UPDATE SET {more};"
    )


def _take(table: str, key: dict[str, str], counts: dict[str, str], when: str | None = None) -> str:
    """`table`'s row of `key` counts `counts` less, when `when` holds; the row goes when its first
    count is down to none."""
    match = " AND ".join(f"{column} = {value}" for column, value in key.items())
    only = f" AND {when}" if when else ""
    less = ", ".join(f"{count} = {count} - {value}" for count, value in counts.items())
    return (
        f"UPDATE {table} SET {less} WHERE {match}{only};"
        f" DELETE FROM {table} WHERE {match} AND {next(iter(counts))} = 0;"
    )


def _conversation_days(row: str, add: bool) -> str:
    """report_day as `row` (NEW: a conversation's first hour of a day, added; OLD: its last,
    deleted) changes it: the day counts the conversation by its day before, and the conversation's
    next day, counted by the day before that until now, is now counted by this day (or back)."""
    day, account = f"{row}.day_at", f"{row}.account_id"
    before, after = _day_before(row), _day_after(row)
    one = {"conversations": "1"}

    def key(at: str, since: str) -> dict[str, str]:
        return {"day_at": at, "account_id": account, "since_day": since}

    if add:
        changes = [
            _add("report_day", key(day, before), one),
            _take("report_day", key(after, before), one),
            _add("report_day", key(after, day), one, f"{after} IS NOT NULL"),
        ]
    else:
        changes = [
            _take("report_day", key(day, before), one),
            _take("report_day", key(after, day), one),
            _add("report_day", key(after, before), one, f"{after} IS NOT NULL"),
        ]
    return "\n".join(changes)


# A handoff's nearest hours with buyer messages of its conversation, at or before it and after it
# (report_activity): with them a period's handoffs of its own conversations are read without
# looking up each one's messages (queries.report_event.HANDOFFS). A conversation's handoffs are
# found by its id (`+kind`: not by report_event_by_kind, every handoff there is).
_WROTE_NEAR = (
    "wrote_before = (SELECT a.hour_at FROM report_activity a WHERE a.customer_id = report_event.customer_id"
    " AND a.hour_at <= report_event.at ORDER BY a.hour_at DESC LIMIT 1),"
    " wrote_after = (SELECT a.hour_at FROM report_activity a WHERE a.customer_id = report_event.customer_id"
    " AND a.hour_at > report_event.at ORDER BY a.hour_at LIMIT 1)"
)


def _reply_counts(row: str, add: bool) -> str:
    """The counts reply_wait's `row` (NEW or OLD) is in: an answered wait by the day it began,
    the reply's origin and the reply time as counted (`seconds`), and a manual one also by its
    operator; a manual reply by the day it was sent and its operator."""
    change = _add if add else _take
    operator, account = f"coalesce({row}.operator, '')", f"{row}.account_id"
    waited, manual = f"{row}.seconds IS NOT NULL", f"{row}.origin = 'manual'"
    times = {"day_at": f"{row}.day_at", "origin": f"{row}.origin", "seconds": f"{row}.seconds", "account_id": account}
    ever = {"operator": operator, "seconds": f"{row}.seconds", "account_id": account}
    sent = {"day_at": f"{row}.answered_day", "operator": operator, "account_id": account}
    return "\n".join(
        [
            change("report_reply_time", times, {"waits": "1", "firsts": f"{row}.first_of_day"}, waited),
            change(
                "report_operator_time", {**ever, "day_at": f"{row}.day_at"}, {"waits": "1"}, f"{waited} AND {manual}"
            ),
            change("report_operator_ever", ever, {"waits": "1"}, f"{waited} AND {manual}"),
            change("report_operator_replies", sent, {"replies": "1"}, f"{row}.answered_day IS NOT NULL AND {manual}"),
        ]
    )


V24 = Migration(
    24,
    "response-time and volume reports: facts kept from the store's rows as they come, and their summaries"
    " (runtime.operators.reports)",
    (
        # How far the facts below are kept: inbound messages up to `message_id`, replies sent up to
        # `sent_at`, hours and days in `zone` (another shop zone rebuilds them). One row.
        """CREATE TABLE report_state (
            id INTEGER PRIMARY KEY CHECK (id = 1),
            zone TEXT NOT NULL,
            message_id INTEGER NOT NULL,
            sent_at INTEGER NOT NULL,
            updated_at INTEGER NOT NULL
        )""",
        # Buyer messages per conversation and shop-zone hour: an hour's rows are its conversations.
        """CREATE TABLE report_activity (
            customer_id INTEGER NOT NULL,
            hour_at INTEGER NOT NULL,  -- the hour's start in the shop's zone (ms)
            account_id TEXT NOT NULL,
            day_at INTEGER NOT NULL,  -- the start of the hour's day in the shop's zone
            messages INTEGER NOT NULL,
            PRIMARY KEY (customer_id, hour_at)
        ) WITHOUT ROWID""",
        # A buyer's wait for the shop and the reply that ended it; or a reply that ended none.
        """CREATE TABLE reply_wait (
            id INTEGER PRIMARY KEY,
            customer_id INTEGER NOT NULL,
            account_id TEXT NOT NULL,
            started_at INTEGER,  -- the first unanswered buyer message's receive time; NULL: no wait
            day_at INTEGER,  -- the start of started_at's day in the shop's zone
            first_of_day INTEGER NOT NULL DEFAULT 0,  -- the conversation's first wait of its day
            answered_at INTEGER,  -- the reply's sent time; NULL: still waiting
            answered_day INTEGER,  -- the start of answered_at's day in the shop's zone
            seconds INTEGER,  -- an answered wait's reply time as counted (facts.reply_seconds)
            origin TEXT,  -- the reply's: auto or manual
            operator TEXT,  -- a manual reply's operator (NULL: sent unnamed, from the CLI)
            request_id TEXT  -- the reply
        )""",
        "CREATE UNIQUE INDEX reply_wait_by_request ON reply_wait (request_id) WHERE request_id IS NOT NULL",
        "CREATE INDEX reply_wait_open ON reply_wait (customer_id) WHERE answered_at IS NULL",
        "CREATE INDEX reply_wait_open_by_start ON reply_wait (started_at, account_id) WHERE answered_at IS NULL",
        "CREATE INDEX reply_wait_by_customer ON reply_wait (customer_id, started_at)",
        # The summaries a report reads (a month of a busy shop's facts is 10^5-10^6 rows; these
        # are a few thousand), each per account so that a source's are a sum and a move leaves
        # with its facts. Buyer messages and conversations per hour:
        """CREATE TABLE report_hour (
            hour_at INTEGER NOT NULL,
            account_id TEXT NOT NULL,
            messages INTEGER NOT NULL,
            conversations INTEGER NOT NULL,
            PRIMARY KEY (hour_at, account_id)
        ) WITHOUT ROWID""",
        # Conversations per day, by the conversation's day before with a buyer message: a period's
        # conversations are those of its days counted by a day before it, each once.
        """CREATE TABLE report_day (
            day_at INTEGER NOT NULL,
            account_id TEXT NOT NULL,
            since_day INTEGER NOT NULL,  -- 0: the conversation had no day before
            conversations INTEGER NOT NULL,
            PRIMARY KEY (day_at, account_id, since_day)
        ) WITHOUT ROWID""",
        # Answered waits by the day they began, the reply's origin and the reply time (rounded up:
        # a day's are a few hundred rows however many waits it had), in reply-time order.
        """CREATE TABLE report_reply_time (
            day_at INTEGER NOT NULL,
            origin TEXT NOT NULL,  -- of the reply that ended them: auto or manual
            seconds INTEGER NOT NULL,
            account_id TEXT NOT NULL,
            waits INTEGER NOT NULL,
            firsts INTEGER NOT NULL,  -- of them, conversations' first waits of the day
            PRIMARY KEY (day_at, origin, seconds, account_id)
        ) WITHOUT ROWID""",
        # The waits an operator's reply ended, by reply time and the day they began; and by reply
        # time alone, ever: a period's are one look each at the days of the reply times an operator
        # ever took (a few hundred), not a row per day and reply time. Operator '': sent unnamed
        # (the CLI). And the manual replies sent, by the day they were sent.
        """CREATE TABLE report_operator_time (
            operator TEXT NOT NULL,
            seconds INTEGER NOT NULL,
            account_id TEXT NOT NULL,
            day_at INTEGER NOT NULL,
            waits INTEGER NOT NULL,
            PRIMARY KEY (operator, seconds, account_id, day_at)
        ) WITHOUT ROWID""",
        """CREATE TABLE report_operator_ever (
            operator TEXT NOT NULL,
            seconds INTEGER NOT NULL,
            account_id TEXT NOT NULL,
            waits INTEGER NOT NULL,
            PRIMARY KEY (operator, seconds, account_id)
        ) WITHOUT ROWID""",
        """CREATE TABLE report_operator_replies (
            day_at INTEGER NOT NULL,
            operator TEXT NOT NULL,
            account_id TEXT NOT NULL,
            replies INTEGER NOT NULL,
            PRIMARY KEY (day_at, operator, account_id)
        ) WITHOUT ROWID""",
        f"""CREATE TRIGGER report_activity_on_insert AFTER INSERT ON report_activity
        BEGIN
            INSERT INTO report_hour (hour_at, account_id, messages, conversations)
            VALUES (NEW.hour_at, NEW.account_id, NEW.messages, 1)
            ON CONFLICT (hour_at, account_id) DO UPDATE
            SET messages = messages + excluded.messages, conversations = conversations + 1;
            UPDATE report_event SET {_WROTE_NEAR} WHERE customer_id = NEW.customer_id AND +kind = 'handoff';
        END""",
        """CREATE TRIGGER report_activity_on_more AFTER UPDATE OF messages ON report_activity
        BEGIN
            UPDATE report_hour SET messages = messages + NEW.messages - OLD.messages
            WHERE hour_at = NEW.hour_at AND account_id = NEW.account_id;
        END""",
        f"""CREATE TRIGGER report_activity_on_delete AFTER DELETE ON report_activity WHEN {_KEPT}
        BEGIN
            UPDATE report_hour SET messages = messages - OLD.messages, conversations = conversations - 1
            WHERE hour_at = OLD.hour_at AND account_id = OLD.account_id;
            DELETE FROM report_hour WHERE hour_at = OLD.hour_at AND account_id = OLD.account_id AND conversations = 0;
            UPDATE report_event SET {_WROTE_NEAR} WHERE customer_id = OLD.customer_id AND +kind = 'handoff';
        END""",
        f"""CREATE TRIGGER report_day_on_insert AFTER INSERT ON report_activity
            WHEN NOT {_other_hour_that_day("NEW")}
        BEGIN
            {_conversation_days("NEW", add=True)}
        END""",
        f"""CREATE TRIGGER report_day_on_delete AFTER DELETE ON report_activity
            WHEN {_KEPT} AND NOT {_other_hour_that_day("OLD")}
        BEGIN
            {_conversation_days("OLD", add=False)}
        END""",
        f"""CREATE TRIGGER report_replies_on_insert AFTER INSERT ON reply_wait WHEN NEW.answered_at IS NOT NULL
        BEGIN
            {_reply_counts("NEW", add=True)}
        END""",
        f"""CREATE TRIGGER report_replies_on_update AFTER UPDATE ON reply_wait
        BEGIN
            {_reply_counts("OLD", add=False)}
            {_reply_counts("NEW", add=True)}
        END""",
        f"""CREATE TRIGGER report_replies_on_delete AFTER DELETE ON reply_wait
            WHEN {_KEPT} AND OLD.answered_at IS NOT NULL
        BEGIN
            {_reply_counts("OLD", add=False)}
        END""",
        # When the agent handed a conversation to a human, and when an operator resolved one, as
        # they happen: nothing else keeps a handoff's time (an alert is pruned), and operator
        # actions stay on their shard when an account moves (these move with it).
        """CREATE TABLE report_event (
            customer_id INTEGER NOT NULL,
            at INTEGER NOT NULL,
            kind TEXT NOT NULL CHECK (kind IN ('handoff', 'resolve')),
            account_id TEXT NOT NULL,
            operator TEXT,  -- who resolved it
            wrote_before INTEGER,  -- a handoff's: its conversation's last hour with buyer messages at or before it
            wrote_after INTEGER,  -- and its first after it (NULL: none; kept by the triggers on report_activity)
            PRIMARY KEY (customer_id, at, kind)
        ) WITHOUT ROWID""",
        "CREATE INDEX report_event_by_kind ON report_event (kind, at, account_id, operator, wrote_before, wrote_after)",
        # A handoff however it comes (the trigger below, an account moved here) gets its hours.
        f"""CREATE TRIGGER report_event_on_insert AFTER INSERT ON report_event WHEN NEW.kind = 'handoff'
        BEGIN
            UPDATE report_event SET {_WROTE_NEAR}
            WHERE customer_id = NEW.customer_id AND at = NEW.at AND kind = NEW.kind;
        END""",
        # The handoffs of the last month, from their alerts; the resolves recorded so far.
        "INSERT OR IGNORE INTO report_event (customer_id, at, kind, account_id)"
        " SELECT customer_id, raised_at, 'handoff', account_id FROM alert WHERE kind = 'handoff'"
        " AND customer_id IS NOT NULL",
        "INSERT OR IGNORE INTO report_event (customer_id, at, kind, account_id, operator)"
        " SELECT o.customer_id, o.at, 'resolve', c.account_id, o.operator FROM operator_action o"
        " JOIN customer c ON c.id = o.customer_id WHERE o.action = 'resolve'",
        # The pause stamps status_at (queries.customer.PAUSE_HANDLING) with the core's clock.
        f"""CREATE TRIGGER report_event_on_handoff AFTER UPDATE OF handling_paused ON customer
            WHEN NEW.handling_paused AND NOT OLD.handling_paused AND NEW.handed_off
        BEGIN
            INSERT OR IGNORE INTO report_event (customer_id, at, kind, account_id)
            VALUES (NEW.id, CASE WHEN NEW.status_at > 0 THEN NEW.status_at ELSE {_NOW_MS} END, 'handoff',
                    NEW.account_id);
        END""",
        """CREATE TRIGGER report_event_on_resolve AFTER INSERT ON operator_action
            WHEN NEW.action = 'resolve' AND NEW.customer_id IS NOT NULL
        BEGIN
            INSERT OR IGNORE INTO report_event (customer_id, at, kind, account_id, operator)
            SELECT id, NEW.at, 'resolve', account_id, NEW.operator FROM customer WHERE id = NEW.customer_id;
        END""",
        # A message's id is the largest plus one: deleting the newest messages (an erasure, a move
        # away) gives their ids again, so the facts' mark comes down with them.
        """CREATE TRIGGER report_mark_on_delete AFTER DELETE ON inbound_message
            WHEN OLD.id > coalesce((SELECT max(id) FROM inbound_message), 0)
        BEGIN
            UPDATE report_state SET message_id = coalesce((SELECT max(id) FROM inbound_message), 0)
            WHERE message_id > coalesce((SELECT max(id) FROM inbound_message), 0);
        END""",
        # Replies sent in a time range (the facts' catch-up).
        "CREATE INDEX outbox_attempt_sent ON outbox_attempt (finished_at) WHERE state = 'sent'",
        # Every console page counts the failed sends (queries.customer.NOTICE_COUNTS): without an
        # index that read every reply ever stored (30 ms at 370,000 of them), as outbox_unknown
        # spares the count of unknown ones.
        "CREATE INDEX outbox_failed ON outbox_request (updated_at) WHERE state = 'failed'",
    ),
)

V25 = Migration(
    25,
    "the agent profile a session began under (runtime.agent.profiles); NULL: the default profile",
    ("ALTER TABLE agent_session ADD COLUMN profile TEXT",),
)

V26 = Migration(
    26,
    "observation: a route's mode (answer, or observe: listen and store, never answer); history imports' progress",
    (
        # runtime.admission.routes.RouteMode: an observing route's input is stored as `observed`
        # (runtime.store.states.MessageState) and never admitted.
        "ALTER TABLE route ADD COLUMN mode TEXT NOT NULL DEFAULT 'answer' CHECK (mode IN ('answer', 'observe'))",
        # Observed input by receive time: the days the memory engine is still to remember
        # (runtime.inbound.history_import.remember_observed).
        "CREATE INDEX inbound_observed ON inbound_message (customer_id, received_at) WHERE state = 'observed'",
        # runtime.inbound.history_import: one row per imported file (its checksum), how far its
        # batches got into the history (`batches_done`) and into memory (`remembered`), so an
        # interrupted import goes on where it stopped.
        """CREATE TABLE history_import (
            checksum TEXT PRIMARY KEY,
            name TEXT NOT NULL,
            rows INTEGER NOT NULL,
            batch_size INTEGER NOT NULL,
            batches INTEGER NOT NULL,
            batches_done INTEGER NOT NULL DEFAULT 0,
            remembered INTEGER NOT NULL DEFAULT 0,
            imported INTEGER NOT NULL DEFAULT 0,
            present INTEGER NOT NULL DEFAULT 0,
            skipped INTEGER NOT NULL DEFAULT 0,
            started_at INTEGER NOT NULL,
            finished_at INTEGER
        )""",
    ),
)

V27 = Migration(
    27,
    "buyers' files, voice and video fetched into the store as their images are",
    (
        # runtime.inbound.media writes each fetch's outcome into the message's body (JSON), for
        # files, voice and video as for images (V19). A file's body is the file's name, not JSON,
        # on the console's mirror of a file the shop sent: json_valid first, so no row fails the
        # index's json_extract. These replace V19's two image-only indexes.
        "DROP INDEX IF EXISTS inbound_image_pending",
        "DROP INDEX IF EXISTS inbound_image_media",
        "CREATE INDEX inbound_media_pending ON inbound_message (id)"
        " WHERE content_type IN ('image', 'file', 'voice', 'video') AND json_valid(body)"
        " AND json_extract(body, '$.media') IS NULL AND json_extract(body, '$.ref') IS NOT NULL",
        "CREATE INDEX inbound_media_copy ON inbound_message (json_extract(body, '$.sha256'))"
        " WHERE content_type IN ('image', 'file', 'voice', 'video') AND json_valid(body)",
    ),
)

V28 = Migration(
    28,
    "read status: at most one query per sent 1:1 message, marked before it is made (SPEC 3.9)",
    (
        # runtime.outbox.read_checks: a check's `queried_at` is set in the transaction that claims
        # it, before the platform is asked; the row stays as the mark, so neither a crash, a
        # redelivered task nor an overlapping round asks twice. `checks_left` is no longer read.
        "ALTER TABLE read_check ADD COLUMN queried_at INTEGER",
        # Rows of the old schedule (three checks by default) with fewer left were asked already.
        "UPDATE read_check SET queried_at = due_at WHERE checks_left < 3",
        # The due ones only: the marks of queried messages stay until their requests go.
        "DROP INDEX IF EXISTS read_check_due",
        "CREATE INDEX read_check_due ON read_check (due_at) WHERE queried_at IS NULL",
    ),
)

V29 = Migration(
    29,
    "the shard's key pair that an account's credential is sealed to when it moves here (runtime.placement.sealing)",
    (
        # One row per shard this store served: the private half never leaves the store (the
        # credentials it protects live here too); the public half is published where every host
        # sees it, so that a source shard seals a moving account's credential to it.
        """CREATE TABLE shard_key (
            shard TEXT PRIMARY KEY,
            public_key TEXT NOT NULL,
            private_key TEXT NOT NULL,
            created_at INTEGER NOT NULL
        )""",
    ),
)

V30 = Migration(
    30,
    "restores from a backup: the window each one leaves, and what it held back (runtime.store.backup)",
    (
        # One row per `kefu restore`: the delivery store's snapshot time and when the restore put it
        # in place. The lost host may have answered anything between them; kefu cannot know.
        """CREATE TABLE restore_window (
            id INTEGER PRIMARY KEY,
            backup_id TEXT NOT NULL,
            shard TEXT NOT NULL,
            source_instance TEXT NOT NULL,
            backup_at INTEGER NOT NULL,
            restored_at INTEGER NOT NULL
        )""",
        # What a restore held back from automatic handling, by kind: input waiting at the backup
        # (`input`, a message id), a batch admitted and not done (`batch`), a send not settled
        # (`send`, now result-unknown) and input of the window the platform delivered again after
        # the restore (`gap`, a message id). Ids only: `kefu restore-gap` lists them.
        """CREATE TABLE restore_held (
            window_id INTEGER NOT NULL REFERENCES restore_window(id),
            kind TEXT NOT NULL CHECK (kind IN ('input', 'batch', 'send', 'gap')),
            ref TEXT NOT NULL,
            customer_id INTEGER NOT NULL,
            PRIMARY KEY (window_id, kind, ref)
        )""",
        # Live input that occurred before a restore and is stored after it (a platform delivering
        # the window again: a cursor paged again, a push redelivered) may have been answered by
        # the lost host: kept, never admitted. A trigger, so no ingest path can forget it; for a
        # store never restored it reads one empty table.
        """CREATE TRIGGER restore_gap_input AFTER INSERT ON inbound_message
            WHEN NEW.state = 'pending' AND EXISTS (SELECT 1 FROM restore_window
                WHERE NEW.occurred_at < restored_at AND NEW.received_at >= restored_at)
        BEGIN
            UPDATE inbound_message SET state = 'suppressed' WHERE id = NEW.id;
            INSERT OR IGNORE INTO restore_held (window_id, kind, ref, customer_id)
            SELECT max(id), 'gap', NEW.id, NEW.customer_id FROM restore_window
            WHERE NEW.occurred_at < restored_at AND NEW.received_at >= restored_at;
        END""",
    ),
)

# V31's reply-latency histogram bounds in ms: frozen with it (other bounds are a new migration's,
# never an edit of this one). runtime.operators.status.REPLY_LATENCY_BOUNDS names them in seconds.
_V31_BOUNDS_MS = (50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000, 300000)
# A reply's histogram rows: its count, its latency's sum and each bucket it is within.
_V31_HISTOGRAM_ROWS = " UNION ALL ".join(
    [
        "SELECT 'reply_latency_count' AS name, '' AS labels, NULL AS bound",
        "SELECT 'reply_latency_sum_ms', '', NULL",
        *(f"SELECT 'reply_latency_bucket', '{bound}', {bound}" for bound in _V31_BOUNDS_MS),
    ]
)
# From the first buyer message of request r's batch reaching the store to `sent_at`: an automatic
# reply to a buyer only (not one that follows another request, not one to an operator's line).
_V31_LATENCY = (
    "{sent_at} - (SELECT min(m.received_at) FROM inbound_message m"
    " WHERE m.batch_id = r.batch_id AND m.sender_role = 'external')"
)
_V31_ADD = " ON CONFLICT (name, labels) DO UPDATE SET value = value + excluded.value"
_V31_UNCOUNT_IMPORTED = (
    "UPDATE metric_counter SET value = value - (SELECT count(*) FROM inbound_message"
    " WHERE account_id = NEW.account_id AND sender_role = 'external' AND origin = 'live')"
    " WHERE name = 'buyer_messages_received' AND labels = ''"
)
_V31_OUTCOMES = "('sent', 'failed', 'result-unknown', 'revoked', 'route-changed', 'skipped')"

V31 = Migration(
    31,
    "counters that only ever grow, kept in the transaction of the event they count (metrics)",
    (
        # One row per counter and label values (tab-separated, in the order worker.console.metrics
        # names them). Pruning and erasure never touch it: a Prometheus counter never goes down.
        """CREATE TABLE metric_counter (
            name TEXT NOT NULL,
            labels TEXT NOT NULL DEFAULT '',
            value NUMERIC NOT NULL DEFAULT 0,
            PRIMARY KEY (name, labels)
        ) WITHOUT ROWID""",
        # Triggers, so no path that stores a buyer message or settles a send can forget to
        # count it, and the message path runs no statement more.
        # Received live: an imported history (runtime.inbound.history_import) was received long ago.
        """CREATE TRIGGER metric_buyer_message AFTER INSERT ON inbound_message
            WHEN NEW.sender_role = 'external' AND NEW.origin = 'live'
        BEGIN
            INSERT INTO metric_counter (name, labels, value) VALUES ('buyer_messages_received', '', 1)"""
        + _V31_ADD
        + """;
        END""",
        # An account's slice imported from another shard (runtime.placement.slices) inserts its
        # buyer messages too, then places the account 'importing' in the same transaction: the
        # placement takes them off again, so the transaction adds nothing. Its messages were
        # counted where they were received; a discarded import leaves the counter as it was.
        f"""CREATE TRIGGER metric_import_inserted AFTER INSERT ON account_placement
            WHEN NEW.state = 'importing'
        BEGIN
            {_V31_UNCOUNT_IMPORTED};
        END""",
        f"""CREATE TRIGGER metric_import_placed AFTER UPDATE OF state ON account_placement
            WHEN NEW.state = 'importing' AND OLD.state IS NOT 'importing'
        BEGIN
            {_V31_UNCOUNT_IMPORTED};
        END""",
        f"""CREATE TRIGGER metric_outbox_outcome AFTER UPDATE OF state ON outbox_request
            WHEN NEW.state IS NOT OLD.state AND NEW.state IN {_V31_OUTCOMES}
        BEGIN
            INSERT INTO metric_counter (name, labels, value)
            VALUES ('outbox_outcomes', NEW.origin || char(9) || NEW.state, 1){_V31_ADD};
        END""",
        f"""CREATE TRIGGER metric_reply_latency AFTER UPDATE OF state ON outbox_attempt
            WHEN NEW.state = 'sent' AND OLD.state IS NOT 'sent'
        BEGIN
            INSERT INTO metric_counter (name, labels, value)
            SELECT k.name, k.labels, CASE WHEN k.name = 'reply_latency_sum_ms' THEN l.ms ELSE 1 END
            FROM (SELECT {_V31_LATENCY.format(sent_at="coalesce(NEW.finished_at, 0)")} AS ms
                FROM outbox_request r WHERE r.request_id = NEW.request_id
                AND r.origin = 'auto' AND r.follows IS NULL) AS l, ({_V31_HISTOGRAM_ROWS}) AS k
            WHERE l.ms IS NOT NULL AND (k.bound IS NULL OR l.ms <= k.bound){_V31_ADD};
        END""",
        # What the store holds today, so an upgraded store's counters start where its
        # recounted figures stood.
        """INSERT INTO metric_counter (name, labels, value)
        SELECT 'buyer_messages_received', '', count(*) FROM inbound_message
        WHERE sender_role = 'external' AND origin = 'live'""",
        f"""INSERT INTO metric_counter (name, labels, value)
        SELECT 'outbox_outcomes', origin || char(9) || state, count(*) FROM outbox_request
        WHERE state IN {_V31_OUTCOMES} GROUP BY origin, state""",
        f"""INSERT INTO metric_counter (name, labels, value)
        SELECT k.name, k.labels, sum(CASE WHEN k.name = 'reply_latency_sum_ms' THEN l.ms ELSE 1 END)
        FROM (SELECT {_V31_LATENCY.format(sent_at="t.finished_at")} AS ms
            FROM outbox_request r JOIN outbox_attempt t ON t.request_id = r.request_id AND t.state = 'sent'
            WHERE r.origin = 'auto' AND r.follows IS NULL) AS l, ({_V31_HISTOGRAM_ROWS}) AS k
        WHERE l.ms IS NOT NULL AND (k.bound IS NULL OR l.ms <= k.bound) GROUP BY k.name, k.labels""",
    ),
)


# What a conversation search reads of a message (runtime.customers.search_index): the sender's
# name, and what was said: text, a file's name, what a voice message was heard to say; never the
# JSON kefu keeps about media. Frozen with V32 (queries.message_search.SAID is today's).
_V32_SAID = (
    "CASE WHEN {m}.content_type IN ('text', 'markdown') THEN {m}.body"
    " WHEN NOT json_valid({m}.body) THEN (CASE WHEN {m}.content_type = 'file' THEN {m}.body END)"
    " WHEN {m}.content_type = 'file' THEN json_extract({m}.body, '$.name')"
    " WHEN {m}.content_type = 'voice' THEN json_extract({m}.body, '$.recognition') END"
)
_V32_INDEX = (
    "INSERT INTO message_search (rowid, name, said) VALUES (NEW.id, NEW.sender_name, " + _V32_SAID.format(m="NEW") + ")"
)
_V32_INDEXED = "(SELECT message_id FROM search_state WHERE id = 1)"
_V32_NEWEST = "coalesce((SELECT max(id) FROM inbound_message), 0)"

V32 = Migration(
    32,
    "an index of what was said, so a search of 10^6 messages reads the index, not every row",
    (
        # A trigram index finds any substring of three characters or more (a Chinese word is
        # often two: those are looked for by a scan of this table, still far smaller than the
        # messages' rows). Its rowid is the message's id.
        "CREATE VIRTUAL TABLE message_search USING fts5(name, said, tokenize = 'trigram')",
        # New messages are indexed in batches by a catch-up (runtime.customers.search_index),
        # not one by one as they are stored: that would cost ingest half its speed. It holds
        # every message up to `message_id`.
        """CREATE TABLE search_state (
            id INTEGER PRIMARY KEY CHECK (id = 1),
            message_id INTEGER NOT NULL
        )""",
        "INSERT INTO search_state (id, message_id) VALUES (1, 0)",
        # What changes under the mark follows at once: a message deleted (retention, erasure, a
        # move) or rewritten (a media fetch). A deleted newest message (indexed or not) leaves
        # its id free for the next one (SQLite gives max(id) + 1): the mark comes down to the
        # newest left, so that the next message is above it, and indexed by the next catch-up.
        # One trigger: its entry goes first, while the mark still says it was indexed.
        f"""CREATE TRIGGER message_search_delete AFTER DELETE ON inbound_message
        BEGIN
            DELETE FROM message_search WHERE rowid = OLD.id AND OLD.id <= {_V32_INDEXED};
            UPDATE search_state SET message_id = {_V32_NEWEST} WHERE id = 1 AND message_id > {_V32_NEWEST};
        END""",
        f"""CREATE TRIGGER message_search_update AFTER UPDATE OF sender_name, content_type, body ON inbound_message
            WHEN OLD.id <= {_V32_INDEXED}
        BEGIN
            DELETE FROM message_search WHERE rowid = OLD.id;
            {_V32_INDEX};
        END""",
    ),
)

MIGRATIONS: tuple[Migration, ...] = (
    V1,
    V2,
    V3,
    V4,
    V5,
    V6,
    V7,
    V8,
    V9,
    V10,
    V11,
    V12,
    V13,
    V14,
    V15,
    V16,
    V17,
    V18,
    V19,
    V20,
    V21,
    V22,
    V23,
    V24,
    V25,
    V26,
    V27,
    V28,
    V29,
    V30,
    V31,
    V32,
)
LATEST_VERSION = latest(MIGRATIONS)
