"""What a process derived from a file or a store and keeps while a cheap check says it still
holds (a session log's folds, a conversation's script clock, a scope's recall index, a message's
JSON): a bounded map, least recently used out, safe to share between threads."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class Lru(Generic[K, V]):
    def __init__(self, max_entries: int) -> None:
        self.max_entries = max_entries
        self._entries: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        with self._lock:
            value = self._entries.get(key)
            if value is not None:
                self._entries.move_to_end(key)
            return value

    def pop(self, key: K) -> V | None:
        """Taken out: a caller that extends a value in place gives it back with `put` when done,
        so two threads never change one value."""
        with self._lock:
            return self._entries.pop(key, None)

    def put(self, key: K, value: V) -> None:
        with self._lock:
            self._entries[key] = value
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)
