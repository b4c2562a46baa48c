"""The embedded broker never hands a reader a half-written file.

kombu's stock filesystem transport creates a file and then writes it, so a reader in
between gets an empty file: for a message that stops the worker on a JSON error, for an
exchange's binding table it fails a publish. kefu's transport writes aside and renames.
"""

from __future__ import annotations

import threading

from kombu import Connection, Exchange, Queue

from worker.broker import embedded_folders

URL = "kefu-filesystem://"


def _options(data_dir) -> dict:
    folders = embedded_folders(data_dir)
    for folder in folders.values():
        folder.mkdir(parents=True, exist_ok=True)
    return {key: str(path) for key, path in folders.items()} | {"polling_interval": 0.001}


def _run(*targets) -> None:
    threads = [threading.Thread(target=target) for target in targets]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)


def test_large_messages_are_read_only_when_complete(tmp_path):
    options, count, payload = _options(tmp_path), 150, "买" * 200_000  # ~600 KB: slow to write
    with Connection(URL, transport_options=options) as conn:
        conn.SimpleQueue("race").close()  # bindings in place before the race
    received: list[int] = []
    errors: list[BaseException] = []

    def produce() -> None:
        with Connection(URL, transport_options=options) as conn:
            queue = conn.SimpleQueue("race")
            for i in range(count):
                queue.put({"i": i, "body": payload})

    def consume() -> None:
        with Connection(URL, transport_options=options) as conn:
            queue = conn.SimpleQueue("race")
            try:
                while len(received) < count:
                    message = queue.get(timeout=10)
                    received.append(message.payload["i"])
                    message.ack()
            except BaseException as error:  # noqa: BLE001 - reported to the test
                errors.append(error)

    _run(consume, produce)
    assert errors == []
    assert sorted(received) == list(range(count))


def test_concurrent_bindings_are_all_kept_and_never_read_half_written(tmp_path):
    options, binders = _options(tmp_path), 8
    exchange = Exchange("fan", type="direct")
    errors: list[BaseException] = []
    done = threading.Event()

    def bind(i: int) -> None:
        with Connection(URL, transport_options=options) as conn:
            for round_ in range(20):
                Queue(f"q{i}-{round_}", exchange, routing_key=f"q{i}-{round_}")(conn.default_channel).declare()

    def read() -> None:
        with Connection(URL, transport_options=options) as conn:
            channel = conn.default_channel
            while not done.is_set():
                try:
                    channel.get_table("fan")
                except BaseException as error:  # noqa: BLE001 - reported to the test
                    errors.append(error)
                    return

    reader = threading.Thread(target=read)
    reader.start()
    _run(*[lambda i=i: bind(i) for i in range(binders)])
    done.set()
    reader.join(10)
    with Connection(URL, transport_options=options) as conn:
        table = conn.default_channel.get_table("fan")
    assert errors == []
    assert sorted(entry.queue for entry in table) == sorted(f"q{i}-{r}" for i in range(binders) for r in range(20))
