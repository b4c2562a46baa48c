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

from runtime import pipeline, ports
from runtime.accounts import AccountSpec, create_account
from runtime.errors import KefuError
from runtime.handling import pause_handling, resume_handling
from runtime.input_pause import in_flight, pause_input
from runtime.manual import ManualSend, retry_manual, send_manual_parts
from runtime.outbox import confirm_result
from runtime.pages import InboundPage, parse_page
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
from runtime.routes import RouteSpec, create_route
from runtime.store import DeliveryStore

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
