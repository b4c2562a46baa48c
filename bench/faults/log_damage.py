"""log-damage: one flipped byte in the middle of a session log while kefu runs.

Victim buyers (reserved, the background workload never uses them) first talk for three
rounds, so their session logs hold many frames. Then, while the background workload runs and
each victim's customer is idle, one byte in the middle of a frame before the last is flipped,
and the victim writes again. Expected (SPEC 2, 3.7): the damaged file is kept aside byte for
byte (a `damaged_session` row's kept_path, or a file under the sessions folder whose name
or folder says damaged/corrupt), the customer is answered in a new session, nothing is silently dropped.
"""

from __future__ import annotations

import hashlib
import os
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.faults.options import Options
from bench.faults.report import RunReport, settle
from bench.faults.rig import ACCOUNT, Rig, RigConfig, Say
from bench.faults.traffic import LINGER_S, STALL_S, conclude
from bench.faults.workload import Publisher, Workload, buyer_id
from runtime.agent.session_log import CorruptSessionLog, SessionLog, read_frames
from runtime.agent.sessions import session_path
from transports.simulator import SimulatedPlatform
from transports.simulator.platform import BuyerMessage
from transports.simulator.transport import platform_message_id
from worker.audit import kept_damaged_paths

ROUNDS = 3  # messages per victim before the damage, each answered before the next
ANSWER_WAIT_S = 30.0


@dataclass
class Damage:
    victim: int
    customer_id: int
    session_id: str
    path: Path
    frame: int  # the damaged frame's index
    frames: int
    events: Sequence[tuple[int, str, int]]  # (seq, type, at) of every event before the damage
    digest: str  # sha256 of the damaged file


def _customer(rig: Rig, victim: int) -> tuple[int, str | None]:
    conversation = SimulatedPlatform.conversation_for(buyer_id(victim))
    with rig.store.read() as conn:
        row = conn.execute(
            "SELECT id, session_id FROM customer WHERE account_id = :a AND conversation_id = :c",
            {"a": ACCOUNT, "c": conversation},
        ).one()
    return int(row[0]), row[1]


def _idle(rig: Rig, customer_id: int) -> bool:
    """No input waiting, no open batch, no send in flight: nothing writes its session log."""
    with rig.store.read() as conn:
        return not conn.execute(
            (
                "SELECT 1 FROM inbound_message WHERE customer_id = :c AND state IN ('pending', 'claimed')"
                " UNION ALL SELECT 1 FROM admission_batch WHERE customer_id = :c AND state IN ('claimed', 'committed')"
                " UNION ALL SELECT 1 FROM outbox_request WHERE customer_id = :c AND state IN ('pending', 'sending')"
            ),
            {"c": customer_id},
        ).first()


def _answered(rig: Rig, message: BuyerMessage) -> bool:
    """The platform received a reply registered for this message's batch."""
    with rig.store.read() as conn:
        requests = [
            row[0]
            for row in conn.execute(
                (
                    "SELECT o.request_id FROM inbound_message m JOIN outbox_request o"
                    " ON o.customer_id = m.customer_id AND o.batch_id = m.batch_id"
                    " WHERE m.account_id = :a AND m.conversation_id = :c AND m.platform_message_id = :p"
                ),
                {"a": ACCOUNT, "c": message.conversation_id, "p": platform_message_id(message.seq)},
            )
        ]
    return any(rig.platform.received_by_ref(request) for request in requests)


def _wait(condition: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.2)
    return False


def damage_log(rig: Rig, victim: int, rng: random.Random) -> Damage | None:
    """Flip one byte in the middle of a frame before the last of the victim's session log."""
    customer_id, session_id = _customer(rig, victim)
    if session_id is None or not _wait(lambda: _idle(rig, customer_id), ANSWER_WAIT_S):
        return None
    path = session_path(rig.settings.sessions_dir, session_id)
    data = bytearray(path.read_bytes())
    frames = read_frames(bytes(data))
    if len(frames) < 3:
        return None
    events = [(e.seq, e.type, e.at) for e in SessionLog(path).load()]
    frame = rng.randrange(1, len(frames) - 1)
    start, end, _ = frames[frame]
    position = (start + end) // 2
    data[position] ^= 0xFF
    with open(path, "r+b") as handle:
        handle.seek(position)
        handle.write(bytes([data[position]]))
        handle.flush()
        os.fsync(handle.fileno())
    rig.faults["session logs damaged"] += 1
    rig.last_fault_at = time.time()
    rig.say(f"[{rig.elapsed():6.1f}s] flipped a byte in frame {frame + 1} of {len(frames)} of session {session_id}")
    return Damage(victim, customer_id, session_id, path, frame, len(frames), events, hashlib.sha256(data).hexdigest())


def _kept_copy(rig: Rig, damage: Damage) -> Path | None:
    """The damaged file kept aside for this session, if any."""
    with rig.store.read() as conn:
        row = conn.execute(
            "SELECT kept_path FROM damaged_session WHERE session_id = :s", {"s": damage.session_id}
        ).first()
    if row is not None:
        return Path(row[0])
    kept = kept_damaged_paths(rig.store, rig.settings.sessions_dir)
    return next((p for p in sorted(kept) if p.name.startswith(f"{damage.session_id}.")), None)


def _surviving_events(damage: Damage) -> int:
    """How many of the events before the damage the original file still holds, in order."""
    if not damage.path.exists():
        return 0
    try:
        now = [(e.seq, e.type, e.at) for e in SessionLog(damage.path).load()]
    except CorruptSessionLog:
        return len(damage.events)  # still there (it refuses to load rather than dropping anything)
    same = 0
    for before, after in zip(damage.events, now, strict=False):
        if before != after:
            break
        same += 1
    return same


def finding(rig: Rig, damage: Damage, answered: bool) -> tuple[str, dict[str, bool]]:
    """What became of one damaged log and its customer: a table row, and its checks."""
    kept = _kept_copy(rig, damage)
    byte_equal = kept is not None and kept.exists() and hashlib.sha256(kept.read_bytes()).hexdigest() == damage.digest
    surviving = _surviving_events(damage)
    dropped = 0 if byte_equal else len(damage.events) - surviving
    _, session_now = _customer(rig, damage.victim)
    kept_text = "not kept"
    if kept is not None:
        shown = kept.relative_to(rig.settings.sessions_dir) if kept.is_relative_to(rig.settings.sessions_dir) else kept
        kept_text = f"kept as {shown} ({'byte for byte' if byte_equal else 'NOT byte for byte'})"
    row = (
        f"frame {damage.frame + 1}/{damage.frames} flipped; {kept_text}; "
        f"{len(damage.events)} events before, {dropped} silently dropped; "
        f"session {damage.session_id} → {session_now}; answered after: {'yes' if answered else 'no'}"
    )
    return row, {"kept byte for byte": byte_equal, "answered after": answered, "nothing dropped": dropped == 0}


def _talk(rig: Rig, workload: Workload, victims: list[int]) -> None:
    """Each victim writes ROUNDS times, each message answered before the next."""
    for _ in range(ROUNDS):
        said = [workload.say(victim) for victim in victims]
        _wait(lambda: all(_answered(rig, m) for m in said), ANSWER_WAIT_S)  # noqa: B023 (used at once)


def _add_findings(rig: Rig, report: RunReport, damages: list[Damage], after: dict[int, BuyerMessage]) -> None:
    report.rows.append(("kept copy looked for", "damaged_session.kept_path, else files in sessions/<shard>/damaged/"))
    for damage in damages:
        row, checks = finding(rig, damage, _answered(rig, after[damage.victim]))
        report.rows.append((f"victim {buyer_id(damage.victim)}", row))
        for name, ok in checks.items():
            report.checks[name] = report.checks.get(name, True) and ok


def log_damage(options: Options, root: Path, say: Say) -> RunReport:
    began = time.monotonic()
    rng = random.Random(options.seed)
    victims = list(range(options.kills))  # reserved buyers: the background workload never uses them
    with Rig(root, RigConfig(listen=not options.direct), say) as rig:
        publisher = Publisher(rig.app) if options.direct else None
        workload = Workload(rig.platform, ACCOUNT, random.Random(f"workload-{options.seed}"), options.buyers, publisher)
        workload.buyers = max(options.buyers, len(victims) + 1)
        workload.start(options.messages, options.rate, exclude=frozenset(victims))
        try:
            _talk(rig, workload, victims)
            damages = [d for victim in victims if (d := damage_log(rig, victim, rng)) is not None]
            after = {d.victim: workload.say(d.victim) for d in damages}
            workload.join()
        finally:
            workload.stop()
        settled = settle(rig.homes, rig.platform, options.settle_s, STALL_S, LINGER_S)
        report = conclude(rig, options, publisher, workload)
        report.settled = settled
        report.setup = report.setup.replace("messages,", f"messages + {len(victims)} victims × {ROUNDS + 1},", 1)
        report.checks["every victim's log damaged"] = len(damages) == len(victims)
        _add_findings(rig, report, damages, after)
    report.wall_s = time.monotonic() - began
    return report
