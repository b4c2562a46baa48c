"""Moving an account to another shard (SPEC 3.12), as a journal of steps.

    stopping ─► exported ─► imported ─► flipped ─► released ─► done
       (source)   (target)   (target or   (source)    (target)
                              source: flips the directory)
    before `imported`, a move can instead be rolled back, by the source alone:
    rolling-back-source ─► rolled-back
    (an import the target made meanwhile is held `importing`, never served, and discarded
    by the target once it sees the move rolled back: runtime.placement.directory; `rolling-back-target`
    is left only in journals of earlier versions, and still taken)

The journal (one record per op id, in the coordination store every host sees) says which step
comes next and who takes it: the source shard or the target shard. Each shard takes its steps
in a task (worker.tasks.placement), so a step's writes are fenced by that shard's lease like
any other; a step run twice, or again after a crash of either side, finds its work done. A
record is only replaced over the version its writer read (Coordination.swap_journal), so a
shard's step, the other shard's bound and the operator never overwrite each other.

Nobody has to wait for a move: each shard's beat (`drive`) takes the steps of the open moves
that are its own, and every stage before the flip has a bound (BOUNDS_S): a stage that
overruns it (a turn that never finishes, a target that never imports) rolls the move back by
itself and input resumes on the source. Once imported a move only goes forward. The mover
(`kefu accounts move`) only starts the move and hands steps on sooner; killed, it leaves
nothing behind that beat does not finish.

While an account moves, its input is paused on both sides: pages that arrive are held, and
held pages follow the account (in the slice, or forwarded by the source after the flip).

The account's credential is never in the coordination store as it is: the slice holds only its
sha256, and the source seals the secret to the target shard's published key
(runtime.placement.sealing). A target that cannot open what it finds (nothing sealed yet, since
it had published no key; a key made since) publishes its key and hands the step back to the
source, which exports again; after RESEALS of those the move stops with
KEFU_PLACEMENT_CREDENTIAL_SEAL and rolls back.
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from runtime.accounts.credentials import stored_secret
from runtime.errors import KefuError
from runtime.inbound.input_pause import count_in_flight, pause_input
from runtime.outbox.requests import revoke_unsent_auto
from runtime.pipeline import Ingest, Step, resume
from runtime.placement.sealing import SealBroken, open_sealed, publish_shard_key, published_key, seal
from runtime.placement.shards import Placement, local_placement, record_placement
from runtime.placement.slices import (
    decode_slice,
    discard_import,
    encode_slice,
    export_slice,
    import_slice,
    remove_slice,
)
from runtime.ports import Coordination, Services
from runtime.store import DeliveryStore, leases, now_ms, queries
from runtime.store.states import MoveStep, PlacementState

log = logging.getLogger(__name__)

DRAIN_S = 30.0  # the source waits this long for replies already on their way, then revokes unsent ones
STOP_BOUND_S = 40.0  # anything else still on its way then (a turn, a page, a send): the move rolls back
IMPORT_BOUND_S = 120.0  # the target has not imported the slice by then: the move rolls back
FORWARD_BOUND_S = 60.0  # after the flip nothing rolls back: past it a step only shows as overdue
BOUNDS_S = {
    MoveStep.STOPPING: STOP_BOUND_S,
    MoveStep.EXPORTED: IMPORT_BOUND_S,
    MoveStep.IMPORTED: FORWARD_BOUND_S,
    MoveStep.FLIPPED: FORWARD_BOUND_S,
    MoveStep.RELEASED: FORWARD_BOUND_S,
    MoveStep.ROLLING_BACK_TARGET: FORWARD_BOUND_S,
    MoveStep.ROLLING_BACK_SOURCE: FORWARD_BOUND_S,
}
PRE_FLIP_STEPS = {MoveStep.STOPPING, MoveStep.EXPORTED}  # the stages that wait on work, and roll back past their bound
STEP_LEASE_S = 15.0  # one step of a move at a time per shard; renewed while it runs
CREDENTIAL_TTL_S = 3600  # an exported credential's sealed copy in the coordination store
RESEALS = 2  # a target asks the source to seal the credential again at most this often per move
SOURCE_STEPS = {MoveStep.STOPPING, MoveStep.FLIPPED, MoveStep.ROLLING_BACK_SOURCE}
TARGET_STEPS = {MoveStep.EXPORTED, MoveStep.IMPORTED, MoveStep.RELEASED, MoveStep.ROLLING_BACK_TARGET}
FINAL_STEPS = {MoveStep.DONE, MoveStep.ROLLED_BACK}


class MoveRecord(BaseModel):
    op_id: str
    account_id: str
    source: str
    target: str
    generation: int  # the directory's generation before the move; the target's is one more
    step: MoveStep = MoveStep.STOPPING
    error: str | None = None  # the code that stopped the move (it waits for a rollback or a rerun)
    slice_sha256: str | None = None
    detail: dict[str, Any] = {}
    started_at: int
    updated_at: int
    version: int = 0  # every save takes the next one; a save over another version is refused
    step_at: int | None = None  # when the move reached its step (None: a record of before; started_at)

    def actor(self) -> str | None:
        """The shard that takes the next step; None: nobody (final)."""
        if self.step in SOURCE_STEPS:
            return self.source
        if self.step in TARGET_STEPS:
            return self.target
        return None

    def in_step_ms(self, at: int) -> int:
        return at - (self.step_at or self.started_at)

    def bound_s(self) -> float | None:
        return BOUNDS_S.get(self.step)

    def overdue(self, at: int) -> bool:
        bound = self.bound_s()
        return bound is not None and self.in_step_ms(at) > bound * 1000


class MoveRaced(KefuError):
    """The journal changed since this writer read it: another writer took the step first."""

    def __init__(self, op_id: str) -> None:
        super().__init__(
            "KEFU_PLACEMENT_JOURNAL_CHANGED",
            f"move {op_id} changed while this step was taken (a shard or the operator went first)",
            "look at `kefu accounts moves`; the move goes on from its journal",
        )


class MoveMismatch(KefuError):
    def __init__(self, op_id: str) -> None:
        super().__init__(
            "KEFU_PLACEMENT_OP_MISMATCH",
            f"op id {op_id!r} is a move of another account or to another shard",
            "rerun with the same account and --to, or use a new op id",
        )


def load_move(coordination: Coordination, op_id: str) -> MoveRecord | None:
    record = coordination.journal(op_id)
    return None if record is None else MoveRecord.model_validate(record)


def save_move(coordination: Coordination, record: MoveRecord, **changes: Any) -> MoveRecord:
    """Replace the record read as `record` (MoveRaced when another writer replaced it since)."""
    at = now_ms()
    if "step" in changes and changes["step"] != record.step:
        changes["step_at"] = at
    updated = record.model_copy(update={**changes, "updated_at": at, "version": record.version + 1})
    _swap(coordination, updated, record.version)
    return updated


def _swap(coordination: Coordination, record: MoveRecord, expected_version: int | None) -> None:
    is_open = record.step not in FINAL_STEPS
    if not coordination.swap_journal(record.op_id, record.model_dump(mode="json"), expected_version, is_open):
        raise MoveRaced(record.op_id)


def open_moves(coordination: Coordination) -> list[MoveRecord]:
    """The moves not finished yet, oldest first."""
    found = (load_move(coordination, op_id) for op_id in coordination.open_moves())
    return sorted((r for r in found if r is not None and r.step not in FINAL_STEPS), key=lambda r: r.started_at)


# --- the mover's steps ----------------------------------------------------------------------


def begin_move(coordination: Coordination, op_id: str, account_id: str, target: str) -> MoveRecord:
    """Start the move, or find it started under this op id (a replay goes on from there). The
    journal is written before the directory marks the account moving, so a mover killed in
    between leaves a move that a rerun finishes, never an account marked moving by no move."""
    record = load_move(coordination, op_id)
    if record is not None and (record.account_id, record.target) != (account_id, target):
        raise MoveMismatch(op_id)
    placement = coordination.placement(account_id)
    if record is None:
        if placement is None:
            raise KefuError(
                "KEFU_ACCOUNT_NOT_PLACED",
                f"the account directory has no entry for {account_id!r}",
                "start a worker of the account's shard once (it registers its accounts), or add the account",
            )
        if placement.state != PlacementState.ACTIVE:
            raise _busy(account_id, placement)
        if placement.shard == target:
            raise KefuError("KEFU_PLACEMENT_SAME_SHARD", f"account {account_id!r} already lives on {target!r}", "")
        at = now_ms()
        record = MoveRecord(
            op_id=op_id,
            account_id=account_id,
            source=placement.shard,
            target=target,
            generation=placement.generation,
            started_at=at,
            updated_at=at,
            step_at=at,
        )
        _swap(coordination, record, None)
    if record.step == MoveStep.STOPPING:
        _claim_directory(coordination, record)
    return record


def _claim_directory(coordination: Coordination, record: MoveRecord) -> None:
    """The directory names the move (idempotent): the mover does it, and the source again in
    case the mover died between writing the journal and the directory."""
    here = Placement(account_id=record.account_id, shard=record.source, generation=record.generation)
    moving = _moving(record)
    placement = coordination.placement(record.account_id)
    if placement != moving and not coordination.place(moving, expected=here):
        raise _busy(record.account_id, placement)


def _moving(record: MoveRecord) -> Placement:
    """The directory's entry while this move holds the account: it names the move."""
    return Placement(
        account_id=record.account_id,
        shard=record.source,
        generation=record.generation,
        state=PlacementState.MOVING,
        move=record.op_id,
    )


def _busy(account_id: str, placement: Placement | None) -> KefuError:
    state = placement.state if placement else "not in the directory"
    return KefuError(
        "KEFU_PLACEMENT_BUSY",
        f"account {account_id!r} is {state} (another move holds it, or it changed meanwhile)",
        "finish or roll back that move with its op id",
    )


def flip(coordination: Coordination, record: MoveRecord) -> MoveRecord:
    """The directory now says the target: from here the move only goes forward."""
    moving = _moving(record)
    arrived = Placement(account_id=record.account_id, shard=record.target, generation=record.generation + 1)
    if not coordination.place(arrived, expected=moving) and coordination.placement(record.account_id) != arrived:
        raise KefuError(
            "KEFU_PLACEMENT_DIRECTORY_CHANGED",
            f"the directory entry of {record.account_id!r} is not the one this move set",
            "look at `kefu shards`; roll the move back with its op id",
        )
    return save_move(coordination, record, step=MoveStep.FLIPPED)


def begin_rollback(coordination: Coordination, record: MoveRecord, **why: Any) -> MoveRecord:
    """Undo the move (before the flip). The source alone rolls back: nothing of an unfinished
    import is served (the target holds it `importing`), so a dead target cannot keep the
    account paused; the target discards such an import once it sees the move rolled back and
    the account served elsewhere (runtime.placement.directory). Once imported, the directory flips by
    itself, so from `imported` on a move only goes forward. `why`: the error and detail that
    say why (a bound overrun), kept in the journal."""
    if record.step in (MoveStep.IMPORTED, MoveStep.FLIPPED, MoveStep.RELEASED, MoveStep.DONE):
        raise KefuError(
            "KEFU_PLACEMENT_ALREADY_FLIPPED",
            f"move {record.op_id} has imported the account on {record.target!r} and switches the directory"
            " to it; it can only go on",
            "rerun the move with the same op id (or move the account back)",
        )
    if record.step in (MoveStep.ROLLING_BACK_TARGET, MoveStep.ROLLING_BACK_SOURCE, MoveStep.ROLLED_BACK):
        return record
    return save_move(coordination, record, step=MoveStep.ROLLING_BACK_SOURCE, **why)


# --- a shard's steps ------------------------------------------------------------------------


def _dirs(services: Services) -> tuple[Path, Path | None]:
    settings = services.settings
    return settings.sessions_dir, settings.memory_images_dir


def _memory_store(services: Services) -> Any:
    return services.memory.store if services.memory is not None else None


def advance(services: Services, coordination: Coordination, op_id: str, retry_failed: bool = True) -> Step:
    """Take the move's next step if it is this shard's (first rolling the move back if its
    stage overran its bound, or flipping it once imported). Its follow-ups are the pages and
    customers the step let go of (held pages to ingest, here or forwarded; input to admit).
    `retry_failed`: False (beat) leaves a step that failed before the flip to its bound."""
    shard = services.settings.shard
    with leases.held(services.store, f"move:{op_id}", STEP_LEASE_S) as fence:
        if fence is None:
            return Step("busy: another process takes this step")
        record = load_move(coordination, op_id)
        if record is None or shard not in (record.source, record.target):
            return Step("not this shard's step")
        try:
            record, note = _bounded(coordination, record, shard)
            if record.actor() != shard:
                return Step(note or "not this shard's step")
            if record.error is not None and record.step in PRE_FLIP_STEPS and not retry_failed:
                return Step(f"stopped with {record.error}; rolls back at its bound")
            taken = _take(services, coordination, record)
            after = load_move(coordination, op_id)
            if after is not None and after.step == MoveStep.IMPORTED:  # imported: the directory flips now
                flip(coordination, after)
                taken = Step(f"{taken.outcome}; the directory now says {after.target}", taken.follow_ups)
            return Step(f"{note}; {taken.outcome}", taken.follow_ups) if note else taken
        except MoveRaced:
            return Step("the journal changed meanwhile; the next pass goes on from it")
        except KefuError as error:  # the move stops with the code; a rerun (or its bound) goes on
            log.error("move %s: step %s failed: %s (%s)", op_id, record.step, error.code, error.message)
            current = load_move(coordination, op_id) or record
            problem = {**current.detail, "problem": error.message}
            try:
                if current.step == MoveStep.EXPORTED and shard == current.target:
                    # The import was refused (a damaged or missing slice, ids taken here) and
                    # nothing was written: the same slice would be refused again, so the source
                    # resumes the account now rather than at the import's bound.
                    begin_rollback(coordination, current, error=error.code, detail=problem)
                    return Step(f"import refused with {error.code}; rolling back")
                save_move(coordination, current, error=error.code, detail=problem)
            except MoveRaced:
                pass
            return Step(f"failed {error.code}")


def _bounded(coordination: Coordination, record: MoveRecord, shard: str) -> tuple[MoveRecord, str]:
    """Before this shard's step: an imported move flips (either shard may: it is one
    compare-and-set); a stage before the flip past its bound rolls back, as the source decides
    (it holds the input pause). Returns the record and what happened."""
    if record.step == MoveStep.IMPORTED:
        return flip(coordination, record), f"the directory now says {record.target}"
    if record.step in PRE_FLIP_STEPS and shard == record.source and record.overdue(now_ms()):
        waiting = record.detail.get("waiting") or record.error or "its work"
        problem = f"stage {record.step} overran its bound of {record.bound_s():g} s (waiting for {waiting})"
        log.warning("move %s: %s; rolling back", record.op_id, problem)
        why = {"error": "KEFU_PLACEMENT_STAGE_OVERRUN", "detail": {**record.detail, "problem": problem}}
        return begin_rollback(coordination, record, **why), f"rolling back: {problem}"
    return record, ""


def drive(services: Services, coordination: Coordination) -> list[tuple[str, Step]]:
    """Beat's pass on a shard: take this shard's steps of the open moves, flip the imported
    ones and roll back those past their bound. One read of the open index when none is open."""
    shard, at = services.settings.shard, now_ms()
    taken = []
    for op_id in coordination.open_moves():
        record = load_move(coordination, op_id)
        if record is None or record.step in FINAL_STEPS or shard not in (record.source, record.target):
            continue
        due = record.step in PRE_FLIP_STEPS and shard == record.source and record.overdue(at)
        if record.actor() == shard or record.step == MoveStep.IMPORTED or due:
            taken.append((op_id, advance(services, coordination, op_id, retry_failed=False)))
    return taken


def _take(services: Services, coordination: Coordination, record: MoveRecord) -> Step:
    match record.step:
        case MoveStep.STOPPING:
            return Step(_stop_and_export(services, coordination, record))
        case MoveStep.EXPORTED:
            return Step(_import(services, coordination, record))
        case MoveStep.FLIPPED:
            return _release(services, coordination, record)
        case MoveStep.RELEASED:
            return _resume(services, coordination, record)
        case MoveStep.ROLLING_BACK_TARGET:
            sessions, images = _dirs(services)
            discard_import(services.store, _memory_store(services), sessions, images, record.op_id)
            save_move(coordination, record, step=MoveStep.ROLLING_BACK_SOURCE)
            return Step("import discarded")
        case MoveStep.ROLLING_BACK_SOURCE:
            return _unstop(services, coordination, record)
    return Step(f"nothing to do at {record.step}")


def _seal(store: DeliveryStore, record: MoveRecord) -> str | None:
    """Once nothing of the account is on its way (pages midway, turns, sends, a listener),
    seal it in the same transaction: from then on this shard sends none of its requests, so
    the slice exported next is the whole truth. Automatic replies that could not go out within
    DRAIN_S are revoked; manual ones move along. Returns why it is not sealed yet."""
    account_id = record.account_id
    overdue = now_ms() - record.started_at > DRAIN_S * 1000
    with store.write() as conn:
        placement = local_placement(conn, account_id)
        if placement is not None and placement.state == PlacementState.SEALED:
            return None
        busy = count_in_flight(conn, account_id)
        busy += conn.execute(queries.outbox_request.ACCOUNT_BUSY, {"a": account_id, "at": now_ms()}).scalar_one()
        unsent = list(conn.execute(queries.outbox_request.UNSENT_AUTO_CUSTOMERS, {"a": account_id}).scalars())
        if busy or (unsent and not overdue):
            return f"draining: {busy} on its way, {len(unsent)} customer(s) with replies to send"
        for customer_id in unsent:
            revoke_unsent_auto(conn, customer_id, "KEFU_PLACEMENT_STOPPED")
        sealed = Placement(
            account_id=account_id, shard=record.source, generation=record.generation, state=PlacementState.SEALED
        )
        record_placement(conn, sealed)
    return None


def _stop_and_export(services: Services, coordination: Coordination, record: MoveRecord) -> str:
    store, account_id = services.store, record.account_id
    _claim_directory(coordination, record)
    pause_input(store, account_id)
    with store.write() as conn:
        placement = local_placement(conn, account_id)
        if placement is None or placement.state == PlacementState.ACTIVE:  # its listener stops
            moving = Placement(
                account_id=account_id, shard=record.source, generation=record.generation, state=PlacementState.MOVING
            )
            record_placement(conn, moving)
    waiting = _seal(store, record)
    if waiting is not None:
        if record.detail.get("waiting") != waiting:  # for the operator (`kefu accounts moves`) and the bound's reason
            save_move(coordination, record, detail={**record.detail, "waiting": waiting})
        return waiting
    sessions, images = _dirs(services)
    exported = export_slice(
        store, _memory_store(services), sessions, images, account_id, record.source, record.generation + 1
    )
    data = encode_slice(exported)
    coordination.put_blob(f"{record.op_id}:slice", data)
    with store.read() as conn:
        secret = stored_secret(conn, account_id)
    target_key = published_key(coordination, record.target) if secret is not None else None
    if secret is not None and target_key is not None:
        sealed = seal(secret, target_key, record.op_id, record.account_id)
        coordination.put_blob(f"{record.op_id}:credential", sealed, ttl_s=CREDENTIAL_TTL_S)
    else:  # the target has published no key yet: it asks for the credential once it sees the slice
        coordination.drop_blob(f"{record.op_id}:credential")
    counts = {table: len(rows) for table, rows in exported.tables.items() if rows}
    save_move(
        coordination,
        record,
        step=MoveStep.EXPORTED,
        slice_sha256=hashlib.sha256(data).hexdigest(),
        error=None,
        detail={
            "exported": counts,
            "slice_bytes": len(data),
            "sessions": len(exported.sessions),
            **({"reseals": record.detail["reseals"]} if "reseals" in record.detail else {}),
        },
    )
    return f"exported {len(data)} bytes"


def _import(services: Services, coordination: Coordination, record: MoveRecord) -> str:
    """A refusal (a disagreeing cursor, ids taken here, a damaged slice) changes nothing here;
    the move rolls back with its code (advance)."""
    data = coordination.blob(f"{record.op_id}:slice")
    if data is None or hashlib.sha256(data).hexdigest() != record.slice_sha256:
        raise KefuError("KEFU_PLACEMENT_SLICE_MISSING", f"move {record.op_id}: the exported slice is gone", "roll back")
    moved = decode_slice(data)
    credential = None
    if moved.credential_ref is not None:
        credential = _open_credential(services, coordination, record)
        if credential is None:
            return "the credential is not sealed to this shard's key; the source seals it again"
    sessions, images = _dirs(services)
    result = import_slice(
        services.store,
        _memory_store(services),
        sessions,
        images,
        moved,
        record.op_id,
        record.target,
        credential,
    )
    save_move(coordination, record, step=MoveStep.IMPORTED, detail={**record.detail, "imported": True})
    coordination.drop_blob(f"{record.op_id}:credential")
    return f"imported {result.customers} customer(s)"


def _open_credential(services: Services, coordination: Coordination, record: MoveRecord) -> str | None:
    """The moving account's secret, opened with this shard's key; None when there is nothing this
    key opens (nothing was sealed: no key was published when the source exported; it was sealed
    to a key made since; its copy expired): the key is published and the step handed back to the
    source, which seals it again. Past RESEALS of those the move stops (it rolls back)."""
    key = publish_shard_key(services.store, coordination, record.target)
    sealed = coordination.blob(f"{record.op_id}:credential")
    problem = "nothing was sealed to it"
    if sealed is not None:
        try:
            return open_sealed(sealed, key, record.op_id, record.account_id)
        except SealBroken as broken:
            problem = broken.message
    reseals = int(record.detail.get("reseals", 0))
    if reseals >= RESEALS:
        raise KefuError(
            "KEFU_PLACEMENT_CREDENTIAL_SEAL",
            f"move {record.op_id}: the credential could not be opened on {record.target} after {reseals} new"
            f" seal(s) ({problem})",
            "look at both shards' logs; move again with a new op id",
        )
    log.info("move %s: the credential cannot be opened here (%s); the source seals it again", record.op_id, problem)
    save_move(coordination, record, step=MoveStep.STOPPING, detail={**record.detail, "reseals": reseals + 1})
    return None


def _release(services: Services, coordination: Coordination, record: MoveRecord) -> Step:
    """The source lets the account go: its rows leave, and a tombstone forwards its pages that
    were not ingested here (late or held) to the target, now and whenever one comes in."""
    sessions, images = _dirs(services)
    store = services.store
    remove_slice(
        store, _memory_store(services), sessions, images, record.account_id, record.target, record.generation + 1
    )
    with store.read() as conn:
        pages = conn.execute(queries.received_page.PENDING_PAGES_OF_ACCOUNT, {"a": record.account_id}).scalars()
        late = [Ingest(json.loads(page)) for page in pages]
    save_move(coordination, record, step=MoveStep.RELEASED)
    coordination.drop_blob(f"{record.op_id}:slice")
    return Step(f"released; {len(late)} late page(s) to forward", tuple(late))


def _resume(services: Services, coordination: Coordination, record: MoveRecord) -> Step:
    store = services.store
    with store.write() as conn:
        record_placement(
            conn, Placement(account_id=record.account_id, shard=record.target, generation=record.generation + 1)
        )
    resumed = resume(store, record.account_id)
    save_move(coordination, record, step=MoveStep.DONE)
    return Step(f"resumed: {resumed.outcome}", resumed.follow_ups)


def _unstop(services: Services, coordination: Coordination, record: MoveRecord) -> Step:
    """Rollback on the source: the account is served here again, as before the move."""
    store = services.store
    here = Placement(account_id=record.account_id, shard=record.source, generation=record.generation)
    with store.write() as conn:
        record_placement(conn, here)
    resumed = resume(store, record.account_id)
    coordination.place(here, expected=_moving(record))
    save_move(coordination, record, step=MoveStep.ROLLED_BACK)
    return Step(f"rolled back: {resumed.outcome}", resumed.follow_ups)


# --- placing accounts -----------------------------------------------------------------------


def place_new_account(coordination: Coordination, account_id: str, shard: str) -> Placement:
    """Before an account is created on `shard`: the directory must not place it elsewhere."""
    placement = Placement(account_id=account_id, shard=shard)
    if coordination.place(placement, expected=None):
        return placement
    current = coordination.placement(account_id)
    if current is not None and current.shard == shard:
        return current
    raise AccountOnOtherShard(account_id, current.shard if current else None)


class AccountOnOtherShard(KefuError):
    def __init__(self, account_id: str, shard: str | None = None) -> None:
        where = f"shard {shard!r}" if shard else "another shard"
        super().__init__(
            "KEFU_ACCOUNT_ON_OTHER_SHARD",
            f"the account directory places {account_id!r} on {where}; this shard does not serve it",
            "serve it from that shard, or move it with `kefu accounts move`",
        )
