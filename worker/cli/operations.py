"""`kefu operations show OP_ID`: what an operation id holds, read only (SPEC 3.1 `query_operation`).

Automation whose response was lost asks here before deciding anything: replaying an account
or route command with its op id returns the stored result too, but it is the command itself,
and an id that was never recorded would run it. This only reads."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from worker.cli.common import N_, _, cli, current_settings, open_store, operator_errors, print_table, shop_time

operations = typer.Typer(no_args_is_help=True, help="Operation ids of account, route and move commands.")
cli.add_typer(operations, name="operations")


@operations.command()
def show(op_id: str, as_json: Annotated[bool, typer.Option("--json", help="JSON for scripts")] = False) -> None:
    """What an operation id holds, without running or replaying anything: its kind, its state
    (done; a move's step) and its stored result. An id nothing recorded: KEFU_OPERATION_UNKNOWN."""
    from runtime.placement.operations import OperationUnknown, query_operation
    from worker.coordination import coordinator_for

    settings = current_settings()
    store = open_store()
    with operator_errors():
        found = query_operation(store, op_id, coordinator_for(settings))
        if found is None:
            raise OperationUnknown(op_id, settings.shard)
    if as_json:
        print(json.dumps(found.model_dump(mode="json"), ensure_ascii=False))
        return
    columns = [N_("op_id"), N_("kind"), N_("subject"), N_("state"), N_("recorded_at"), N_("result")]
    result = json.dumps(found.result, ensure_ascii=False, sort_keys=True)
    row = [found.op_id, found.kind, found.on or "", found.state, shop_time(found.recorded_at), result]
    print_table(_("operation"), columns, [row], flexible="result", timed=True)
