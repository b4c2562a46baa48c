"""Operation receipts: an operation id replayed returns the result stored the first time,
also after a restart, so a caller whose response was lost can simply ask again."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from runtime.errors import KefuError
from runtime.store import now_ms, queries
from runtime.store.connection import Connection


def run_once(conn: Connection, op_id: str, kind: str, operation: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Inside the caller's write transaction: the stored result, or run and store it."""
    row = conn.execute(queries.operation.BY_ID, {"id": op_id}).mappings().first()
    if row is not None:
        if row["kind"] != kind:
            raise KefuError(
                "KEFU_OPERATION_CONFLICT",
                f"operation id {op_id!r} was already used for {row['kind']}",
                "use a new operation id for a new operation",
            )
        stored: dict[str, Any] = json.loads(row["result"])
        return stored
    result = operation()
    conn.execute(
        queries.operation.RECORD,
        {"id": op_id, "kind": kind, "result": json.dumps(result, ensure_ascii=False), "at": now_ms()},
    )
    return result
