"""Did every buyer message get exactly one reply? Computed from the delivery store and the
simulated platform's own ledger of received sends, never from counters a caller keeps.

`audit` is the demo's verdict line; `ledger_audit` classifies every offered message for the
fault suite (bench.faults), and `scan_session_logs` loads every session log."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from pydantic import BaseModel

from runtime.agent.session_log import CorruptSessionLog, SessionLog
from runtime.agent.sessions import damaged_folder, damaged_sessions
from runtime.outbox.report import requests_by_message
from runtime.store import DeliveryStore, queries
from transports.simulator import SimulatedPlatform
from transports.simulator.transport import platform_message_id


class Audit(BaseModel):
    buyer_messages: int
    answered: int
    duplicate_replies: int
    lost: int

    @property
    def clean(self) -> bool:
        return self.answered == self.buyer_messages and self.duplicate_replies == 0 and self.lost == 0

    def line(self) -> str:
        return (
            f"demo: {self.buyer_messages} buyer messages, {self.answered} answered, "
            f"{self.duplicate_replies} duplicate replies, {self.lost} lost"
        )


def audit(store: DeliveryStore, platform: SimulatedPlatform, account_id: str) -> Audit:
    by_message = requests_by_message(store, account_id)
    sends = platform.received(account_id)
    sends_per_request = Counter(send.client_ref for send in sends)
    buyer = platform.buyer_messages(account_id)
    answered, lost = 0, 0
    replied_batches: set[frozenset[str]] = set()
    for message in buyer:
        requests = by_message.get((message.conversation_id, platform_message_id(message.seq)))
        if requests and any(sends_per_request[r] for r in requests):
            answered += 1
            replied_batches.add(frozenset(requests))
        else:
            lost += 1  # never stored, or stored and never answered
    # One reply per answered batch is expected; every other platform send is a duplicate.
    return Audit(
        buyer_messages=len(buyer), answered=answered, duplicate_replies=len(sends) - len(replied_batches), lost=lost
    )


# -- the fault suite's audit (bench.faults): every offered message, classified ----------------

NEVER_STORED = "never stored"
NOT_ADMITTED = "stored, not admitted"
NOT_ANSWERED = "admitted, not answered"


class LedgerAudit(BaseModel):
    """Each buyer message the platform holds, classified from the delivery store and the
    platform's ledger of received sends (request id = the send's client reference)."""

    offered: int
    answered_once: int
    lost_never_stored: int
    lost_not_admitted: int
    lost_not_answered: int
    doubled: int  # buyer messages whose batch reached the platform more than once
    requests_sent_twice: int  # one request id received by the platform two or more times
    batches_replied_twice: int  # one batch answered by two or more different requests
    unattributed_sends: int  # sends whose request id the delivery store does not know
    result_unknown: int  # requests left in result-unknown
    why: dict[str, int]  # lost messages by cause and the state they were left in
    last_reply_at_ms: int | None

    @property
    def lost(self) -> int:
        return self.lost_never_stored + self.lost_not_admitted + self.lost_not_answered


def ledger_audit(store: DeliveryStore, platform: SimulatedPlatform, account_id: str) -> LedgerAudit:
    sends = platform.received(account_id)
    per_ref = Counter(send.client_ref for send in sends)
    with store.read() as conn:
        inbound = {
            (conversation_id, message_id): (state, batch_id)
            for conversation_id, message_id, state, batch_id in conn.execute(
                queries.inbound_message.BUYER_MESSAGE_STATES, {"a": account_id}
            )
        }
        requests = {
            request_id: (batch_id, state)
            for request_id, batch_id, state in conn.execute(queries.outbox_request.STATES_OF_ACCOUNT, {"a": account_id})
        }
        batch_state: dict[str, str] = {
            batch_id: state for batch_id, state in conn.execute(queries.admission_batch.ALL_STATES)
        }
    sent_by_batch: dict[str, list[str]] = {}
    unknown_batches: set[str] = set()
    for request_id, (batch_id, state) in requests.items():
        if batch_id is not None and per_ref[request_id]:
            sent_by_batch.setdefault(batch_id, []).append(request_id)
        elif batch_id is not None and state == "result-unknown":
            unknown_batches.add(batch_id)
    why: Counter[str] = Counter()
    answered_once = doubled = 0
    offered = platform.buyer_messages(account_id)
    for message in offered:
        stored = inbound.get((message.conversation_id, platform_message_id(message.seq)))
        if stored is None:
            why[NEVER_STORED] += 1
            continue
        state, batch_id = stored
        if batch_id is None:
            why[f"{NOT_ADMITTED} ({state})"] += 1
            continue
        sent = sent_by_batch.get(batch_id, [])
        if not sent:
            left = (
                "its reply result-unknown" if batch_id in unknown_batches else "batch " + batch_state.get(batch_id, "?")
            )
            why[f"{NOT_ANSWERED} ({left})"] += 1
        elif len(sent) == 1 and per_ref[sent[0]] == 1:
            answered_once += 1
        else:
            doubled += 1

    def lost(cause: str) -> int:
        return sum(count for key, count in why.items() if key.startswith(cause))

    return LedgerAudit(
        offered=len(offered),
        answered_once=answered_once,
        lost_never_stored=lost(NEVER_STORED),
        lost_not_admitted=lost(NOT_ADMITTED),
        lost_not_answered=lost(NOT_ANSWERED),
        doubled=doubled,
        requests_sent_twice=sum(1 for count in per_ref.values() if count > 1),
        batches_replied_twice=sum(1 for sent in sent_by_batch.values() if len(sent) > 1),
        unattributed_sends=sum(count for ref, count in per_ref.items() if ref not in requests),
        result_unknown=sum(1 for _, state in requests.values() if state == "result-unknown"),
        why=dict(why),
        last_reply_at_ms=max((send.received_at for send in sends), default=None),
    )


# -- session logs: can every one still be loaded? ---------------------------------------------


class SessionLogScan(BaseModel):
    logs: int  # current session logs (kept-aside copies not included)
    corrupt: list[str]  # session file names whose load raised CorruptSessionLog
    torn: list[str]  # session file names that load with a torn tail
    kept_aside: list[str]  # paths of kept damaged copies


def kept_damaged_paths(store: DeliveryStore, sessions_dir: Path) -> set[Path]:
    """Damaged logs kept aside: the delivery store's damaged_session rows, and any file in the
    damaged folder (a copy kept by a retirement that crashed before its row committed)."""
    kept = {p.resolve() for p in damaged_folder(sessions_dir).glob("*") if p.is_file()}
    with store.read() as conn:
        kept |= {Path(record.kept_path).resolve() for record in damaged_sessions(conn)}
    return kept


def scan_session_logs(store: DeliveryStore, sessions_dir: Path) -> SessionLogScan:
    kept = kept_damaged_paths(store, sessions_dir)
    corrupt: list[str] = []
    torn: list[str] = []
    logs = 0
    for path in sorted(sessions_dir.rglob("*.jsonl.zst")):
        if path.resolve() in kept:
            continue
        logs += 1
        log = SessionLog(path)
        try:
            log.load()
        except CorruptSessionLog:
            corrupt.append(path.name)
            continue
        if log.torn_bytes:
            torn.append(path.name)
    return SessionLogScan(logs=logs, corrupt=corrupt, torn=torn, kept_aside=sorted(str(p) for p in kept))
