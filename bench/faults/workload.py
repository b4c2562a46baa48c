"""The workload: FAQ-matching buyer messages from many simulated buyers at a steady rate.

Buyers write through the simulated platform (`buyer_says`); `kefu listen` picks the messages
up from there. With direct publishing the driver also publishes each message's page itself,
through `worker.dispatch.receive_page` when the project has it (record in SQLite, then
publish), else straight to the ingest queue. With several accounts (one per shard), each buyer
writes to one of them, by its index.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Sequence

from celery import Celery

from runtime.inbound.pages import InboundPage
from transports.simulator import SimulatedPlatform, SimulatorTransport
from transports.simulator.platform import BuyerMessage
from worker.dispatch import receive_page

# Each matches an entry of runtime/agent/knowledge/sample_faq.toml: the rules agent answers it.
QUESTIONS = (
    "请问什么时候发货？",
    "发什么快递？",
    "可以退货吗？",
    "能开发票吗？",
    "有优惠券吗？",
    "这款是什么材质的？",
    "能用花呗分期吗？",
    "收到的枕套有破损",
    "尺寸不对能换货吗？",
)
PUBLISH_PATIENCE_S = 30.0  # a direct publish is retried this long (the platform would redeliver)


def buyer_id(index: int) -> str:
    return f"b{index:04d}"


class Publisher:
    """Publishes a page the way any receiver must: through `receive_page`."""

    via = "receive_page"

    def __init__(self, app: Celery, by_account: dict[str, Celery] | None = None) -> None:
        self.app = app
        self.by_account = by_account or {}  # the app of each account's shard, when not `app`'s
        self.retries = 0

    def publish(self, page: InboundPage) -> bool:
        """Publish (retrying like a platform redelivering an un-ACKed page). False if it gave up."""
        deadline = time.monotonic() + PUBLISH_PATIENCE_S
        while True:
            try:
                receive_page(self.by_account.get(page.account_id, self.app), page)
                return True
            except Exception:
                self.retries += 1
                if time.monotonic() > deadline:
                    return False
                time.sleep(0.2)


class Workload:
    """`total` messages at `rate`/s, each from a buyer drawn from `buyers` by the seeded rng,
    to the account (of `account_id`, one or several) the buyer's index picks."""

    def __init__(
        self,
        platform: SimulatedPlatform,
        account_id: str | Sequence[str],
        rng: random.Random,
        buyers: int,
        publisher: Publisher | None = None,
    ) -> None:
        self.platform = platform
        self.transport = SimulatorTransport(platform)
        self.accounts = [account_id] if isinstance(account_id, str) else list(account_id)
        self.account_id = self.accounts[0]
        self.rng = rng
        self.buyers = buyers
        self.publisher = publisher
        self.offered = 0  # every message said, the schedule's and any other
        self.scheduled = 0  # the schedule's (`run`, `burst`)
        self.unpublished = 0
        self._lock = threading.Lock()
        self._next = 0  # index of the next message of the schedule
        self._total, self._rate, self._start_at = 0, 1.0, 0.0
        self._choices: list[int] = []
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    def say(self, index: int, text: str | None = None) -> BuyerMessage:
        """One buyer message (published too, with direct publishing)."""
        buyer = buyer_id(index)
        with self._lock:
            text = text or self.rng.choice(QUESTIONS)
            self.offered += 1
        account = self.accounts[index % len(self.accounts)]
        message = self.platform.buyer_says(account, buyer, f"买家{index}", text)
        if self.publisher is None:
            return message
        page = self.transport.page_of(account, [message])
        if not self.publisher.publish(page):
            with self._lock:
                self.unpublished += 1
        return message

    def start(self, total: int, rate: float, exclude: frozenset[int] = frozenset()) -> Workload:
        """Offer `total` messages paced at `rate`/s from every buyer but `exclude`, in a thread
        of its own (a late start catches up). A `burst` takes the schedule's next messages
        early, so the total and the mean rate stay."""
        self._plan(total, rate, exclude)
        self._thread = threading.Thread(target=self._pace, name="faults-workload", daemon=True)
        self._thread.start()
        return self

    def _plan(self, total: int, rate: float, exclude: frozenset[int]) -> None:
        self._total, self._rate, self._start_at = total, rate, time.monotonic()
        self._choices = [i for i in range(self.buyers) if i not in exclude]

    def _pace(self) -> None:
        while not self._stop.is_set() and (index := self._claim()) is not None:
            delay = self._start_at + index / self._rate - time.monotonic()
            if delay > 0:
                self._stop.wait(delay)
            self._offer()

    def burst(self, count: int, spread_s: float) -> int:
        """Offer up to `count` of the remaining messages now, over `spread_s`. Returns how many."""
        sent = 0
        for _ in range(count):
            if self._claim() is None:
                break
            self._offer()
            sent += 1
            time.sleep(spread_s / count)
        return sent

    def _offer(self) -> None:
        self.say(self.rng.choice(self._choices))
        with self._lock:
            self.scheduled += 1

    def _claim(self) -> int | None:
        with self._lock:
            if self._next >= self._total:
                return None
            self._next += 1
            return self._next - 1

    def join(self, timeout_s: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout_s)

    def stop(self) -> None:
        self._stop.set()
        self.join(5)
