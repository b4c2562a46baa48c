"""Operation receipts (SPEC 3.1): an operation id replayed returns the result stored the first
time, also after a restart, so a caller whose response was lost can simply ask again; and
`query_operation` reads what an operation id holds without running or replaying anything, for
automation that must not act twice (an operation that was never recorded is just unknown)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

from runtime.errors import KefuError
from runtime.ports import Coordination
from runtime.store import DeliveryStore, now_ms, queries
from runtime.store.connection import Connection

ON = "on"  # the key of a receipt's result naming what the operation was on (an account, a route)


def stored_result(conn: Connection, op_id: str, kind: str, on: str | None) -> dict[str, Any] | None:
    """The result stored under `op_id`, if any. The same id for another kind of operation, or
    on anything but `on` (None: the caller cannot tell), is refused rather than answered with
    another's result."""
    row = conn.execute(queries.operation.BY_ID, {"id": op_id}).mappings().first()
    if row is None:
        return None
    result: dict[str, Any] = json.loads(row["result"])
    # A receipt from before kefu kept `on` names it in its result: an account's pause or
    # resume as `account_id`, a created or updated account or route as `id`.
    was_on = result.pop(ON, None) or result.get("account_id") or result.get("id")
    if row["kind"] != kind or (None not in (on, was_on) and was_on != on):
        raise KefuError(
            "KEFU_OPERATION_CONFLICT",
            f"operation id {op_id!r} was already used for {row['kind']}" + (f" on {was_on!r}" if was_on else ""),
            "use a new operation id for a new operation",
        )
    return result


def run_once(
    conn: Connection, op_id: str, kind: str, on: str | None, operation: Callable[[], dict[str, Any]]
) -> dict[str, Any]:
    """Inside the caller's write transaction: the stored result (see stored_result), or run the
    operation and store its result with what it was on."""
    stored = stored_result(conn, op_id, kind, on)
    if stored is not None:
        return stored
    result = operation()
    receipt = json.dumps({**result, ON: on}, ensure_ascii=False)
    conn.execute(queries.operation.RECORD, {"id": op_id, "kind": kind, "result": receipt, "at": now_ms()})
    return result


class OperationState(BaseModel):
    """What an operation id holds. `state`: `done` for an account or route operation (its
    receipt is written in the transaction of its change, so a recorded one is done); a move's
    step (stopping … done, or rolled-back) for `account.move`; `imported` (or `importing-files`,
    rows in, files not yet) for `account.import`, the part of a move this shard took as its
    target, shown when the move's journal is gone."""

    op_id: str
    kind: str
    on: str | None = None  # the account or route an account or route operation was on
    state: str
    result: dict[str, Any]
    recorded_at: int  # ms: when the receipt was written, or the move's journal last changed


class OperationUnknown(KefuError):
    def __init__(self, op_id: str, shard: str) -> None:
        super().__init__(
            "KEFU_OPERATION_UNKNOWN",
            f"no operation {op_id!r} is recorded on shard {shard!r} nor in the move journal",
            "check the id: an operation that was never recorded did not happen (run it again with the same id);"
            " an account or route operation is recorded on the shard that ran it",
        )


def query_operation(
    store: DeliveryStore, op_id: str, coordination: Coordination | None = None
) -> OperationState | None:
    """What `op_id` holds, read only: this shard's receipt of an account or route operation,
    else a move's journal (in `coordination`, where every host sees it), else an import this
    shard made under that id; None when nothing is recorded."""
    with store.read() as conn:
        receipt = conn.execute(queries.operation.SHOW, {"id": op_id}).mappings().first()
        imported = conn.execute(queries.placement_import.SHOW, {"o": op_id}).mappings().first()
    if receipt is not None:
        result = json.loads(receipt["result"])
        return OperationState(
            op_id=op_id,
            kind=receipt["kind"],
            on=result.pop(ON, None),
            state="done",
            result=result,
            recorded_at=receipt["created_at"],
        )
    journal = coordination.journal(op_id) if coordination is not None else None
    if journal is not None:
        from runtime.placement.moves import MoveRecord  # moves import the pipeline, which imports this module

        move = MoveRecord.model_validate(journal)
        result = move.model_dump(mode="json", include={"account_id", "source", "target", "error", "detail"})
        return OperationState(
            op_id=op_id, kind="account.move", state=move.step.value, result=result, recorded_at=move.updated_at
        )
    if imported is not None:
        return OperationState(
            op_id=op_id,
            kind="account.import",
            state="imported" if imported["files_done"] else "importing-files",
            result=json.loads(imported["result"]),
            recorded_at=imported["imported_at"],
        )
    return None
