"""The far side of the simulator: what buyers said and what the "platform" received.

It is the simulated platform's own ledger (a small SQLite file of its own, separate from
kefu's delivery store), shared by the demo or test process that plays buyers and the worker
processes that send. Every send is recorded, duplicates included: it is the ground truth
for counting duplicate replies.

Buyers talk in direct conversations or in groups (where a message carries explicit mention
evidence, as DingTalk's `isInAtList` does), with text, an image or a file; a message's time
is the caller's (a script clock) or now.
"""

from __future__ import annotations

import hashlib
import threading
import time
import uuid
from enum import StrEnum
from pathlib import Path
from typing import Literal, TypeVar

from pydantic import BaseModel, Field
from sqlalchemy.exc import OperationalError

from runtime.store.connection import Connection, connect
from runtime.store.engine import immediate
from runtime.store.failures import is_busy
from runtime.store.migrate import Migration, migrate

# Columns added to buyer_message after the first release of the ledger: (name, declaration).
_ADDED_COLUMNS = (
    ("conversation_type", "TEXT NOT NULL DEFAULT 'direct'"),
    ("group_title", "TEXT"),
    ("mention", "INTEGER"),  # groups only: 1 the shop was mentioned, 0 it was not
    ("media_kind", "TEXT"),  # image | file, its bytes in buyer_media
)


def _add_buyer_message_columns(conn: Connection) -> None:
    """The added columns a ledger made before versions (user_version 0) may lack already."""
    have = {row[1] for row in conn.execute("PRAGMA table_info(buyer_message)")}
    for name, declaration in _ADDED_COLUMNS:
        if name not in have:
            conn.execute(f"ALTER TABLE buyer_message ADD COLUMN {name} {declaration}")


# The ledger's schema (runtime.store.migrate). A ledger made before it had versions (user_version
# 0, its tables made at every open, its columns added outside any transaction) is taken as it
# is: version 1 only makes what is missing, version 2 adds only the columns it lacks.
MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "buyer messages and media, received sends, reads, simulation instances",
        (
            "CREATE TABLE IF NOT EXISTS buyer_message ("
            " seq INTEGER PRIMARY KEY AUTOINCREMENT,"
            " account_id TEXT NOT NULL,"
            " conversation_id TEXT NOT NULL,"
            " buyer_id TEXT NOT NULL,"
            " buyer_name TEXT NOT NULL,"
            " text TEXT NOT NULL,"
            " occurred_at INTEGER NOT NULL)",
            "CREATE TABLE IF NOT EXISTS buyer_media ("
            " seq INTEGER PRIMARY KEY REFERENCES buyer_message (seq),"
            " kind TEXT NOT NULL,"
            " name TEXT NOT NULL,"
            " data BLOB NOT NULL)",
            "CREATE INDEX IF NOT EXISTS buyer_by_conversation ON buyer_message (conversation_id, seq)",
            "CREATE TABLE IF NOT EXISTS received_send ("
            " id INTEGER PRIMARY KEY AUTOINCREMENT,"
            " platform_message_id TEXT NOT NULL UNIQUE,"
            " client_ref TEXT NOT NULL,"
            " account_id TEXT NOT NULL,"
            " conversation_id TEXT NOT NULL,"
            " recipient_id TEXT,"
            " text TEXT NOT NULL,"
            " received_at INTEGER NOT NULL,"
            " kind TEXT NOT NULL DEFAULT 'text',"
            " media_sha256 TEXT)",
            "CREATE TABLE IF NOT EXISTS buyer_read ("
            " id INTEGER PRIMARY KEY AUTOINCREMENT,"
            " received_id INTEGER NOT NULL UNIQUE REFERENCES received_send (id),"
            " read_at INTEGER NOT NULL)",
            "CREATE TABLE IF NOT EXISTS sim_instance ("
            " number INTEGER PRIMARY KEY,"
            " account_id TEXT NOT NULL,"
            " kind TEXT NOT NULL,"
            " buyer_id TEXT NOT NULL UNIQUE,"
            " buyer_name TEXT NOT NULL,"
            " persona TEXT,"
            " state TEXT NOT NULL,"
            " created_at INTEGER NOT NULL,"
            " stopped_at INTEGER)",
            "CREATE INDEX IF NOT EXISTS received_by_ref ON received_send (client_ref)",
            "CREATE INDEX IF NOT EXISTS received_by_conversation ON received_send (conversation_id)",
        ),
    ),
    Migration(
        2,
        "buyer messages in groups (title, mention) and with media",
        step=_add_buyer_message_columns,
    ),
)
_PRAGMAS = {
    "journal_mode": "WAL",
    # A platform's ledger: it outlives any process kill (the fault suite's faults) without a sync
    # per send, which would only add a disk's latency to the worker that sends.
    "synchronous": "NORMAL",
}
_BUSY_TIMEOUT_S = 10.0


def _open(path: Path) -> Connection:
    """A connection to the ledger. Of processes opening a new ledger at once, one whose switch
    to WAL meets another's lock is refused at once (SQLite's busy handler does not wait for it):
    it tries again, as long as a busy statement would wait."""
    deadline = time.monotonic() + _BUSY_TIMEOUT_S
    while True:
        try:
            return connect(path, _BUSY_TIMEOUT_S, _PRAGMAS)
        except OperationalError as error:
            if not is_busy(error) or time.monotonic() >= deadline:
                raise
        time.sleep(0.01)


class InstanceState(StrEnum):
    RUNNING = "running"
    STOPPING = "stopping"  # persisted first: no more buyer input, no more sends reach the buyer
    STOPPED = "stopped"  # quiet after stopping; never resumes


class SimInstance(BaseModel):
    """A simulation instance (seed 001 模拟实例): one conversation with a simulated buyer, either
    paired (a model plays the buyer) or manual (a person types as the buyer)."""

    number: int
    account_id: str
    kind: Literal["paired", "manual"]
    buyer_id: str
    buyer_name: str
    persona: str | None
    state: InstanceState
    created_at: int
    stopped_at: int | None

    @property
    def id(self) -> str:
        return f"sim-{self.number:03d}"

    @property
    def conversation_id(self) -> str:
        return SimulatedPlatform.conversation_for(self.buyer_id)


class InstanceStopped(Exception):
    """Buyer input or a send for an instance that is stopping or stopped."""

    code = "SIMULATION_STOPPED"


class BuyerMedia(BaseModel):
    kind: Literal["image", "file"]
    name: str = Field(min_length=1, max_length=256)
    data: bytes = Field(min_length=1)


class BuyerMessage(BaseModel):
    seq: int
    account_id: str
    conversation_id: str
    buyer_id: str
    buyer_name: str
    text: str
    occurred_at: int
    conversation_type: Literal["direct", "group"] = "direct"
    group_title: str | None = None
    mention: bool | None = None
    media_kind: Literal["image", "file"] | None = None


class ReceivedSend(BaseModel):
    id: int
    platform_message_id: str
    client_ref: str
    account_id: str
    conversation_id: str
    recipient_id: str | None
    text: str  # a media message's file name
    received_at: int
    kind: str = "text"  # text | image | file
    media_sha256: str | None = None


Row = TypeVar("Row", BuyerMessage, ReceivedSend, SimInstance)


class SimulatedPlatform:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        migrate(
            self._connect(),
            MIGRATIONS,
            f"{self.path} (a simulated platform's ledger)",
            "run a newer kefu, or point KEFU_SIMULATOR__PLATFORM_PATH (or KEFU_DATA_DIR) at another file",
        )

    def _connect(self) -> Connection:
        """This thread's connection (autocommit: every statement is its own transaction, but for
        those in `immediate`)."""
        conn: Connection | None = getattr(self._local, "db", None)
        if conn is None:
            conn = self._local.db = _open(self.path)
        return conn

    @staticmethod
    def conversation_for(buyer_id: str) -> str:
        return f"sim-direct-{buyer_id}"

    @staticmethod
    def group_conversation(group_id: str) -> str:
        return f"sim-group-{group_id}"

    @staticmethod
    def is_group(conversation_id: str) -> bool:
        return conversation_id.startswith("sim-group-")

    def _rows(self, model: type[Row], query: str, params: tuple[object, ...]) -> list[Row]:
        return [model(**row) for row in self._connect().execute(query, params).mappings()]

    def buyer_says(
        self,
        account_id: str,
        buyer_id: str,
        buyer_name: str,
        text: str,
        *,
        group: str | None = None,
        group_title: str | None = None,
        mention: bool = False,
        media: BuyerMedia | None = None,
        at_ms: int | None = None,
    ) -> BuyerMessage:
        """One buyer message, in the buyer's direct conversation or in `group` (mentioning the
        shop or not), with an image or file besides its text (a caption, or empty)."""
        at = at_ms if at_ms is not None else time.time_ns() // 1_000_000
        conversation_id = self.group_conversation(group) if group else self.conversation_for(buyer_id)
        query = (
            "INSERT INTO buyer_message (account_id, conversation_id, buyer_id, buyer_name, text, occurred_at,"
            " conversation_type, group_title, mention, media_kind) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING *"
        )
        params = (
            *(account_id, conversation_id, buyer_id, buyer_name, text, at),
            *("group" if group else "direct", group_title, (1 if mention else 0) if group else None),
            media.kind if media else None,
        )
        # One write transaction, its lock taken first: the message and its media together, or
        # neither, and the instance cannot turn `stopping` between the refusal check and the write.
        with immediate(self._connect()) as db:
            self.refuse_if_stopped(conversation_id)
            said = self._rows(BuyerMessage, query, params)[0]
            if media is not None:
                db.execute(
                    "INSERT INTO buyer_media (seq, kind, name, data) VALUES (?, ?, ?, ?)",
                    (said.seq, media.kind, media.name, media.data),
                )
        return said

    def refuse_if_stopped(self, conversation_id: str) -> None:
        """Raise InstanceStopped when the conversation is a simulation instance's that is stopping
        or stopped: it takes no more buyer input and receives no more sends."""
        if not conversation_id.startswith("sim-direct-"):
            return  # instances talk in direct conversations only; every send asks, so no query for others
        row = (
            self._connect()
            .execute(  # buyer_id's unique index: one lookup per send
                "SELECT state FROM sim_instance WHERE buyer_id = ? AND state != 'running'",
                (conversation_id.removeprefix("sim-direct-"),),
            )
            .first()
        )
        if row is not None:
            raise InstanceStopped(f"conversation {conversation_id} belongs to a simulation instance that is {row[0]}")

    def new_instance(
        self, account_id: str, kind: Literal["paired", "manual"], buyer_name: str, persona: str | None = None
    ) -> SimInstance:
        """A new instance, numbered above every number used before (stopped ones included): the
        number is read and taken in one write transaction, so two processes never pick the same."""
        query = (
            "INSERT INTO sim_instance (number, account_id, kind, buyer_id, buyer_name, persona, state, created_at)"
            " VALUES (?, ?, ?, ?, ?, ?, 'running', ?) RETURNING *"
        )
        with immediate(self._connect()) as db:
            number = int(db.execute("SELECT COALESCE(MAX(number), 0) + 1 FROM sim_instance").scalar_one())
            at = time.time_ns() // 1_000_000
            params = (number, account_id, kind, f"sim-{number:03d}-buyer", buyer_name, persona, at)
            return self._rows(SimInstance, query, params)[0]

    def instance(self, instance_id: str) -> SimInstance | None:
        number = instance_id.removeprefix("sim-")
        if not number.isdigit():
            return None
        rows = self._rows(SimInstance, "SELECT * FROM sim_instance WHERE number = ?", (int(number),))
        return rows[0] if rows else None

    def instances(self) -> list[SimInstance]:
        return self._rows(SimInstance, "SELECT * FROM sim_instance ORDER BY number", ())

    def set_instance_state(self, number: int, state: InstanceState) -> SimInstance:
        """Running → stopping → stopped, never back (a stopped instance never resumes)."""
        earlier = [s.value for s in InstanceState][: list(InstanceState).index(state)]
        marks = ", ".join("?" * len(earlier)) or "NULL"
        stopped_at = time.time_ns() // 1_000_000 if state == InstanceState.STOPPED else None
        self._connect().execute(
            f"UPDATE sim_instance SET state = ?, stopped_at = COALESCE(?, stopped_at) WHERE number = ?"
            f" AND state IN ({marks})",
            (state.value, stopped_at, number, *earlier),
        )
        return self._rows(SimInstance, "SELECT * FROM sim_instance WHERE number = ?", (number,))[0]

    def media_of(self, seq: int) -> BuyerMedia | None:
        """What a buyer message carried besides its text (the platform's media download)."""
        row = self._connect().execute("SELECT kind, name, data FROM buyer_media WHERE seq = ?", (seq,)).first()
        return BuyerMedia(kind=row[0], name=row[1], data=row[2]) if row else None

    def buyer_messages(self, account_id: str, after_seq: int = 0, limit: int = 1_000_000) -> list[BuyerMessage]:
        query = "SELECT * FROM buyer_message WHERE account_id = ? AND seq > ? ORDER BY seq LIMIT ?"
        return self._rows(BuyerMessage, query, (account_id, after_seq, limit))

    def buyer_messages_in(self, conversation_id: str) -> list[BuyerMessage]:
        query = "SELECT * FROM buyer_message WHERE conversation_id = ? ORDER BY seq"
        return self._rows(BuyerMessage, query, (conversation_id,))

    def receive_send(
        self,
        account_id: str,
        conversation_id: str,
        recipient_id: str | None,
        text: str,
        client_ref: str,
        kind: str = "text",
        media: bytes | None = None,
    ) -> ReceivedSend:
        at = time.time_ns() // 1_000_000
        platform_message_id = f"simmsg-{uuid.uuid4().hex[:16]}"
        digest = hashlib.sha256(media).hexdigest() if media is not None else None
        query = (
            "INSERT INTO received_send (platform_message_id, client_ref, account_id, conversation_id,"
            " recipient_id, text, received_at, kind, media_sha256) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING *"
        )
        params = (platform_message_id, client_ref, account_id, conversation_id, recipient_id, text, at, kind, digest)
        with immediate(self._connect()):  # as buyer_says: the refusal check holds until the commit
            self.refuse_if_stopped(conversation_id)  # a stopping instance's buyer receives nothing
            return self._rows(ReceivedSend, query, params)[0]

    def received(self, account_id: str | None = None, after_id: int = 0, limit: int = -1) -> list[ReceivedSend]:
        query = "SELECT * FROM received_send WHERE (? IS NULL OR account_id = ?) AND id > ? ORDER BY id LIMIT ?"
        return self._rows(ReceivedSend, query, (account_id, account_id, after_id, limit))

    def buyer_reads(self, conversation_id: str, at_ms: int | None = None) -> int:
        """The buyer reads everything the shop sent to it in a direct conversation so far (groups
        report no reads, as DingTalk's group messages do not); how many were new."""
        at = at_ms if at_ms is not None else time.time_ns() // 1_000_000
        return (
            self._connect()
            .execute(
                "INSERT OR IGNORE INTO buyer_read (received_id, read_at)"
                " SELECT id, ? FROM received_send WHERE conversation_id = ? AND recipient_id IS NOT NULL",
                (at, conversation_id),
            )
            .rowcount
        )

    def reads_after(self, account_id: str, after_id: int, limit: int) -> list[tuple[int, ReceivedSend, int]]:
        """(read id, what was read, when) of the account's sends, after read `after_id`."""
        rows = (
            self._connect()
            .execute(
                "SELECT r.id AS read_id, r.read_at, s.* FROM buyer_read r JOIN received_send s ON s.id = r.received_id"
                " WHERE s.account_id = ? AND r.id > ? ORDER BY r.id LIMIT ?",
                (account_id, after_id, limit),
            )
            .mappings()
            .all()
        )
        fields = set(ReceivedSend.model_fields)
        return [
            (row["read_id"], ReceivedSend(**{k: v for k, v in row.items() if k in fields}), row["read_at"])
            for row in rows
        ]

    def received_in(self, conversation_id: str) -> list[ReceivedSend]:
        query = "SELECT * FROM received_send WHERE conversation_id = ? ORDER BY id"
        return self._rows(ReceivedSend, query, (conversation_id,))

    def received_by_ref(self, client_ref: str) -> ReceivedSend | None:
        query = "SELECT * FROM received_send WHERE client_ref = ? ORDER BY id LIMIT 1"
        rows = self._rows(ReceivedSend, query, (client_ref,))
        return rows[0] if rows else None
