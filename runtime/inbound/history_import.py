"""History imports (SPEC 3.3): a shop's earlier conversations brought in from a file (JSONL or
CSV, docs/history-import.md), into each customer's history and memory, never into admission.

- Validated whole first: every line is checked (its fields, its account, its conversation's
  type against the file and the store) before anything is written; a file with a bad line is
  refused with each problem's line number and field, and nothing of it is stored.
- Into the history only: a row is stored as the platform's message would be (deduped on account,
  conversation and platform message id), with origin and state `history`, so admission, the
  reconciler and the reports' waits never see it: an imported message never gets a reply. Its
  receive time is its own time (`occurred_at`): it was never received live, and the transcript
  and the agent's history read in receive order. A buyer's row is the counterpart's, a shop's row
  a native-client operator's (as the platform's own client would have sent it).
- Idempotent: a message without a platform id gets one derived from its content (conversation,
  sender, role, time, text, and which repetition of that it is in the file), so importing the
  same file again adds nothing; a message already stored (live or imported) counts as present.
- Resumable: rows go in batches in time order, each batch one transaction that also moves the
  file's progress (`history_import`, by the file's checksum); then into memory
  (runtime.memory.history), which moves `remembered`. An interrupted import run again goes on
  at the first batch not done, and a finished one stores nothing.
- Erased buyers stay erased: their conversation's messages from before the erasure are skipped,
  as a platform's redelivery of them is (runtime.customers.erasure).
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from runtime.accounts.registry import load_account, require_account
from runtime.customers.erasure import any_erased, unerased
from runtime.errors import KefuError
from runtime.inbound.classification import evidence_role
from runtime.inbound.pages import (
    ConversationGroup,
    ConversationType,
    Id,
    InboundMessage,
    PageTime,
    Sender,
    TextContent,
)
from runtime.memory.engine import MemoryEngine
from runtime.memory.history import Remembered, remember_imported
from runtime.memory.store import ArchiveSource
from runtime.store import DeliveryStore, now_ms, queries
from runtime.store.connection import Connection

Format = Literal["jsonl", "csv"]
BATCH_ROWS = 500  # rows per transaction
MAX_PROBLEMS = 20  # problems listed in a refusal (the count says how many more)
BUSY_TRIES = 10  # a customer's writer lease held by a turn: tries, a second apart, before memory skips it
SUFFIXES: dict[str, Format] = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl", ".csv": "csv"}
COLUMNS = (
    "account_id",
    "conversation_id",
    "conversation_type",
    "title",
    "sender_id",
    "sender_name",
    "role",
    "occurred_at",
    "text",
    "message_id",
)
REQUIRED = ("conversation_id", "conversation_type", "sender_id", "role", "occurred_at", "text")


class ImportLine(BaseModel):
    """One message of a history file, as docs/history-import.md describes it."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    account_id: Id | None = None  # else the command's --account
    conversation_id: Id
    conversation_type: Literal["direct", "group"]
    title: str | None = Field(None, max_length=256)
    sender_id: Id
    sender_name: str | None = Field(None, max_length=256)
    role: Literal["buyer", "shop"]
    occurred_at: PageTime  # ISO 8601 with its zone
    text: str = Field(min_length=1, max_length=65_536)
    message_id: Id | None = None  # the platform's; else derived from the content


@dataclass(frozen=True, slots=True)
class Row:
    line: int
    account_id: str
    conversation_type: ConversationType
    conversation_id: str
    title: str | None
    message: InboundMessage


@dataclass(frozen=True)
class Problem:
    line: int  # 0: the file as a whole
    field: str
    message: str

    def __str__(self) -> str:
        where = f"line {self.line}" if self.line else "file"
        return f"{where}: {self.field}: {self.message}" if self.field else f"{where}: {self.message}"


class ImportRejected(KefuError):
    def __init__(self, name: str, problems: list[Problem]) -> None:
        shown = "; ".join(map(str, problems[:MAX_PROBLEMS]))
        more = f"; and {len(problems) - MAX_PROBLEMS} more" if len(problems) > MAX_PROBLEMS else ""
        super().__init__(
            "KEFU_IMPORT_INVALID",
            f"{name}: {len(problems)} problem(s), nothing was imported: {shown}{more}",
            "fix the lines named (docs/history-import.md describes the format) and import the file again",
        )
        self.problems = problems


@dataclass(frozen=True)
class ParsedFile:
    name: str
    checksum: str  # of the file's bytes, its format and the account it went to
    rows: list[Row]  # in time order (then line order), repeated lines left out
    repeated: int  # lines repeating an earlier line's message exactly


class ImportCounts(BaseModel):
    """What an import did, for the file as a whole (also when it went on from an earlier run)."""

    rows: int  # messages in the file
    imported: int = 0  # stored as history by this file
    present: int = 0  # stored before (live, or by an earlier import)
    skipped: int = 0  # lines repeating another's message, and erased buyers' messages
    resumed_at: int = 0  # rows an earlier run of this file had stored already
    finished_before: bool = False  # an earlier run finished this file: nothing was stored
    remembered: int = 0  # memory folders made
    not_remembered: int = 0  # conversations whose memory is full (its folder cap): stored, not remembered
    # Stopped before the end: a turn held a conversation's writer lease throughout (memory waits
    # for it). Importing the file again goes on there.
    stopped_busy: bool = False


def file_format(path: Path, given: str | None) -> Format:
    if given is not None:
        if given not in ("jsonl", "csv"):
            raise KefuError("KEFU_INVALID_INPUT", f"--format {given!r}: jsonl or csv", "name the file's format")
        return given  # type: ignore[return-value]  # checked just above
    found = SUFFIXES.get(path.suffix.lower())
    if found is None:
        raise KefuError(
            "KEFU_INVALID_INPUT",
            f"{path.name}: the format cannot be told from its name",
            "name it with --format jsonl or --format csv",
        )
    return found


def read_file(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as error:
        raise KefuError("KEFU_INVALID_INPUT", f"{path}: {error.strerror or error}", "name a readable file") from None


def _jsonl(data: bytes) -> Iterator[tuple[int, dict[str, Any] | Problem]]:
    for number, raw in enumerate(data.split(b"\n"), start=1):
        if not raw.strip():
            continue
        try:
            value = json.loads(raw.decode("utf-8-sig" if number == 1 else "utf-8"))
        except UnicodeDecodeError:
            yield number, Problem(number, "", "not UTF-8 text")
            continue
        except json.JSONDecodeError as error:  # its message names a position, never the text
            yield number, Problem(number, "", f"not JSON ({error.msg}, column {error.colno})")
            continue
        yield number, value if isinstance(value, dict) else Problem(number, "", "not a JSON object")


def _csv(data: bytes) -> Iterator[tuple[int, dict[str, Any] | Problem]]:
    try:
        text = data.decode("utf-8-sig")  # a spreadsheet's export may start with a byte-order mark
    except UnicodeDecodeError as error:
        yield 0, Problem(0, "", f"not UTF-8 text (byte {error.start})")
        return
    reader = csv.DictReader(io.StringIO(text, newline=""), restkey="\0")
    header = [name.strip() for name in reader.fieldnames or []]
    unknown = [name for name in header if name not in COLUMNS]
    missing = [name for name in REQUIRED if name not in header]
    if not header or unknown or missing:
        if not header:
            yield 1, Problem(1, "", "no header row")
        yield from ((1, Problem(1, name, "unknown column")) for name in unknown)
        yield from ((1, Problem(1, name, "missing column")) for name in missing)
        return
    reader.fieldnames = header
    try:
        for row in reader:
            if "\0" in row:
                yield reader.line_num, Problem(reader.line_num, "", "more cells than the header has columns")
                continue
            yield reader.line_num, {k: v for k, v in row.items() if v not in ("", None)}
    except csv.Error as error:
        yield reader.line_num, Problem(reader.line_num, "", f"not CSV ({error})")


def derived_id(account: str, line: ImportLine, repeat: int) -> str:
    """A stable id for a message the file gives none: the same content gives the same id in every
    run (`repeat`: which time this exact message is said in the file, from 0)."""
    when = int(line.occurred_at.timestamp() * 1000)
    key = [account, line.conversation_id, line.sender_id, line.role, when, line.text, repeat]
    return "import-" + hashlib.sha256(json.dumps(key, ensure_ascii=False).encode()).hexdigest()[:32]


def _problems_of(number: int, error: ValidationError) -> list[Problem]:
    """Each field's problem; the value itself is never shown (it may be what a buyer wrote)."""
    return [
        Problem(number, ".".join(str(part) for part in e["loc"]), e["msg"].removeprefix("Value error, "))
        for e in error.errors(include_input=False, include_url=False)
    ]


class _Reader:
    """The file's lines as rows, and every problem found on the way."""

    def __init__(self, account: str | None) -> None:
        self.account = account
        self.problems: list[Problem] = []
        self.rows: list[Row] = []
        self.repeated = 0
        self._said: Counter[tuple[Any, ...]] = Counter()
        self._ids: dict[tuple[str, str, str], Row] = {}
        self._types: dict[tuple[str, str], Row] = {}

    def add(self, number: int, value: dict[str, Any]) -> None:
        try:
            line = ImportLine.model_validate(value)
        except ValidationError as error:
            self.problems += _problems_of(number, error)
            return
        account = line.account_id or self.account
        if account is None:
            self.problems.append(Problem(number, "account_id", "no account: give --account or an account_id"))
            return
        if self.account is not None and account != self.account:
            self.problems.append(Problem(number, "account_id", f"names another account than --account {self.account}"))
            return
        said = (account, line.conversation_id, line.sender_id, line.role, line.occurred_at, line.text)
        message_id = line.message_id or derived_id(account, line, self._said[said])
        self._said[said] += 1
        message = InboundMessage(
            platform_message_id=message_id,
            sender=Sender(id=line.sender_id, display_name=line.sender_name, role=_provider_role(line.role)),
            content=TextContent(text=line.text),
            occurred_at=line.occurred_at,
        )
        row = Row(number, account, line.conversation_type, line.conversation_id, line.title, message)
        if self._conflicts(row):
            return
        self.rows.append(row)

    def _conflicts(self, row: Row) -> bool:
        """A repeated message (left out, counted) or one that contradicts an earlier line."""
        first_type = self._types.setdefault((row.account_id, row.conversation_id), row)
        if first_type.conversation_type != row.conversation_type:
            self.problems.append(
                Problem(row.line, "conversation_type", f"line {first_type.line} gives this conversation another type")
            )
            return True
        key = (row.account_id, row.conversation_id, row.message.platform_message_id)
        first = self._ids.setdefault(key, row)
        if first is row:
            return False
        if first.message == row.message:
            self.repeated += 1
        else:
            self.problems.append(Problem(row.line, "message_id", f"repeats line {first.line} with other content"))
        return True


def _provider_role(role: str) -> Literal["buyer", "native_operator"]:
    """A shop's line was written by its people in the platform's own client (`human-native`)."""
    return "buyer" if role == "buyer" else "native_operator"


def parse_file(
    path: Path, data: bytes, fmt: Format, account: str | None, on_line: Callable[[], None] | None = None
) -> ParsedFile:
    """Every line checked; ImportRejected (all problems, by line) if any is bad."""
    reader = _Reader(account)
    lines = _jsonl(data) if fmt == "jsonl" else _csv(data)
    for number, value in lines:
        if isinstance(value, Problem):
            reader.problems.append(value)
        else:
            reader.add(number, value)
        if on_line is not None:
            on_line()
    if not reader.problems and not reader.rows and not reader.repeated:
        reader.problems.append(Problem(0, "", "no messages in the file"))
    if reader.problems:
        raise ImportRejected(path.name, reader.problems)
    digest = hashlib.sha256(data)
    digest.update(json.dumps([fmt, account]).encode())
    rows = sorted(reader.rows, key=lambda r: (r.message.occurred_at, r.line))
    return ParsedFile(path.name, digest.hexdigest(), rows, reader.repeated)


def check_against_store(store: DeliveryStore, parsed: ParsedFile) -> None:
    """The accounts are there, and each conversation already stored has the type the file gives."""
    problems: list[Problem] = []
    seen: set[tuple[str, str]] = set()
    with store.read() as conn:
        accounts: dict[str, int] = {}
        for row in parsed.rows:
            accounts[row.account_id] = min(row.line, accounts.get(row.account_id, row.line))
        for account, line in sorted(accounts.items(), key=lambda item: item[1]):
            found = load_account(conn, account)
            if found is None or found.deleted_at is not None:
                problems.append(Problem(line, "account_id", f"no account {account!r} in this data dir"))
        for row in parsed.rows:
            if (row.account_id, row.conversation_id) in seen:
                continue
            seen.add((row.account_id, row.conversation_id))
            kind = conn.execute(queries.customer.TYPE_OF_CONVERSATION, (row.account_id, row.conversation_id)).scalar()
            if kind is not None and kind != row.conversation_type:
                problems.append(Problem(row.line, "conversation_type", f"the stored conversation is {kind}"))
    if problems:
        raise ImportRejected(parsed.name, sorted(problems, key=lambda p: p.line))


def _conversations(rows: list[Row]) -> dict[tuple[str, str], list[Row]]:
    found: dict[tuple[str, str], list[Row]] = {}
    for row in rows:
        found.setdefault((row.account_id, row.conversation_id), []).append(row)
    return found


def _check_account(conn: Connection, account_id: str) -> None:
    require_account(conn, account_id)
    placed = conn.execute(queries.account_placement.BY_ACCOUNT, {"a": account_id}).first()
    if placed is not None and placed[3] != "active":
        raise KefuError(
            "KEFU_ACCOUNT_UNAVAILABLE",
            f"account {account_id!r} is moving to another shard; the import stopped before this batch",
            "import the file again on the account's shard once the move has finished: it goes on where it stopped",
        )


def _store_batch(conn: Connection, rows: list[Row], customer_base: int) -> tuple[int, int, int]:
    """Inside the batch's transaction: (imported, present, skipped) of its rows."""
    imported = present = skipped = 0
    for (account, conversation), of_conversation in _conversations(rows).items():
        _check_account(conn, account)
        first = of_conversation[0]
        group = ConversationGroup(
            conversation_id=conversation,
            conversation_type=first.conversation_type,
            title=next((r.title for r in reversed(of_conversation) if r.title), None),
            messages=[r.message for r in of_conversation],
        )
        kept = unerased(conn, account, group) if any_erased(conn, account) else group
        skipped += len(group.messages) - (len(kept.messages) if kept else 0)
        if kept is None:
            continue
        inserted = _insert_group(conn, account, kept, customer_base)
        imported += inserted
        present += len(kept.messages) - inserted
    return imported, present, skipped


def _ms(message: InboundMessage) -> int:
    return int(message.occurred_at.timestamp() * 1000)


def _text(message: InboundMessage) -> str:
    assert isinstance(message.content, TextContent)  # an import's every message is text
    return message.content.text


def _insert_group(conn: Connection, account: str, group: ConversationGroup, customer_base: int) -> int:
    """The conversation's customer upserted (its last activity the newest imported time, unless
    it has a later one) and its messages inserted as history; how many were new."""
    upsert = {
        "account_id": account,
        "conversation_id": group.conversation_id,
        "conversation_type": group.conversation_type,
        "title": group.title,
        "peer": None,
        "at": max(_ms(m) for m in group.messages),
        "base": customer_base,
    }
    customer = conn.execute(queries.customer.UPSERT_FROM_GROUP, upsert).mappings().one()
    if customer["conversation_type"] != group.conversation_type:  # stored since the file was checked
        raise KefuError(
            "KEFU_IMPORT_INVALID",
            f"conversation {group.conversation_id!r} is stored as {customer['conversation_type']}, not"
            f" {group.conversation_type}; the import stopped before this batch",
            "fix its conversation_type in the file and import it again: it goes on where it stopped",
        )
    rows = [
        (
            customer["id"],
            account,
            group.conversation_id,
            m.platform_message_id,
            m.sender.id,
            m.sender.display_name,
            "text",
            _text(m),
            _ms(m),
            _ms(m),  # received: never live, so its own time (the transcript's and history's order)
            None,
            None,
            "history",
            evidence_role(m.sender.role),
            False,
            None,
        )
        for m in group.messages
    ]
    return max(conn.executemany(queries.inbound_message.INSERT, rows).rowcount, 0)


@dataclass(frozen=True)
class _Batches:
    parsed: ParsedFile
    size: int

    def __len__(self) -> int:
        return -(-len(self.parsed.rows) // self.size)

    def __getitem__(self, index: int) -> list[Row]:
        return self.parsed.rows[index * self.size : (index + 1) * self.size]


def _start(store: DeliveryStore, parsed: ParsedFile) -> dict[str, Any]:
    """The file's progress row, made at its first run (a later run keeps its batch size)."""
    batches = -(-len(parsed.rows) // BATCH_ROWS)
    with store.write() as conn:
        started = {"k": parsed.checksum, "name": parsed.name[:256], "rows": len(parsed.rows), "at": now_ms()}
        conn.execute(queries.history_import.START, {**started, "size": BATCH_ROWS, "batches": batches})
        return dict(conn.execute(queries.history_import.BY_CHECKSUM, {"k": parsed.checksum}).mappings().one())


def run_import(
    store: DeliveryStore,
    parsed: ParsedFile,
    engine: MemoryEngine | None,
    lease_s: float,
    on_rows: Callable[[int], None] | None = None,
) -> ImportCounts:
    """Store the checked file's rows batch by batch, each then into memory (`engine`, None: memory
    is off), going on where an earlier run of the same file stopped. `on_rows`: rows done, as
    they are (those an earlier run did first)."""
    state = _start(store, parsed)
    batches = _Batches(parsed, int(state["batch_size"]))
    done = int(state["batches_done"])
    counts = ImportCounts(
        rows=len(parsed.rows) + parsed.repeated,
        imported=int(state["imported"]),
        present=int(state["present"]),
        skipped=parsed.repeated + int(state["skipped"]),
        resumed_at=sum(len(batches[i]) for i in range(done)),
        finished_before=state["finished_at"] is not None,
    )
    if counts.finished_before:  # all of it was stored: this run adds nothing
        counts.present, counts.imported = counts.present + counts.imported, 0
    remembered = int(state["remembered"])
    if on_rows is not None:
        on_rows(sum(len(batches[i]) for i in range(remembered)))
    for index in range(remembered, len(batches)):
        batch = batches[index]
        if index >= done:
            with store.write() as conn:
                imported, present, skipped = _store_batch(conn, batch, store.customer_id_base)
                moved = {"k": parsed.checksum, "n": index + 1, "i": imported, "p": present, "s": skipped}
                conn.execute(queries.history_import.BATCH_DONE, moved)
            counts.imported, counts.present = counts.imported + imported, counts.present + present
            counts.skipped += skipped
        if engine is not None and not _remember_batch(
            store, engine, parsed, index * batches.size, batch, lease_s, counts
        ):
            counts.stopped_busy = True
            return counts
        with store.write() as conn:
            conn.execute(queries.history_import.REMEMBERED, {"k": parsed.checksum, "n": index + 1})
        if on_rows is not None:
            on_rows(len(batch))
    with store.write() as conn:
        conn.execute(queries.history_import.FINISH, {"k": parsed.checksum, "at": now_ms()})
    return counts


def _remember_batch(
    store: DeliveryStore,
    engine: MemoryEngine,
    parsed: ParsedFile,
    position: int,
    batch: list[Row],
    lease_s: float,
    counts: ImportCounts,
) -> bool:
    """Each conversation's rows of the batch into its customer's memory, as a plan named by the
    file and the rows' positions in it (a retry commits nothing twice). False: a conversation's
    writer lease stayed busy (its batch is to be remembered again)."""
    for (account, conversation), rows in _conversations(batch).items():
        with store.read() as conn:
            customer_id = conn.execute(queries.customer.BY_CONVERSATION, (account, conversation)).scalar()
        if customer_id is None:  # all of it an erased buyer's
            continue
        source = ArchiveSource(
            session_id=f"import:{parsed.checksum[:16]}:{customer_id}", from_seq=position, to_seq=position + len(batch)
        )
        keys = (account, conversation, [r.message.platform_message_id for r in rows])
        result = Remembered(refused="busy")
        for attempt in range(BUSY_TRIES):
            if attempt:
                time.sleep(1.0)  # a turn holds the customer's writer lease: it ends soon
            result = remember_imported(store, engine, int(customer_id), source, keys, lease_s)
            if result.refused != "busy":
                break
        else:
            return False
        counts.remembered += result.folders
        counts.not_remembered += result.refused is not None
    return True
