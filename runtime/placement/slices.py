"""Moving an account between shards (SPEC 3.12): its slice exported, validated, imported, removed.

A slice is every delivery row the account owns, with the ids they had on the source, plus its
session logs and long-term memory. Import keeps every id: customer ids (each shard gives out its
own range, runtime.placement.shards.customer_id_base), and so session ids `s<customer>-<n>`, the request
ids hashed from them, batch ids, memory scopes, plan and folder ids and the logs' contents. A
customer id or session file already taken here refuses the import. Only inbound messages,
received pages and operators' notes get new ids: per-store counters whose order matters, so they are appended after
this store's rows and the watermarks and cursors pointing into them follow. The credential's
secret never travels in a slice: it holds the secret's sha256, and the source seals the secret to
the target shard's key (runtime.placement.sealing); the target opens it and checks it against that.

Rows and files cannot share a transaction. Import commits the rows with a record of its op id,
then writes files and memory, then marks the record done: a replay with the same op id finishes
what a crash left and returns the recorded result. Removal deletes the files before the rows,
so a retry after a crash still finds which files were the account's.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import hashlib
import json
import os
import re
from collections.abc import Iterable, Mapping
from functools import lru_cache
from pathlib import Path
from typing import Literal, NamedTuple, Protocol

import zstandard
from pydantic import BaseModel, ConfigDict, ValidationError
from sqlalchemy.exc import IntegrityError

from runtime.accounts.credentials import stored_secret
from runtime.agent.sessions import damaged_folder
from runtime.customers.files import drop_files, session_files
from runtime.errors import AccountUnknown, KefuError, invalid_fields
from runtime.memory import store as memory_store
from runtime.memory.engine import scope_of
from runtime.memory.store import MemoryStore, ScopeRows
from runtime.store import DeliveryStore, now_ms, queries
from runtime.store.connection import Connection, connect
from runtime.store.migrate import ORDINARY_TABLES, migrate
from runtime.store.migrations import MIGRATIONS
from runtime.store.states import PlacementState
from runtime.store.tables import insert_named

Scalar = int | float | str | bool | None
Row = dict[str, Scalar]


class MemorySlice(BaseModel):
    """The account's customers' memory scopes without their index (the target rebuilds it)."""

    model_config = ConfigDict(extra="forbid")
    plans: list[Row] = []
    folders: list[Row] = []
    texts: dict[str, str] = {}  # folder id -> base64 of the stored zstd body
    images: list[Row] = []  # folder_image rows
    image_files: dict[str, str] = {}  # "<scope>/<file>" under the memory images folder -> base64
    recall_states: list[Row] = []


class AccountSlice(BaseModel):
    """What a move carries from one shard to another (JSON, zstd-compressed, validated on read)."""

    model_config = ConfigDict(extra="forbid")
    version: Literal[1]
    account_id: str
    source_shard: str
    generation: int
    exported_at: int
    tables: dict[str, list[Row]]  # delivery rows by table, with their source ids
    sessions: dict[str, str]  # session file name (damaged ones under "damaged/") -> base64
    memory: MemorySlice
    media: list[Row]  # media the account's requests reference; `data` is base64
    credential_ref: str | None  # sha256 hex of the stored secret


class ImportResult(BaseModel):
    """What an import did, recorded under its op id so that a replay returns it unchanged."""

    model_config = ConfigDict(extra="forbid")
    op_id: str
    account_id: str
    customers: int
    messages: int
    requests: int
    sessions: int
    replayed: bool = False


class _Statements(Protocol):
    """A slice table's statements (its module of runtime.store.queries), :a the account id: the
    account's rows (its own, its customers' or its requests'; renumbered ones in id order), and
    their removal. A row is inserted by its column names (runtime.store.tables.insert_named)."""

    SLICE: str
    DELETE_OF_ACCOUNT: str


class _Table(NamedTuple):
    name: str  # the table's key in a slice
    statements: _Statements
    owner: str | None = "account_id"  # a column that must hold the account id
    renumber: str | None = None  # its rows get fresh INTEGER ids, kept in this map


# In insert order (foreign keys); deletes run in reverse.
TABLES: tuple[_Table, ...] = (
    _Table("account", queries.account, "id"),
    _Table("route", queries.route),
    _Table("checkpoint_state", queries.checkpoint_state),
    _Table("input_pause", queries.input_pause, "scope"),
    _Table("customer", queries.customer),
    _Table("operator_note", queries.operator_note, renumber="note"),
    _Table("inbound_message", queries.inbound_message, renumber="message"),
    _Table("page_receipt", queries.page_receipt),
    _Table("group_receipt", queries.group_receipt),
    _Table("received_page", queries.received_page, renumber="received"),
    _Table("provider_cursor", queries.provider_cursor),
    _Table("held_page", queries.held_page),
    _Table("damaged_session", queries.damaged_session, None),
    _Table("agent_session", queries.agent_session, None),
    _Table("pending_question", queries.pending_question, None),
    _Table("admission_batch", queries.admission_batch, None),
    _Table("outbox_request", queries.outbox_request),
    _Table("outbox_attempt", queries.outbox_attempt, None),
    _Table("read_check", queries.read_check, None),
    _Table("buyer_read", queries.buyer_read),
    _Table("reader_watermark", queries.reader_watermark, None),
    _Table("erasure", queries.erasure),  # erased buyers stay erased on the account's new shard
    # Report facts (runtime.operators.reports): handoffs and resolves move (nothing else on the
    # new shard records them); those derived from messages and replies do not: the source
    # deletes them, the new shard counts them again from the rows that moved. Their summaries
    # (report_hour and the like) are not here: V24's triggers empty them with the facts.
    _Table("report_event", queries.report_event),
    _Table("report_activity", queries.report_activity),
    _Table("reply_wait", queries.reply_wait),
)
_BY_NAME = {t.name: t for t in TABLES}
# What a column refers to, in every table that has it; kept as it is, checked to be the slice's.
_REFS = {
    "customer_id": "customer",
    "session_id": "session",
    "replaced_by": "session",
    "parent": "session",
    "request_id": "request",
    "retry_of": "request",
    "follows": "request",
    "media_sha256": "media",
}
# Columns pointing at renumbered rows: import maps each to the newest imported row not after it
# (a watermark, or a cursor whose page was pruned, keeps its place in the order).
_RENUMBERED_REFS = {"received_id": "received", "watermark": "message"}
_SESSION = re.compile(r"s(\d+)-\d+")
_SESSION_FILE = re.compile(r"(?:damaged/)?s(\d+)-\d+\.jsonl\.zst")
_SCOPE = re.compile(r"customer-(\d+)")
_IMAGE_FILE = re.compile(r"customer-(\d+)/[A-Za-z0-9_-]+(?:\.[A-Za-z0-9]+)*")
# MemorySlice field -> its memory table and the columns import needs.
_MEMORY = {
    "plans": ("archive_plan", {"plan_id", "scope"}),
    "folders": ("folder", {"id", "scope", "plan_id"}),
    "images": ("folder_image", {"folder_id", "path"}),
    "recall_states": ("recall_state", {"scope", "state"}),
}


@lru_cache(maxsize=1)
def _schema() -> dict[str, frozenset[str]]:
    """The columns of every delivery and memory table as this kefu creates them: all a slice's
    rows may name, since the target runs this schema."""
    delivery, memory = connect(":memory:"), connect(":memory:")
    migrate(delivery, MIGRATIONS, "an in-memory delivery schema")
    migrate(memory, memory_store.MIGRATIONS, "an in-memory memory schema")
    return {**_columns(delivery), **_columns(memory)}


def _columns(db: Connection) -> dict[str, frozenset[str]]:
    names = [r[0] for r in db.execute(ORDINARY_TABLES)]
    return {n: frozenset(r[1] for r in db.execute(f"PRAGMA table_info({n})")) for n in names}


def _invalid(problems: Iterable[str]) -> KefuError:
    return KefuError(
        "KEFU_PLACEMENT_SLICE_INVALID",
        "account slice rejected: " + "; ".join(problems),
        "export the slice again from the source shard; nothing was imported",
    )


def _b64(text: Scalar) -> bytes:
    return base64.b64decode(str(text), validate=True)


def _text(data: bytes) -> str:
    return base64.b64encode(data).decode()


def encode_slice(slice_: AccountSlice) -> bytes:
    return zstandard.ZstdCompressor(level=3).compress(slice_.model_dump_json().encode())


def decode_slice(data: bytes) -> AccountSlice:
    """A slice as read from another shard, validated: zstd, JSON of the model's shape, rows that
    all belong to its account and name only columns the target has. Problems name fields and
    tables, never values (a value may be a message body, a cursor or a page)."""
    try:
        slice_ = AccountSlice.model_validate_json(zstandard.ZstdDecompressor().decompress(data))
    except zstandard.ZstdError:
        raise _invalid(["slice: not zstd-compressed"]) from None
    except ValidationError as error:
        raise _invalid([invalid_fields(error, "slice")]) from None
    check_slice(slice_)
    return slice_


def check_slice(s: AccountSlice) -> None:
    """Raise KEFU_PLACEMENT_SLICE_INVALID unless every row is the account's and every reference
    stays inside the slice (a session id names one of its customers): an import never writes a
    row that points outside the account."""
    schema, problems = _schema(), []
    keys: dict[str, set[Scalar]] = {
        "customer": {r.get("id") for r in s.tables.get("customer", [])},
        "request": {r.get("request_id") for r in s.tables.get("outbox_request", [])},
        "media": {r.get("sha256") for r in s.media},
    }
    customers = {c for c in keys["customer"] if isinstance(c, int)}
    sessions = [r.get(c) for rows in s.tables.values() for r in rows for c in ("session_id", "replaced_by", "parent")]
    sessions += [r.get("id") for r in s.tables.get("agent_session", [])]
    keys["session"] = {v for v in sessions if _customer_of(_SESSION, v) in customers}
    if [r.get("id") for r in s.tables.get("account", [])] != [s.account_id]:
        problems.append("tables.account: not exactly the slice's account")
    for name, rows in s.tables.items():
        spec = _BY_NAME.get(name)
        if spec is None:
            problems.append(f"tables.{name}: not a table of an account slice")
            continue
        columns = {c for r in rows for c in r}
        problems += [f"tables.{name}.{c}: no such column" for c in sorted(columns - schema[name])]
        needed = [c for c in (*_REFS, *_RENUMBERED_REFS, spec.owner, "id") if c and c in schema[name]]
        problems += [f"tables.{name}.{c}: missing" for c in sorted(needed) if any(c not in r for r in rows)]
        if spec.owner and any(r.get(spec.owner) != s.account_id for r in rows):
            problems.append(f"tables.{name}.{spec.owner}: a row of another account")
        if (spec.renumber or name == "customer") and any(not isinstance(r.get("id"), int) for r in rows):
            problems.append(f"tables.{name}.id: not an integer")
        for column in sorted(columns & _REFS.keys()):
            if any(r.get(column) not in {None, *keys[(kind := _REFS[column])]} for r in rows):
                problems.append(f"tables.{name}.{column}: not among the slice's {kind} rows")
    problems += [f"media.{c}: no such column" for c in sorted({c for r in s.media for c in r} - schema["media"])]
    if any(not isinstance(r.get("data"), str) for r in s.media):
        problems.append("media.data: missing")
    m = s.memory
    for key, (table, needed_columns) in _MEMORY.items():
        rows = getattr(m, key)
        problems += [f"memory.{key}.{c}: no such column" for c in sorted({c for r in rows for c in r} - schema[table])]
        problems += [f"memory.{key}.{c}: missing" for c in sorted(needed_columns) if any(c not in r for r in rows)]
    if any(_customer_of(_SCOPE, r.get("scope")) not in customers for r in (*m.plans, *m.folders, *m.recall_states)):
        problems.append("memory: a scope not of the slice's customers")
    if {r.get("plan_id") for r in m.folders} - {r.get("plan_id") for r in m.plans}:
        problems.append("memory.folders.plan_id: not among the slice's plans")
    if not (m.texts.keys() | {r.get("folder_id") for r in m.images}) <= {r.get("id") for r in m.folders}:
        problems.append("memory: a text or image of a folder not in the slice")
    if any(_customer_of(_SESSION_FILE, n) not in customers for n in s.sessions):
        problems.append("sessions: a file name not of the slice's customers' sessions")
    if any(_customer_of(_IMAGE_FILE, n) not in customers for n in m.image_files):
        problems.append("memory.image_files: a name not of the slice's customers' scopes")
    blobs: dict[str, Iterable[Scalar]] = {"sessions": s.sessions.values(), "memory.texts": m.texts.values()}
    blobs |= {"memory.image_files": m.image_files.values(), "media.data": [r.get("data") for r in s.media]}
    for where, values in blobs.items():
        try:
            [_b64(v) for v in values]
        except (binascii.Error, ValueError):
            problems.append(f"{where}: not base64")
    if problems:
        raise _invalid(problems)


def _customer_of(pattern: re.Pattern[str], text: Scalar) -> int | None:
    match = pattern.fullmatch(text) if isinstance(text, str) else None
    return int(match[1]) if match else None


# --- export ----------------------------------------------------------------------------------


def export_slice(
    store: DeliveryStore,
    memory: MemoryStore | None,
    sessions_dir: Path,
    images_dir: Path | None,
    account_id: str,
    shard: str,
    generation: int,
) -> AccountSlice:
    """The account's slice, read-only: its delivery rows from one read snapshot, then its
    customers' session files and memory (the move paused and drained it, so they are still)."""
    with store.read() as conn:
        tables: dict[str, list[Row]] = {}
        for t in TABLES:
            rows = conn.execute(t.statements.SLICE, {"a": account_id})
            tables[t.name] = [dict(r) for r in rows.mappings()]
        if not tables["account"]:
            raise AccountUnknown(account_id)
        media = conn.execute(queries.media.SLICE, {"a": account_id})
        media_rows: list[Row] = [{**r, "data": _text(r["data"])} for r in media.mappings()]
        secret = stored_secret(conn, account_id)
    customers = [c for r in tables["customer"] if isinstance(c := r["id"], int)]
    return AccountSlice(
        version=1,
        account_id=account_id,
        source_shard=shard,
        generation=generation,
        exported_at=now_ms(),
        tables=tables,
        sessions={
            str(p.relative_to(sessions_dir)): _text(p.read_bytes()) for p in session_files(sessions_dir, customers)
        },
        memory=_export_memory(memory, images_dir, customers),
        media=media_rows,
        credential_ref=hashlib.sha256(secret.encode()).hexdigest() if secret is not None else None,
    )


def _export_memory(memory: MemoryStore | None, images_dir: Path | None, customers: list[int]) -> MemorySlice:
    out = MemorySlice()
    for scope in map(scope_of, customers if memory is not None else []):
        rows = memory.export_scope(scope) if memory is not None else ScopeRows()
        out.plans += rows.plans
        out.folders += rows.folders
        out.texts |= {k: _text(v) for k, v in rows.texts.items()}
        out.images += rows.images
        out.recall_states += [rows.recall_state] if rows.recall_state else []
        for path in (Path(str(i["path"])) for i in rows.images):
            if images_dir is not None and path.is_relative_to(images_dir) and path.is_file():
                out.image_files[f"{scope}/{path.name}"] = _text(path.read_bytes())
    return out


# --- import ----------------------------------------------------------------------------------


def _floor(mapping: Mapping[int, int], old: int) -> int:
    """The new id of the newest imported row whose old id is at most `old` (0: none)."""
    keys = sorted(mapping)
    index = bisect.bisect_right(keys, old) - 1
    return mapping[keys[index]] if index >= 0 else 0


def _remap(row: Row, spec: _Table, ids: dict[str, dict[int, int]], sessions_dir: Path) -> Row:
    """The row as this store holds it: a fresh id if its table renumbers, references to
    renumbered rows mapped, a kept damaged log's path in this shard's sessions folder."""
    out = {k: v for k, v in row.items() if not (spec.renumber and k == "id")}
    for column, kind in _RENUMBERED_REFS.items():
        if isinstance(value := out.get(column), int):
            out[column] = _floor(ids[kind], value)
    if spec.name == "damaged_session":
        out["kept_path"] = str(damaged_folder(sessions_dir) / f"{row['session_id']}.jsonl.zst")
    return out


def _insert(conn: Connection, spec: _Table, row: Row) -> int | None:
    """One row by its column names (checked against the schema); the new rowid of a table whose
    rows get fresh ids."""
    if spec.renumber:
        return int(conn.execute(insert_named(spec.name, row) + " RETURNING id", row).scalar_one())
    conn.execute(insert_named(spec.name, row), row)
    return None


def _refuse(conn: Connection, s: AccountSlice, credential: str | None, sessions_dir: Path) -> list[int]:
    """Raise if this shard cannot take the slice; runs before anything is written. Returns the
    customers of an earlier copy of the account here, which the import replaces."""
    a, [account] = s.account_id, s.tables["account"]
    live = conn.execute(
        queries.account.LIVE_HOLDER, {"a": a, "p": account.get("platform"), "i": account.get("identity")}
    ).first()
    if live is not None:
        raise KefuError(
            "KEFU_PLACEMENT_ACCOUNT_EXISTS",
            f"account {live[0]!r} on this shard already holds account {a!r}'s id or platform identity",
            "move the account to another shard, or delete it here first",
        )
    theirs = {r.get("stream_id"): r.get("cursor") for r in s.tables.get("provider_cursor", [])}
    for stream, cursor in conn.execute(queries.provider_cursor.OF_ACCOUNT, {"a": a}):
        if cursor is not None and cursor != theirs.get(stream):
            raise KefuError(
                "KEFU_CHECKPOINT_CURSOR_CONFLICT",
                f"account {a!r} stream {stream!r}: this shard committed another provider cursor than the slice's",
                "find out which shard served the account last; nothing was imported",
            )
    if credential is not None and hashlib.sha256(credential.encode()).hexdigest() != s.credential_ref:
        raise KefuError(
            "KEFU_PLACEMENT_CREDENTIAL_MISMATCH",
            f"the credential given for account {a!r} is not the one its slice was exported with",
            "pass the source shard's stored credential of this account",
        )
    earlier = _customers(conn, a)
    ids = json.dumps([r.get("id") for r in s.tables.get("customer", [])])
    customers = conn.execute(queries.customer.TAKEN_ELSEWHERE, {"a": a, "ids": ids}).scalar_one()
    files = {name: sessions_dir / name for name in s.sessions if _customer_of(_SESSION_FILE, name) not in earlier}
    clashes = sum(p.exists() and p.read_bytes() != _b64(s.sessions[name]) for name, p in files.items())
    if customers or clashes:
        raise KefuError(
            "KEFU_PLACEMENT_ID_CONFLICT",
            f"account {a!r}: {customers} customer id(s) and {clashes} session file(s) of the slice are taken on this"
            " shard (customer ids are kept when an account moves)",
            "find out why two shards gave out the same customer ids; nothing was imported",
        )
    routes = json.dumps([r.get("id") for r in s.tables.get("route", [])])
    if named := list(conn.execute(queries.route.TAKEN_ELSEWHERE, {"a": a, "ids": routes}).scalars()):
        raise KefuError(
            "KEFU_PLACEMENT_ID_CONFLICT",
            f"account {a!r}: route id(s) {', '.join(map(repr, named))} belong to another account on this shard"
            " (route ids are kept when an account moves)",
            "create the route again under another id on the source shard (or rename this shard's), then move",
        )
    return earlier


def import_slice(
    store: DeliveryStore,
    memory: MemoryStore | None,
    sessions_dir: Path,
    images_dir: Path | None,
    slice_: AccountSlice,
    op_id: str,
    target_shard: str,
    credential: str | None,
) -> ImportResult:
    """Import a slice under `op_id`: its rows in one transaction, the account left input-paused
    and 'importing' (nothing runs until the move resumes it), then its files and memory. The
    same op id again returns the recorded result, first finishing files a crash left undone."""
    check_slice(slice_)
    with store.read() as conn:
        recorded = conn.execute(queries.placement_import.RESULT, {"o": op_id}).first()
        # a tombstone's customers here: their files go before their rows
        earlier = _refuse(conn, slice_, credential, sessions_dir) if recorded is None else []
    drop_files(memory, sessions_dir, images_dir, earlier)
    try:
        with store.write() as conn:
            recorded = conn.execute(queries.placement_import.RESULT, {"o": op_id}).first()
            if recorded is None:
                _refuse(conn, slice_, credential, sessions_dir)
                result, files_done = _insert_slice(conn, slice_, op_id, target_shard, credential, sessions_dir), False
            else:
                result = ImportResult.model_validate_json(recorded[0]).model_copy(update={"replayed": True})
                files_done = bool(recorded[1])
    except IntegrityError as error:  # a deferred foreign key, checked at commit
        raise _invalid([f"slice: {error.orig}"]) from None
    if not files_done:
        _write_files(memory, sessions_dir, images_dir, slice_)
        with store.write() as conn:
            conn.execute(queries.placement_import.MARK_FILES_DONE, {"o": op_id})
    return result


def _insert_slice(
    conn: Connection, s: AccountSlice, op_id: str, shard: str, credential: str | None, sessions_dir: Path
) -> ImportResult:
    a, at = s.account_id, now_ms()
    conn.execute("PRAGMA defer_foreign_keys = ON")  # requests refer to requests (follows, retry_of)
    _delete_rows(conn, a, keep_pending=False)  # an earlier life of the account here (tombstone, moved away)
    ids: dict[str, dict[int, int]] = {"message": {}, "received": {}, "note": {}}
    for media in s.media:  # content-addressed: a copy may be here already
        conn.execute(insert_named("media", media, "INSERT OR IGNORE"), {**media, "data": _b64(media["data"])})
    for spec in TABLES:
        try:
            for row in s.tables.get(spec.name, []):
                new = _insert(conn, spec, _remap(row, spec, ids, sessions_dir))
                if spec.renumber and new is not None:
                    ids[spec.renumber][int(str(row["id"]))] = new
        except IntegrityError as error:
            raise _invalid([f"tables.{spec.name}: {error.orig}"]) from None
    if credential is not None:
        conn.execute(queries.credential.INSERT, {"account_id": a, "secret": credential, "updated_at": at})
    _place(conn, a, shard, s.generation, PlacementState.IMPORTING)
    conn.execute(queries.input_pause.PAUSE_IMPORTED, {"scope": a, "paused_at": at})
    result = ImportResult(
        op_id=op_id,
        account_id=a,
        customers=len(s.tables.get("customer", [])),
        messages=len(ids["message"]),
        requests=len(s.tables.get("outbox_request", [])),
        sessions=len(s.sessions),
    )
    record = {"op_id": op_id, "account_id": a, "result": result.model_dump_json(), "files_done": 0, "imported_at": at}
    conn.execute(queries.placement_import.RECORD, record)
    return result


def _write_files(memory: MemoryStore | None, sessions_dir: Path, images_dir: Path | None, s: AccountSlice) -> None:
    """Session logs, images and memory scopes as the slice holds them; every write replaces a
    whole file or scope, so doing it again is harmless."""
    m = s.memory
    for name, data in s.sessions.items():
        _put(sessions_dir / name, _b64(data))
    if images_dir is not None:
        for name, data in m.image_files.items():
            _put(images_dir / name, _b64(data))
    for scope in sorted({str(r["scope"]) for r in (*m.plans, *m.folders, *m.recall_states)}):
        mine = {f["id"] for f in m.folders if f["scope"] == scope}
        rows = ScopeRows(
            plans=[p for p in m.plans if p["scope"] == scope],
            folders=[f for f in m.folders if f["scope"] == scope],
            texts={k: _b64(v) for k, v in m.texts.items() if k in mine},
            images=[_image(i, scope, images_dir) for i in m.images if i["folder_id"] in mine],
            recall_state=next((r for r in m.recall_states if r["scope"] == scope), None),
        )
        if memory is not None:
            memory.import_scope(scope, rows)


def _image(row: Row, scope: str, images_dir: Path | None) -> Row:
    """A folder image row with its file's path in this shard's images folder."""
    return {**row, "path": str(images_dir / scope / Path(str(row["path"])).name)} if images_dir else row


def _put(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    with open(partial, "wb") as handle:
        handle.write(data)
        os.fsync(handle.fileno())
    os.replace(partial, path)


# --- removal ---------------------------------------------------------------------------------


def _customers(conn: Connection, account_id: str) -> list[int]:
    return list(conn.execute(queries.customer.IDS_OF_ACCOUNT, {"a": account_id}).scalars())


def _place(conn: Connection, account_id: str, shard: str, generation: int, state: PlacementState) -> None:
    """Set this shard's placement of the account; the same placement again writes nothing."""
    conn.execute(
        queries.account_placement.RECORD_IF_CHANGED,
        {"a": account_id, "s": shard, "g": generation, "st": state.value, "at": now_ms()},
    )


def _delete_rows(conn: Connection, account_id: str, keep_pending: bool) -> None:
    """Every row of the account, children first; with `keep_pending`, received pages not yet
    ingested stay (the source forwards them to the account's new shard)."""
    shared = conn.execute(queries.media.ACCOUNT_MEDIA, {"a": account_id}).scalars()
    media = {m for m in shared if m is not None}
    conn.execute(queries.credential.DELETE_OF_ACCOUNT, {"a": account_id})
    for t in reversed(TABLES):
        delete = t.statements.DELETE_OF_ACCOUNT
        if keep_pending and t.statements is queries.received_page:
            delete = queries.received_page.DELETE_INGESTED_OF_ACCOUNT
        conn.execute(delete, {"a": account_id})
    for sha256 in media:  # content-addressed, so shared: only copies no request refers to any more
        conn.execute(queries.media.DELETE_UNUSED, {"s": sha256})


def remove_slice(
    store: DeliveryStore,
    memory: MemoryStore | None,
    sessions_dir: Path,
    images_dir: Path | None,
    account_id: str,
    moved_to: str,
    generation: int,
) -> list[int]:
    """On the source once the move flipped: the account's files and memory, then in one
    transaction its rows but the received pages not yet ingested (their ids are returned, to be
    forwarded), and a 'moved' placement. Calling it again changes nothing."""
    with store.read() as conn:
        customers = _customers(conn, account_id)
    drop_files(memory, sessions_dir, images_dir, customers)
    with store.write() as conn:
        _delete_rows(conn, account_id, keep_pending=True)
        _place(conn, account_id, moved_to, generation, PlacementState.MOVED)
        pending = conn.execute(queries.received_page.PENDING_IDS_OF_ACCOUNT, {"a": account_id})
        return list(pending.scalars())


def discard_import(
    store: DeliveryStore, memory: MemoryStore | None, sessions_dir: Path, images_dir: Path | None, op_id: str
) -> bool:
    """Undo an import before the directory flipped (the move was abandoned), only while the
    account is still 'importing' here. True if something was discarded."""
    args = {"o": op_id, "st": PlacementState.IMPORTING.value}
    with store.read() as conn:
        account_id = conn.execute(queries.placement_import.IMPORTING_ACCOUNT, args).scalar()
        customers = _customers(conn, account_id) if account_id is not None else []
    if account_id is None:
        return False
    drop_files(memory, sessions_dir, images_dir, customers)
    with store.write() as conn:
        if conn.execute(queries.placement_import.IMPORTING_ACCOUNT, args).scalar() != account_id:
            return False
        _delete_rows(conn, account_id, keep_pending=False)
        conn.execute(queries.placement_import.DELETE, {"o": op_id})
        conn.execute(queries.account_placement.DELETE_OF_ACCOUNT, {"a": account_id})
    return True
