"""kefu's functional core: domain rules and SQLite persistence. No Celery, no network.

The front door:
- `runtime.pipeline`: the steps a buyer message goes through (receive, ingest, admit, turn,
  deliver, settle; reconcile and check_reads on the beat), each returning a `Step` with its
  follow-up work (`Admit`, `RunTurn`, `Attempt`, …) for the shell to dispatch;
- `runtime.ports`: what a platform (`Transport`) or a model (`ModelProvider`) adapter
  implements, the values that cross them, and the `Services` a step is given;
- the operator's operations below (take over, send, settle, pause input, set up accounts).

Everything else in runtime is the steps' own business: import it only to extend them.
"""

import sys
from collections.abc import Callable
from importlib import import_module
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the surface, for readers and type checkers; loaded on first use (below)
    from runtime import pipeline, ports
    from runtime.accounts.registry import AccountSpec, create_account
    from runtime.admission.handling import pause_handling, resume_handling
    from runtime.admission.routes import RouteSpec, create_route
    from runtime.errors import KefuError
    from runtime.inbound.input_pause import in_flight, pause_input
    from runtime.inbound.pages import InboundPage, parse_page
    from runtime.outbox.manual import ManualSend, retry_manual, send_manual_parts
    from runtime.outbox.requests import confirm_result
    from runtime.pipeline import Admit, Archive, Attempt, FollowUp, Ingest, RecordRead, RunTurn, Settle, Step
    from runtime.ports import (
        BuyerReadReceipt,
        ListenerFailure,
        ModelProvider,
        OutboundSend,
        SendFailure,
        SendReceipt,
        Services,
        Transport,
    )
    from runtime.store import DeliveryStore

# Where each name of the surface lives: importing `runtime.errors` (as every `kefu` command does)
# must not load the whole pipeline.
_SURFACE = {
    "pipeline": "runtime.pipeline",
    "ports": "runtime.ports",
    "AccountSpec": "runtime.accounts.registry",
    "create_account": "runtime.accounts.registry",
    "KefuError": "runtime.errors",
    "pause_handling": "runtime.admission.handling",
    "resume_handling": "runtime.admission.handling",
    "in_flight": "runtime.inbound.input_pause",
    "pause_input": "runtime.inbound.input_pause",
    "ManualSend": "runtime.outbox.manual",
    "retry_manual": "runtime.outbox.manual",
    "send_manual_parts": "runtime.outbox.manual",
    "confirm_result": "runtime.outbox.requests",
    "InboundPage": "runtime.inbound.pages",
    "parse_page": "runtime.inbound.pages",
    "Admit": "runtime.pipeline",
    "Archive": "runtime.pipeline",
    "Attempt": "runtime.pipeline",
    "FollowUp": "runtime.pipeline",
    "Ingest": "runtime.pipeline",
    "RecordRead": "runtime.pipeline",
    "RunTurn": "runtime.pipeline",
    "Settle": "runtime.pipeline",
    "Step": "runtime.pipeline",
    "BuyerReadReceipt": "runtime.ports",
    "ListenerFailure": "runtime.ports",
    "ModelProvider": "runtime.ports",
    "OutboundSend": "runtime.ports",
    "SendFailure": "runtime.ports",
    "SendReceipt": "runtime.ports",
    "Services": "runtime.ports",
    "Transport": "runtime.ports",
    "RouteSpec": "runtime.admission.routes",
    "create_route": "runtime.admission.routes",
    "DeliveryStore": "runtime.store",
}


def lazy_surface(package: str, surface: dict[str, str]) -> Callable[[str], object]:
    """A package's `__getattr__` that loads each name of `surface` (name -> the module it lives
    in, or the module itself) on first use and keeps it, so importing the package loads none."""

    def load(name: str) -> object:
        if name not in surface:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module = import_module(surface[name])
        value = module if module.__name__ == f"{package}.{name}" else getattr(module, name)
        setattr(sys.modules[package], name, value)
        return value

    return load


__getattr__ = lazy_surface(__name__, _SURFACE)


__all__ = [
    "AccountSpec",
    "Admit",
    "Archive",
    "Attempt",
    "BuyerReadReceipt",
    "DeliveryStore",
    "FollowUp",
    "InboundPage",
    "Ingest",
    "KefuError",
    "ListenerFailure",
    "ManualSend",
    "ModelProvider",
    "OutboundSend",
    "RecordRead",
    "RouteSpec",
    "RunTurn",
    "SendFailure",
    "SendReceipt",
    "Services",
    "Settle",
    "Step",
    "Transport",
    "confirm_result",
    "create_account",
    "create_route",
    "in_flight",
    "parse_page",
    "pause_handling",
    "pause_input",
    "pipeline",
    "ports",
    "resume_handling",
    "retry_manual",
    "send_manual_parts",
]
