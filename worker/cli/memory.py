"""`kefu memory show|report|audit|selfcheck`: the memory engine's store, read without a worker."""

from __future__ import annotations

import json
from collections import Counter
from typing import TYPE_CHECKING, Annotated

import typer

from worker.cli.common import (
    N_,
    SourceOption,
    _,
    cli,
    console,
    current_settings,
    hint_simulation,
    of_source,
    operator_errors,
    print_table,
    report_source,
    shop_time,
    simulated_customers,
    source_words,
    store_missing,
)

if TYPE_CHECKING:  # loaded where used: `kefu --help` loads none of them
    from runtime.memory.store import MemoryStore


memory_cli = typer.Typer(no_args_is_help=True, help="The long-term memory engine's store.")
cli.add_typer(memory_cli, name="memory")


def _store() -> MemoryStore:
    from runtime.memory.store import MemoryStore

    path = current_settings().memory_path
    with operator_errors():
        if not path.exists():
            raise store_missing(path, "a worker creates it when it first archives a conversation")
        return MemoryStore(path)


@memory_cli.command()
def show(
    customer: Annotated[int | None, typer.Option(help="only this customer's memory")] = None,
    text: Annotated[bool, typer.Option("--text", help="also print each folder's archived text")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="JSON for scripts")] = False,
) -> None:
    """Archived folders per customer: title, scores, keywords, event, time; and the recall block."""
    from runtime.memory.engine import scope_of
    from runtime.memory.recall import folders_recalled, load_state

    store = _store()
    scopes = [scope_of(customer)] if customer is not None else store.scopes()
    if not scopes and not as_json:
        console.print(_("no archived memory yet"))
    if as_json:
        dumped = {
            scope: {
                "folders": [
                    f.model_dump() | ({"text": store.text(f.id)} if text else {}) for f in store.folders(scope)
                ],
                "recall_block": load_state(store, scope).block,
            }
            for scope in scopes
        }
        print(json.dumps(dumped, ensure_ascii=False))
        return
    for scope in scopes:
        recalled = folders_recalled(store, scope)
        folders = [f for f, _ in recalled]
        rows = []
        for f, in_block in recalled:
            state = _(" (review)") if f.review else _(" (in recall block)") if in_block else ""
            rows.append(
                [
                    f.id,
                    f.title,
                    f"{f.alpha:g}",
                    f"{f.beta:+.1f}",
                    f.score_source + state,
                    "、".join(f.keywords),
                    f.event or "",
                    shop_time(f.event_from),
                    str(f.chars),
                ]
            )
        columns = [N_("id"), N_("title"), "α", "β", N_("source"), N_("keywords"), N_("event"), N_("time")]
        columns.append(N_("chars"))
        print_table(_("memory {scope}").format(scope=scope), columns, rows, flexible="keywords")
        if text:
            for f in folders:
                console.print(f"--- {f.id}", highlight=False)
                console.print(store.text(f.id), markup=False, highlight=False, soft_wrap=True)
        if not folders:
            console.print(_("{scope}: no archived memory").format(scope=scope))


@memory_cli.command()
def report(
    as_json: Annotated[bool, typer.Option("--json", help="JSON for scripts")] = False,
    source: SourceOption = "real",
) -> None:
    """Counts per customer: folders, pending, review, scorer, high alpha, events, archives, recalls."""
    from runtime.memory.report import report as memory_report

    kind = report_source(source)
    _store()  # a missing store is reported
    path, simulated = current_settings().memory_path, simulated_customers()
    with operator_errors():
        rows = memory_report(path, only=simulated) if kind == "simulation" else memory_report(path, without=simulated)
    if as_json:
        print(json.dumps([r.model_dump() for r in rows], ensure_ascii=False))
        return
    columns = list(rows[0].model_dump()) if rows else [N_("scope")]  # ScopeReport's fields
    title = _("{source} memory report").format(source=source_words(kind))
    print_table(title, columns, [[str(v) for v in row.model_dump().values()] for row in rows])
    if not rows and kind == "real" and simulated:
        with operator_errors():
            if memory_report(path, only=simulated):
                hint_simulation(N_("memory"), "memory report")


@memory_cli.command()
def audit(
    apply: Annotated[
        bool, typer.Option("--apply", help="do the upkeep it finds (safe beside a running worker)")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="JSON for scripts")] = False,
    source: SourceOption = "real",
) -> None:
    """What needs upkeep per customer: scoring backlog, unindexed folders, stale recall state
    ids, the folder cap, unnamed image files. Read-only unless --apply."""
    from runtime.memory.audit import apply as apply_audit
    from runtime.memory.audit import audit as memory_audit
    from runtime.memory.report import customer_of

    kind = report_source(source)
    settings = current_settings()
    store = _store()
    stale_ms = int(settings.memory.heuristic_after_s * 1000)
    simulated = simulated_customers()
    with operator_errors():
        found = memory_audit(settings.memory_path, settings.memory_images_dir, settings.memory.max_folders, stale_ms)
        # One source's scopes; unnamed image files belong to no customer: the real view's upkeep.
        every = found.scopes
        kept = [s for s in every if of_source(kind, customer_of(s.scope), simulated)]
        orphans = found.orphan_images if kind == "real" else []
        found = found.model_copy(update={"scopes": kept, "orphan_images": orphans})
        if apply:
            found = apply_audit(store, found, settings.memory_images_dir)
    if as_json:
        print(json.dumps(found.model_dump() | {"findings": found.findings()}, ensure_ascii=False))
        return
    columns = [N_("scope"), N_("folders"), N_("cap %"), N_("pending"), N_("stale"), N_("review")]
    columns += [N_("unindexed"), N_("dangling")]
    rows = [
        [s.scope, str(s.folders), f"{s.cap_percent:.1f}", str(s.pending), str(s.stale_pending), str(s.review),
         str(s.unindexed), str(s.dangling)]
        for s in found.scopes
    ]  # fmt: skip
    print_table(_("{source} memory audit").format(source=source_words(kind)), columns, rows)
    for line in found.findings() or [_("nothing needs upkeep")]:
        console.print(line, markup=False, highlight=False)
    for line in found.applied:
        console.print(_("applied: {what}").format(what=line), markup=False, highlight=False)
    if not kept and kind == "real" and len(every) > len(kept):
        hint_simulation(N_("memory"), "memory audit")


@memory_cli.command()
def selfcheck() -> None:
    """Check the memory store and the session logs with a reader of its own; exit 1 on any FAIL
    (WARN: works, but needs a look)."""
    from runtime.memory.selfcheck import selfcheck as memory_selfcheck

    settings = current_settings()
    if not settings.memory_path.exists():
        console.print(_("no memory store at {path}").format(path=settings.memory_path))
        raise typer.Exit(1)
    stale_ms = int(settings.memory.heuristic_after_s * 1000)
    checks = memory_selfcheck(settings.memory_path, settings.sessions_dir, stale_ms)
    colours = {"PASS": "green", "WARN": "yellow", "FAIL": "red"}
    for c in checks:
        line = f"[{colours[c.status]}]{c.status}[/] {c.name}" + (f": {c.detail}" if c.detail else "")
        console.print(line, soft_wrap=True)
    counts = Counter(c.status for c in checks)
    console.print(
        _("selfcheck: {passed} passed, {warnings} warnings, {failed} failed").format(
            passed=counts["PASS"], warnings=counts["WARN"], failed=counts["FAIL"]
        )
    )
    raise typer.Exit(1 if counts["FAIL"] else 0)
