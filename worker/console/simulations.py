"""The console's simulation instances (seed 001 模拟实例): a merchant tries the agent on simulated
buyers before real buyers meet it. The page lists the instances of the simulated platform's
ledger; its actions are the CLI's (`kefu simulate new --manual`, `say`, `operator-dm`, `stop`),
through the same functions of worker.simulation_instances, so the console adds no rule of its
own. A page apart: a real shop's conversations list never shows an instance."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from runtime import pipeline
from runtime.customers.summaries import customer_of
from runtime.errors import KefuError
from runtime.operators.accounts import Operator, Role, record_action
from runtime.store import DeliveryStore
from transports.simulator import SimulatedPlatform
from transports.simulator.platform import SimInstance
from worker.console.auth import signed_in
from worker.sample_shop import SAMPLE_ROUTE
from worker.simulation_instances import instance_or_fail, new_instance, operator_dm, say_as_buyer, stop

STOP_TIMEOUT_S = 10.0  # what a form post may wait; a conversation still busy stays `stopping`: stop again
DEFAULT_BUYER = "模拟顾客"  # the CLI's default buyer name
BUYER_NAME_MAX = 64
TEXT_MAX = 4000  # a message's limit elsewhere in the console

Page = Callable[..., Response]
Act = Callable[[Request, Role], Awaitable[tuple[Operator, FormData]]]


@dataclass(frozen=True)
class InstanceRow:
    """One instance as the page shows it."""

    instance: SimInstance
    customer_id: int | None  # its conversation's customer, once the buyer's first line is stored
    dm_request_id: str  # made when the page renders: a resubmitted form sends the same message once


class Ledger:
    """The simulated platform's ledger, opened on first use: listing instances on a host that
    never simulated creates no ledger file."""

    def __init__(self, path: Path) -> None:
        self.path, self.opening = path, threading.Lock()
        self.platform: SimulatedPlatform | None = None

    def open(self) -> SimulatedPlatform:
        with self.opening:
            if self.platform is None:
                self.platform = SimulatedPlatform(self.path)
            return self.platform

    def instances(self) -> list[SimInstance]:
        return self.open().instances() if self.path.exists() else []


def simulation_routes(
    store: DeliveryStore, simulator_path: Path, page: Page, act: Act, hand_on: Callable[[pipeline.FollowUp], object]
) -> list[Route]:
    """The page and its actions. Actions need the operator role and the session's CSRF token
    (`act`); their refusals (a SimulationError, a KefuError) render as every console refusal does."""
    ledger = Ledger(simulator_path)

    def simulations(request: Request) -> Response:
        operator = signed_in(request, store)
        if operator is None:
            return RedirectResponse("/login", status_code=303)
        rows = [_row(store, instance) for instance in reversed(ledger.instances())]  # the newest first
        return page(
            request, "simulations.html", operator, rows=rows, default_route=SAMPLE_ROUTE, default_buyer=DEFAULT_BUYER
        )

    async def create(request: Request) -> Response:
        operator, form = await act(request, Role.OPERATOR)
        route = _field(form, "route") or SAMPLE_ROUTE
        buyer_name = _field(form, "buyer_name") or DEFAULT_BUYER
        if len(buyer_name) > BUYER_NAME_MAX:
            raise KefuError("KEFU_INVALID_INPUT", f"a buyer name is at most {BUYER_NAME_MAX} characters")
        platform = await run_in_threadpool(ledger.open)
        instance = await run_in_threadpool(new_instance, store, platform, route, buyer_name)
        await run_in_threadpool(record_action, store, operator.name, "simulation-new", None, None, instance.id)
        return _back(instance)

    async def buyer_says(request: Request) -> Response:
        operator, form = await act(request, Role.OPERATOR)
        text = _text(form)
        platform = await run_in_threadpool(ledger.open)
        instance = await run_in_threadpool(instance_or_fail, platform, request.path_params["instance_id"])
        await run_in_threadpool(say_as_buyer, platform, instance, text)
        await run_in_threadpool(record_action, store, operator.name, "simulation-say", None, None, instance.id)
        return _back(instance)

    async def message_agent(request: Request) -> Response:
        """The operator's direct message to the agent under test; the answer shows on the
        conversation's page (the redirect's target), never reaching the buyer."""
        operator, form = await act(request, Role.OPERATOR)
        text, request_id = _text(form), _field(form, "request_id") or uuid.uuid4().hex
        platform = await run_in_threadpool(ledger.open)
        instance = await run_in_threadpool(instance_or_fail, platform, request.path_params["instance_id"])
        dm = await run_in_threadpool(operator_dm, store, platform, instance, text, request_id)
        if dm.created:
            await run_in_threadpool(record_action, store, operator.name, "simulation-dm", dm.customer_id, request_id)
        await run_in_threadpool(hand_on, pipeline.Admit(dm.customer_id))  # again on a resubmit: admission is idempotent
        return RedirectResponse(f"/c/{dm.customer_id}", status_code=303)

    async def stop_instance(request: Request) -> Response:
        """The stop barrier, waited for STOP_TIMEOUT_S at most: past it the instance stays
        `stopping` (it takes no buyer input and no send reaches the buyer) and the refusal says so."""
        operator, _ = await act(request, Role.OPERATOR)
        platform = await run_in_threadpool(ledger.open)
        instance = await run_in_threadpool(instance_or_fail, platform, request.path_params["instance_id"])
        await run_in_threadpool(record_action, store, operator.name, "simulation-stop", None, None, instance.id)
        stopped = await run_in_threadpool(stop, store, platform, instance, STOP_TIMEOUT_S)
        return _back(stopped)

    return [
        Route("/simulations", simulations),
        Route("/simulations/new", create, methods=["POST"]),
        Route("/simulations/{instance_id}/say", buyer_says, methods=["POST"]),
        Route("/simulations/{instance_id}/dm", message_agent, methods=["POST"]),
        Route("/simulations/{instance_id}/stop", stop_instance, methods=["POST"]),
    ]


def _row(store: DeliveryStore, instance: SimInstance) -> InstanceRow:
    customer_id = customer_of(store, instance.account_id, instance.conversation_id)
    return InstanceRow(instance=instance, customer_id=customer_id, dm_request_id=uuid.uuid4().hex)


def _field(form: FormData, name: str) -> str:
    value = form.get(name)
    return value.strip() if isinstance(value, str) else ""


def _text(form: FormData) -> str:
    text = _field(form, "text")
    if not text or len(text) > TEXT_MAX:
        raise KefuError("KEFU_INVALID_INPUT", f"a message is 1 to {TEXT_MAX} characters")
    return text


def _back(instance: SimInstance) -> Response:
    return RedirectResponse(f"/simulations#{instance.id}", status_code=303)
