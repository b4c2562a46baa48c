"""Routes (SPEC 3.2): which conversations of an account the agent handles, and when.

A specific route always beats an `all` route for its conversation, even when disabled. Every
change bumps the route's generation; auto sends admitted under an older one never go out.
Route operations carry an operation id (replay returns the stored result) and a revision
check (compare-and-set).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError, model_validator

from runtime.accounts.registry import require_account
from runtime.agent.profiles import require_profile
from runtime.errors import KefuError
from runtime.placement.operations import run_once
from runtime.store import DeliveryStore, now_ms, queries
from runtime.store.connection import Connection
from runtime.store.tables import Route, insert_row, update_row

# `answer`: the agent answers as the route's triggers say. `observe`: the listener runs and input is
# stored (history, memory: runtime.memory.history) but never admitted (runtime.admission.batches,
# "observing"); switched back to answer, only input that comes after is answered.
RouteMode = Literal["answer", "observe"]


def _trigger(spec_name: str, column: str, default: bool | None = None, *, ge: int | None = None) -> Any:
    """Accept the spec's name (`every_n`) as well as the stored column's (`trigger_every_n`).
    Any, as pydantic's own `Field()`: the field's annotation gives its type."""
    return Field(default, validation_alias=AliasChoices(column, spec_name), ge=ge)


class RouteSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    id: str = Field(min_length=1, max_length=128)
    account_id: str = Field(min_length=1)
    conversation_type: Literal["direct", "group"]
    target: Literal["all", "specific"] = "all"
    conversation_id: str | None = Field(None, min_length=1)
    peer_id: str | None = Field(None, min_length=1)  # direct only: the provider's peer for this conversation
    workspace: str = "default"
    enabled: bool = True
    agent_preset: str | None = Field(None, min_length=1)
    mode: RouteMode = "answer"
    trigger_mention: bool = _trigger("mention", "trigger_mention", False)  # explicit mention evidence only
    trigger_every_n: int | None = _trigger("every_n", "trigger_every_n", ge=1)
    trigger_interval_s: int | None = _trigger("fixed_interval_seconds", "trigger_interval_s", ge=1)

    @model_validator(mode="after")
    def _consistent(self) -> RouteSpec:
        if (self.target == "specific") != (self.conversation_id is not None):
            raise ValueError("a 'specific' route needs conversation_id, and an 'all' route must not have one")
        triggers = self.trigger_mention or self.trigger_every_n or self.trigger_interval_s
        if self.conversation_type == "direct" and triggers:
            raise ValueError("direct routes take no group trigger settings (mention, every_n, interval)")
        if self.conversation_type == "group":
            if not triggers:
                raise ValueError("a group route needs at least one trigger: mention, every_n or interval")
            if self.peer_id is not None:
                raise ValueError("peer_id is for direct routes only")
        return self


class RouteChanges(BaseModel):
    """Fields an update may change; the result is validated as a whole RouteSpec."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    enabled: bool | None = None
    agent_preset: str | None = None
    mode: RouteMode | None = None
    trigger_mention: bool | None = _trigger("mention", "trigger_mention")
    trigger_every_n: int | None = _trigger("every_n", "trigger_every_n")
    trigger_interval_s: int | None = _trigger("fixed_interval_seconds", "trigger_interval_s")
    peer_id: str | None = None


def _invalid(error: ValidationError | str) -> KefuError:
    detail = (
        error if isinstance(error, str) else "; ".join(e["msg"].removeprefix("Value error, ") for e in error.errors())
    )
    return KefuError("KEFU_ROUTE_INVALID", f"route rejected: {detail}", "fix the route settings")


def _check(spec: RouteSpec, batch_size: int) -> None:
    if spec.trigger_every_n is not None and spec.trigger_every_n > batch_size:
        raise _invalid(f"every_n {spec.trigger_every_n} exceeds the admission batch size {batch_size}")


def _load_route(conn: Connection, route_id: str) -> Route | None:
    row = conn.execute(queries.route.BY_ID, {"id": route_id}).mappings().first()
    return Route.model_validate(dict(row)) if row else None


def create_route(
    store: DeliveryStore, spec: RouteSpec, op_id: str, batch_size: int = 1000, profiles: Collection[str] = ()
) -> Route:
    """`profiles`: the agent profiles configured (runtime.agent.profiles); a route naming
    another is refused (KEFU_AGENT_PROFILE_UNKNOWN): it would never answer."""
    _check(spec, batch_size)
    with store.write() as conn:

        def create() -> dict[str, Any]:
            require_profile(spec.id, spec.agent_preset, profiles)
            require_account(conn, spec.account_id)
            if _load_route(conn, spec.id) is not None:
                raise KefuError("KEFU_ROUTE_EXISTS", f"route {spec.id!r} already exists", "update it instead")
            _refuse_a_second_for_the_same_conversations(conn, spec)
            keep_observed(conn, spec.account_id)
            row = Route(**spec.model_dump(), created_at=now_ms())
            insert_row(conn, row)
            return row.model_dump()

        return Route.model_validate(run_once(conn, op_id, "route.create", spec.id, create))


def _refuse_a_second_for_the_same_conversations(conn: Connection, spec: RouteSpec) -> None:
    """Only the oldest of two routes for the same conversations would ever govern them: the
    second one's triggers, profile and mode would be silently ignored."""
    params = {"a": spec.account_id, "t": spec.conversation_type, "target": spec.target, "c": spec.conversation_id}
    same = conn.execute(queries.route.SAME_CONVERSATIONS, params).scalar_one_or_none()
    if same is not None:
        covered = spec.conversation_id if spec.target == "specific" else "all"
        raise KefuError(
            "KEFU_ROUTE_DUPLICATE",
            f"route {same!r} already covers {spec.conversation_type} conversations ({covered}) of account"
            f" {spec.account_id!r}",
            f"change route {same!r} (kefu routes enable|disable|set-profile|observe) or delete it first",
        )


def _expect_revision(conn: Connection, route_id: str, expected_revision: int) -> Route:
    current = _load_route(conn, route_id)
    if current is None:
        raise KefuError("KEFU_ROUTE_UNKNOWN", f"no route {route_id!r}")
    if current.revision != expected_revision:
        raise KefuError(
            "KEFU_REVISION_CONFLICT",
            f"route {route_id!r} is at revision {current.revision}, not {expected_revision}",
            "read the route again and retry with its current revision",
        )
    return current


def update_route(
    store: DeliveryStore,
    route_id: str,
    expected_revision: int,
    changes: RouteChanges,
    op_id: str,
    batch_size: int = 1000,
    profiles: Collection[str] = (),
) -> Route:
    """A route's profile may be changed only to one configured (`profiles`, as create_route);
    other changes of a route whose profile is gone go through (disabling it, say)."""
    with store.write() as conn:

        def update() -> dict[str, Any]:
            current = _expect_revision(conn, route_id, expected_revision)
            keep_observed(conn, current.account_id)
            if "agent_preset" in changes.model_fields_set:
                require_profile(route_id, changes.agent_preset, profiles)
            fields = set(RouteSpec.model_fields)
            merged = {k: v for k, v in current.model_dump().items() if k in fields}
            merged.update(changes.model_dump(exclude_unset=True))
            try:
                spec = RouteSpec.model_validate(merged)
            except ValidationError as error:
                raise _invalid(error) from None
            _check(spec, batch_size)
            updated = Route(
                **spec.model_dump(),
                generation=current.generation + 1,
                revision=current.revision + 1,
                created_at=current.created_at,
            )
            update_row(conn, updated)
            return updated.model_dump()

        return Route.model_validate(run_once(conn, op_id, "route.update", route_id, update))


def current_revision(store: DeliveryStore, route_id: str) -> int:
    """For an operator acting on what they see now (the change still checks it)."""
    with store.read() as conn:
        route = _load_route(conn, route_id)
    if route is None:
        raise KefuError("KEFU_ROUTE_UNKNOWN", f"no route {route_id!r}", "see `kefu routes list`")
    return route.revision


def list_routes(store: DeliveryStore, account_id: str | None = None) -> list[Route]:
    with store.read() as conn:
        rows = conn.execute(queries.route.OF_ACCOUNT, {"a": account_id}).mappings()
        return [Route.model_validate(dict(row)) for row in rows]


def delete_route(store: DeliveryStore, route_id: str, expected_revision: int, op_id: str) -> None:
    """Remove a route. Auto sends admitted under it are stale from now on: their generation can
    never match again (SPEC 3.2)."""
    with store.write() as conn:

        def delete() -> dict[str, Any]:
            keep_observed(conn, _expect_revision(conn, route_id, expected_revision).account_id)
            conn.execute(queries.route.DELETE, {"r": route_id})
            return {"deleted": route_id}

        run_once(conn, op_id, "route.delete", route_id, delete)


def resolve_route(conn: Connection, account_id: str, conversation_type: str, conversation_id: str) -> Route | None:
    """The route that governs a conversation: a specific route beats `all`, even when disabled."""
    row = (
        conn.execute(queries.route.GOVERNING, {"a": account_id, "t": conversation_type, "c": conversation_id})
        .mappings()
        .first()
    )
    return Route.model_validate(dict(row)) if row else None


def keep_observed(conn: Connection, account_id: str) -> None:
    """Before the account's routes change (in the change's transaction): input still waiting in
    a conversation whose route observes came while it observed, so it is kept as observed, never
    admitted by the route that governs it next. Only input after the change is answered, as after
    a handling pause (runtime.admission.handling)."""
    waiting = conn.execute(queries.inbound_message.WAITING_CUSTOMERS, {"a": account_id}).scalars().all()
    for customer_id in waiting:
        customer = conn.execute(queries.customer.BY_ID, {"id": customer_id}).mappings().first()
        if customer is None:
            continue
        route = resolve_route(conn, account_id, customer["conversation_type"], customer["conversation_id"])
        if route is not None and route.mode == "observe":
            conn.execute(queries.inbound_message.OBSERVE_PENDING, {"c": customer_id})


def observing_route(store: DeliveryStore, account_id: str, conversation_type: str, conversation_id: str) -> str | None:
    """The id of the conversation's route when that route observes (listens, never answers)."""
    with store.read() as conn:
        route = resolve_route(conn, account_id, conversation_type, conversation_id)
    return route.id if route is not None and route.mode == "observe" else None
