"""The embedded broker never hands a consumer a half-written message.

kombu's stock filesystem transport fails this race (an empty file, then a JSON error that
stops the worker); kefu's transport writes each message aside and renames it into the queue.
"""

from __future__ import annotations

import threading

from kombu import Connection

from worker.broker import embedded_folders


def _options(data_dir) -> dict:
    folders = embedded_folders(data_dir)
    for folder in folders.values():
        folder.mkdir(parents=True, exist_ok=True)
    return {key: str(path) for key, path in folders.items()} | {"polling_interval": 0.001}


def _race(url: str, data_dir, count: int = 150) -> tuple[list[int], list[BaseException]]:
    payload = "买" * 200_000  # ~600 KB: writing it takes long enough for a reader to look
    received: list[int] = []
    errors: list[BaseException] = []
    options = _options(data_dir)

    def produce() -> None:
        with Connection(url, transport_options=options) as conn:
            queue = conn.SimpleQueue("race")
            for i in range(count):
                queue.put({"i": i, "body": payload})

    def consume() -> None:
        with Connection(url, transport_options=options) as conn:
            queue = conn.SimpleQueue("race")
            try:
                while len(received) < count:
                    message = queue.get(timeout=10)
                    received.append(message.payload["i"])
                    message.ack()
            except BaseException as error:  # noqa: BLE001 - reported to the test
                errors.append(error)

    threads = [threading.Thread(target=consume), threading.Thread(target=produce)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return received, errors


def test_kefu_filesystem_transport_delivers_only_complete_messages(tmp_path):
    received, errors = _race("kefu-filesystem://", tmp_path)
    assert errors == []
    assert sorted(received) == list(range(150))

