"""The account directory, rebuilt from the shards' own stores (SPEC 3.12).

The directory (and the move journal) live in the coordination store, which only coordinates:
Redis may lose them (no persistence, a failover to an empty replica). Each shard's store keeps
its own placement rows, so every shard's running workers enter again what their store knows,
at start and then periodically, and the directory comes back by itself:

  active here            this shard serves it: the entry says so (a higher generation than the
                         directory's active entry wins: the account moved here since)
  moved to S, gen g      a tombstone: the entry says S at g, unless someone knows a newer one
  moving / sealed here   a move was leaving from here. With no entry at all, the directory was
                         lost mid-move: no move can flip an entry that is gone, so the move is
                         over; the account is served here again (its input resumes), as a
                         rollback would leave it
  importing here         a move was arriving. Its journal gone too, or rolled back: the entry
                         says here at its generation (the source had released it) -> resume it
                         here, as the move's last step would; it says another shard active ->
                         the move was given up there, discard what was imported; no entry yet
                         -> wait

A live move is never touched: its entry is `moving` (nobody replaces that), its journal exists.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from runtime.placement.sealing import publish_shard_key
from runtime.placement.shards import Placement, local_placement, record_placement
from runtime.placement.slices import discard_import
from runtime.ports import Coordination
from runtime.store import DeliveryStore, queries
from runtime.store.states import MoveStep, PlacementState

log = logging.getLogger(__name__)

Resume = Callable[[DeliveryStore, str], Any]  # runtime.pipeline.resume: lifts the pause, returns a Step


class Rebuilt(NamedTuple):
    elsewhere: list[str]  # accounts of this store the directory places on another shard
    entered: int  # entries written to the directory
    resumed: list[Any]  # the Steps of moves ended here: their follow-ups are to dispatch
    discarded: list[str]  # imports of moves given up


def reenter(coordination: Coordination, claim: Placement) -> bool:
    """Write `claim` unless the directory knows better; True if the entry is `claim` now. An
    absent entry takes it; an active one of a lower generation (an older life of the account)
    gives way; anything else (a newer generation, a move holding it) stays."""
    current = coordination.placement(claim.account_id)
    if current == claim:
        return True
    if current is None:
        return coordination.place(claim, expected=None) or coordination.placement(claim.account_id) == claim
    if current.state == PlacementState.ACTIVE and current.generation < claim.generation:
        return coordination.place(claim, expected=current)
    return False


def enter_accounts(store: DeliveryStore, coordination: Coordination, shard: str) -> Rebuilt:
    """Enter this store's accounts the directory lacks: those with no placement row yet (created
    before there was a directory, or by a library call) and those active or moved away."""
    with store.read() as conn:
        unplaced = list(conn.execute(queries.account.UNPLACED).scalars())
        placed = [Placement.model_validate(row) for row in conn.execute(queries.account_placement.ALL).mappings()]
    elsewhere: list[str] = []
    entered = 0
    for account_id in unplaced:
        placement = Placement(account_id=account_id, shard=shard)
        if not coordination.place(placement, expected=None):
            current = coordination.placement(account_id)
            if current is None or current.shard != shard:
                elsewhere.append(account_id)
                continue
            placement = current
        else:
            entered += 1
        with store.write() as conn:
            record_placement(conn, placement)
    for placement in placed:
        if placement.state not in (PlacementState.ACTIVE, PlacementState.MOVED):
            continue
        missing = coordination.placement(placement.account_id) is None
        claim = placement.model_copy(update={"state": PlacementState.ACTIVE})
        if reenter(coordination, claim):
            entered += missing
        elif placement.state == PlacementState.ACTIVE and placement.shard == shard:
            current = coordination.placement(placement.account_id)
            if current is not None and current.shard != shard:
                elsewhere.append(placement.account_id)
    return Rebuilt(elsewhere, entered, [], [])


def rebuild_directory(
    store: DeliveryStore,
    coordination: Coordination,
    shard: str,
    resume: Resume,
    discard: Callable[[str], bool],
) -> Rebuilt:
    """`enter_accounts`, then end the moves the coordination store forgot (module docstring).
    `resume` lifts an account's pause; `discard(op_id)` undoes an import (runtime.placement.slices).
    The shard's public key is published again too (runtime.placement.sealing), so that a move to
    this shard finds it and seals the account's credential to it at once."""
    publish_shard_key(store, coordination, shard)
    rebuilt = enter_accounts(store, coordination, shard)
    with store.read() as conn:
        placed = [Placement.model_validate(row) for row in conn.execute(queries.account_placement.ALL).mappings()]
        ops = {
            p.account_id: conn.execute(queries.placement_import.LATEST_OP, {"a": p.account_id}).scalar() for p in placed
        }
    for placement in placed:
        account_id = placement.account_id
        if placement.state in (PlacementState.MOVING, PlacementState.SEALED) and placement.shard == shard:
            if coordination.placement(account_id) is None:
                _append(rebuilt.resumed, _serve_again(store, coordination, placement, resume))
        elif placement.state == PlacementState.IMPORTING and (op_id := ops.get(account_id)) is not None:
            journal = coordination.journal(op_id)
            if journal is not None and journal.get("step") != MoveStep.ROLLED_BACK:
                continue  # a live move: its steps finish it
            current = coordination.placement(account_id)
            if current == placement.model_copy(update={"state": PlacementState.ACTIVE}):
                _append(rebuilt.resumed, _serve_again(store, coordination, placement, resume))
            elif current is not None and current.state == PlacementState.ACTIVE and current.shard != shard:
                if discard(op_id):
                    log.warning(
                        "account move %s: its journal was lost and the account stayed on %s", op_id, current.shard
                    )
                    rebuilt.discarded.append(account_id)
    return rebuilt


def _append(steps: list[Any], step: Any) -> None:
    if step is not None:
        steps.append(step)


def _serve_again(store: DeliveryStore, coordination: Coordination, placement: Placement, resume: Resume) -> Any:
    """A move the directory lost ends here: the account is active on this shard and its held
    input resumes (returns the resume's Step)."""
    active = placement.model_copy(update={"state": PlacementState.ACTIVE})
    with store.write() as conn:
        if local_placement(conn, placement.account_id) != placement:  # changed meanwhile: next round
            return None
        record_placement(conn, active)
    reenter(coordination, active)
    log.warning(
        "account %s: a move's directory entry and journal were lost; it is served on %s again",
        placement.account_id,
        placement.shard,
    )
    return resume(store, placement.account_id)


def discarder(store: DeliveryStore, memory: Any, sessions_dir: Path, images_dir: Path | None) -> Callable[[str], bool]:
    """`discard` for rebuild_directory over a shard's store, memory and folders."""
    return lambda op_id: discard_import(store, memory, sessions_dir, images_dir, op_id)
