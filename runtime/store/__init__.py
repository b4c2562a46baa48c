"""The delivery store: one SQLite file per shard, the system of record for every stage.

Its names load on first use, so reading `runtime.store.states` (as `kefu --help` does) does not
load SQLAlchemy."""

from typing import TYPE_CHECKING

from runtime import lazy_surface

if TYPE_CHECKING:
    from runtime.store.clock import now_ms
    from runtime.store.connection import Connection
    from runtime.store.engine import DeliveryStore, immediate
    from runtime.store.migrations import LATEST_VERSION

_SURFACE = {
    "Connection": "runtime.store.connection",
    "DeliveryStore": "runtime.store.engine",
    "immediate": "runtime.store.engine",
    "now_ms": "runtime.store.clock",
    "LATEST_VERSION": "runtime.store.migrations",
}

__getattr__ = lazy_surface(__name__, _SURFACE)


__all__ = ["LATEST_VERSION", "Connection", "DeliveryStore", "immediate", "now_ms"]
