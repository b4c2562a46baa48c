"""Simulated buyers who write at a steady rate, in a thread, for as long as a block runs: the
live traffic of integration tests and benchmarks (whoever listens to the account pages it in)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

from transports.simulator.platform import SimulatedPlatform

QUESTION = "请问什么时候发货？"  # the sample FAQ answers it


class SteadyBuyers:
    """Message n goes to account n mod len(accounts), from buyer `buyer(n)`."""

    def __init__(
        self,
        platform: SimulatedPlatform,
        accounts: Sequence[str],
        per_s: float,
        buyer: Callable[[int], str] = lambda n: f"b{n}",
        text: str = QUESTION,
    ) -> None:
        self.platform, self.accounts, self.per_s = platform, list(accounts), per_s
        self.buyer, self.text = buyer, text
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kefu-steady-buyers", daemon=True)

    def __enter__(self) -> SteadyBuyers:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(1 / self.per_s):
            buyer = self.buyer(self.sent)
            self.platform.buyer_says(self.accounts[self.sent % len(self.accounts)], buyer, f"买家{buyer}", self.text)
            self.sent += 1
