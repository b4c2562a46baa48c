"""The delivery store: one SQLite file per shard, the system of record for every stage.

Its names load on first use, so reading `runtime.store.states` (as `kefu --help` does) does not
load SQLAlchemy."""

from importlib import import_module
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from runtime.store.connection import Connection
    from runtime.store.engine import DeliveryStore, immediate, now_ms
    from runtime.store.migrations import LATEST_VERSION

_SURFACE = {
    "Connection": "runtime.store.connection",
    "DeliveryStore": "runtime.store.engine",
    "immediate": "runtime.store.engine",
    "now_ms": "runtime.store.engine",
    "LATEST_VERSION": "runtime.store.migrations",
}


def __getattr__(name: str) -> object:
    if name not in _SURFACE:
        raise AttributeError(f"module 'runtime.store' has no attribute {name!r}")
    value = getattr(import_module(_SURFACE[name]), name)
    globals()[name] = value
    return value


__all__ = ["LATEST_VERSION", "Connection", "DeliveryStore", "immediate", "now_ms"]
