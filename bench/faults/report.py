"""The outcome of one fault run, its verdict, and the one table it prints."""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.table import Table

from runtime.operators.status import is_quiet, stage_counts
from runtime.store import DeliveryStore
from transports.simulator import SimulatedPlatform
from worker.audit import LedgerAudit, SessionLogScan, ledger_audit


@dataclass
class Settled:
    quiet: bool  # the store went quiet with every offered message answered, or stopped changing
    waited_s: float
    timed_out: bool


Homes = Sequence[tuple[DeliveryStore, str]]  # each shard's store, with the account it serves


def merged_audit(homes: Homes, platform: SimulatedPlatform) -> LedgerAudit:
    """The ledger audit of every account in its own shard's store, added up."""
    audits = [ledger_audit(store, platform, account) for store, account in homes]
    if len(audits) == 1:
        return audits[0]
    counts = {
        name: sum(getattr(a, name) for a in audits)
        for name, f in LedgerAudit.model_fields.items()
        if f.annotation is int
    }
    why = sum((Counter(a.why) for a in audits), Counter[str]())
    last = max((a.last_reply_at_ms for a in audits if a.last_reply_at_ms is not None), default=None)
    return audits[0].model_copy(update={**counts, "why": dict(why), "last_reply_at_ms": last})


def merged_scan(scans: Sequence[SessionLogScan]) -> SessionLogScan:
    """Session log scans of several shards, as one."""
    if len(scans) == 1:
        return scans[0]
    return SessionLogScan(
        logs=sum(s.logs for s in scans),
        corrupt=[name for s in scans for name in s.corrupt],
        torn=[name for s in scans for name in s.torn],
        kept_aside=[path for s in scans for path in s.kept_aside],
    )


def settle(homes: Homes, platform: SimulatedPlatform, bound_s: float, stall_s: float, linger_s: float) -> Settled:
    """Wait until the stores are quiet and every offered message is answered (then `linger_s`
    more, so a late second reply still counts), or until they are quiet and nothing changed for
    `stall_s` (what is left is lost), or `bound_s` is up."""
    began = time.monotonic()
    last_change, last_seen = began, None
    while True:
        now = time.monotonic()
        audit = merged_audit(homes, platform)
        seen = (audit.answered_once, audit.doubled, audit.lost, str([stage_counts(store) for store, _ in homes]))
        if seen != last_seen:
            last_change, last_seen = now, seen
        quiet = all(is_quiet(store) for store, _ in homes)
        if quiet and audit.lost == 0:
            time.sleep(linger_s)
            return Settled(True, time.monotonic() - began, False)
        if quiet and now - last_change >= stall_s:
            return Settled(True, now - began, False)
        if now - began >= bound_s:
            return Settled(quiet, now - began, True)
        time.sleep(0.5)


@dataclass
class RunReport:
    scenario: str
    setup: str  # how it ran (publishing path, processes, seed)
    audit: LedgerAudit | None = None
    logs: SessionLogScan | None = None
    faults: dict[str, int] = field(default_factory=dict)
    unplanned_exits: dict[str, str] = field(default_factory=dict)  # role → how often, and why
    last_fault_to_last_reply_s: float | None = None
    settled: Settled | None = None
    wall_s: float = 0.0
    rows: list[tuple[str, str]] = field(default_factory=list)  # scenario-specific findings
    checks: dict[str, bool] = field(default_factory=dict)  # each must hold for the run to pass
    run_dir: str = ""

    @property
    def passed(self) -> bool:
        return all(self.checks.values())

    @property
    def fault_count(self) -> int:
        return sum(self.faults.values())

    def to_json(self) -> str:
        return json.dumps(
            {
                "scenario": self.scenario,
                "setup": self.setup,
                "passed": self.passed,
                "checks": self.checks,
                "audit": self.audit.model_dump() if self.audit else None,
                "lost": self.audit.lost if self.audit else None,
                "logs": self.logs.model_dump() if self.logs else None,
                "faults": self.faults,
                "fault_count": self.fault_count,
                "unplanned_exits": self.unplanned_exits,
                "last_fault_to_last_reply_s": self.last_fault_to_last_reply_s,
                "settled": self.settled.__dict__ if self.settled else None,
                "wall_s": round(self.wall_s, 1),
                "rows": self.rows,
                "run_dir": self.run_dir,
            },
            ensure_ascii=False,
            indent=2,
        )

    def write_json(self, path: Path) -> None:
        path.write_text(self.to_json(), encoding="utf-8")


def _lost_text(audit: LedgerAudit) -> str:
    parts = [
        f"never stored {audit.lost_never_stored}",
        f"stored, not admitted {audit.lost_not_admitted}",
        f"admitted, not answered {audit.lost_not_answered}",
    ]
    detail = "; ".join(f"{why}: {n}" for why, n in sorted(audit.why.items()) if "(" in why)
    return ", ".join(parts) + (f"\n{detail}" if detail else "")


def _audit_rows(report: RunReport) -> list[tuple[str, str]]:
    audit = report.audit
    if audit is None:
        return []
    rows = [
        ("offered", str(audit.offered)),
        ("answered exactly once", str(audit.answered_once)),
        ("lost", f"{audit.lost}  ({_lost_text(audit)})"),
        (
            "doubled",
            f"{audit.doubled}  (request ids sent twice {audit.requests_sent_twice},"
            f" batches with two replies {audit.batches_replied_twice},"
            f" sends unknown to the store {audit.unattributed_sends})",
        ),
        ("result-unknown left", str(audit.result_unknown)),
    ]
    if report.last_fault_to_last_reply_s is not None:
        rows.append(("last fault → last reply", f"{report.last_fault_to_last_reply_s:.1f} s"))
    return rows


def _log_rows(logs: SessionLogScan | None) -> list[tuple[str, str]]:
    if logs is None:
        return []
    return [
        ("corrupt session logs", f"{len(logs.corrupt)} of {logs.logs}" + (f"  (torn tails {len(logs.torn)})")),
        ("damaged logs kept aside", str(len(logs.kept_aside))),
    ]


def _run_rows(report: RunReport) -> list[tuple[str, str]]:
    faults = ", ".join(f"{kind} {n}" for kind, n in sorted(report.faults.items())) or "none"
    exits = "; ".join(f"{role} {n}" for role, n in sorted(report.unplanned_exits.items())) or "none"
    rows = [("faults injected", f"{report.fault_count}  ({faults})")]
    if report.audit is not None:  # a run with a workload, under supervision
        rows.append(("processes that exited by themselves", exits))
    if report.settled is not None:
        state = "timed out" if report.settled.timed_out else ("quiet" if report.settled.quiet else "not quiet")
        rows.append(("settling after the faults", f"{state} after {report.settled.waited_s:.1f} s"))
    rows.append(("wall time", f"{report.wall_s:.1f} s"))
    return rows


def render(report: RunReport, console: Console) -> None:
    table = Table("measure", "value", title=f"bench.faults {report.scenario}: {report.setup}", show_lines=False)
    for name, value in _audit_rows(report) + _log_rows(report.logs):
        table.add_row(name, value)
    if report.rows:
        table.add_section()
        for name, value in report.rows:
            table.add_row(name, value)
    table.add_section()
    for name, value in _run_rows(report):
        table.add_row(name, value)
    failed = [name for name, ok in report.checks.items() if not ok]
    shown = "; ".join(failed) if len(failed) <= 3 else f"{len(failed)} checks failed: {'; '.join(failed[:2])}; …"
    verdict = "[green]PASS[/green]" if report.passed else f"[red]FAIL[/red]  ({shown})"
    table.add_section()
    table.add_row("verdict", verdict)
    console.print(table, soft_wrap=True)
    if report.run_dir:
        console.print(f"[dim]run dir (logs, data, AOF): {report.run_dir}[/dim]", soft_wrap=True)
