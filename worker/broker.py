"""Broker wiring, and the result backend (used only by pings): the embedded default, kombu's
filesystem transport with atomic writes under the data dir, or Redis.

The broker only distributes work; SQLite is the system of record. The filesystem transport
drops a message that is in flight when its worker dies, and Redis holds it until the
visibility timeout, so in both cases the reconciler is what guarantees progress.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from config import Settings
from config.settings import masked_url
from runtime.errors import KefuError
from worker.embedded_broker import SCHEME

log = logging.getLogger(__name__)
ATTEMPT_TIMEOUT_S = 5.0  # one connection attempt: a host that drops packets costs no more


def embedded_folders(data_dir: Path) -> dict[str, Path]:
    root = data_dir / "broker"
    return {
        "data_folder_in": root / "queue",
        "data_folder_out": root / "queue",
        "processed_folder": root / "processed",
        "control_folder": root / "control",
        "staging_folder": root / "staging",
    }


def broker_config(settings: Settings) -> dict[str, Any]:
    if settings.embedded_broker:  # its folders are made on first use (worker.embedded_broker)
        options: dict[str, Any] = {key: str(path) for key, path in embedded_folders(settings.data_dir).items()}
        # Keep consumed messages under the data dir (never the system temp dir); pruned by beat.
        options.update(store_processed=True, polling_interval=0.05)
        return {
            "broker_url": f"{SCHEME}://",
            "broker_transport_options": options,
            "result_backend": f"worker.folders_on_use:ResultFolder+file://{settings.data_dir / 'broker' / 'results'}",
        }
    # KEFU_BROKER_VISIBILITY_TIMEOUT_S, validated longer than the turn and attempt leases; Celery
    # reads it from all three places (transport, result backend, app.conf).
    visibility = settings.broker_visibility_timeout_s
    options = {
        "visibility_timeout": visibility,
        "unacked_restore_interval": 5,
        "unacked_restore_throttle": 1,
    }
    return {
        "broker_url": settings.broker_url,
        "broker_transport_options": options,
        "result_backend": settings.broker_url,
        "result_backend_transport_options": {"visibility_timeout": visibility},
        "visibility_timeout": visibility,
    }


def queue_depths(settings: Settings, queues: list[str]) -> dict[str, int]:
    """Messages waiting in each queue (Redis lists, or the embedded broker's message files);
    -1 where the broker cannot be asked (AMQP, or Redis down)."""
    if settings.embedded_broker:
        folder = embedded_folders(settings.data_dir)["data_folder_in"]
        names = [path.name for path in folder.glob("*.msg")] if folder.exists() else []
        return {queue: sum(name.endswith(f".{queue}.msg") for name in names) for queue in queues}
    if not settings.redis_broker:
        return dict.fromkeys(queues, -1)
    import redis

    try:
        client = redis.Redis.from_url(settings.broker_url, socket_timeout=2, socket_connect_timeout=2)
        with client.pipeline() as pipe:
            for queue in queues:
                pipe.llen(queue)
            return {queue: int(depth) for queue, depth in zip(queues, pipe.execute(), strict=True)}
    except redis.RedisError:
        return dict.fromkeys(queues, -1)


def broker_unreachable(settings: Settings, reason: str) -> KefuError:
    """The startup failure of a process whose broker never answered within the bound: names the
    broker (credentials masked) so the operator sees what could not be reached."""
    return KefuError(
        "KEFU_BROKER_UNREACHABLE",
        f"the broker at {masked_url(settings.broker_url)} did not answer within"
        f" {settings.broker_unreachable_s:g} s ({reason})",
        "start it or fix KEFU_BROKER_URL; KEFU_BROKER_UNREACHABLE_S sets how long a process waits for it",
    )


def _ping(settings: Settings, timeout_s: float) -> None:
    if settings.redis_broker:
        import redis

        client = redis.Redis.from_url(settings.broker_url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s)
        try:
            client.ping()
        finally:
            client.close()
        return
    from kombu import Connection

    with Connection(settings.broker_url, connect_timeout=timeout_s) as connection:
        connection.connect()


def wait_for_broker(settings: Settings) -> None:
    """Return once the broker answers; raise KEFU_BROKER_UNREACHABLE when it has not within
    KEFU_BROKER_UNREACHABLE_S. For a process that starts (worker, beat, listener, console): one
    that waited for ever would keep a supervisor from ever seeing the failure. The embedded
    broker is a folder: nothing to wait for."""
    if settings.embedded_broker:
        return
    bound_s = settings.broker_unreachable_s
    deadline = time.monotonic() + bound_s
    waited = False
    while True:
        left = deadline - time.monotonic()
        try:
            _ping(settings, max(0.2, min(ATTEMPT_TIMEOUT_S, left)))
        except Exception as error:
            left = deadline - time.monotonic()
            if left <= 0:
                raise broker_unreachable(settings, type(error).__name__) from None
            if not waited:
                log.warning(
                    "broker %s does not answer (%s); waiting up to %g s",
                    masked_url(settings.broker_url),
                    type(error).__name__,
                    bound_s,
                )
                waited = True
            time.sleep(min(1.0, left))
            continue
        if waited:
            log.warning("broker %s answered", masked_url(settings.broker_url))
        return
