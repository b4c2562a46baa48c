"""How a conversation's times read to the agent (seed 001 `ImScriptClock`, 批量模拟与剧本时间).

A real conversation's times read as they are. A simulated conversation runs on its script's
clock: the simulator stamps each buyer message with script time (`occurred_at`: "Tuesday
9:00", then "Friday 18:00"), and that is the time the agent must live in, for its message
labels, its history, its memory's folder times and what "last week" means to a memory search.
kefu's records keep real time all the same (grace periods, leases, triggers and retries run on
it), and the script time of any real moment is read off the conversation's own messages: the
script time of the latest buyer message received by then, advanced by the real time since.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field
from pathlib import Path

from runtime.store import queries
from runtime.store.connection import Connection
from runtime.store.lru import Lru

_SAME_OFFSET_MS = 1000  # offsets this close are one clock: the script clock runs with real time


@dataclass(frozen=True)
class ConversationClock:
    # (real received time, script offset) from each point the script clock moved, by real time
    anchors: tuple[tuple[int, int], ...] = ()

    def shown(self, real_ms: int) -> int:
        """The time the agent reads for a real moment of this conversation."""
        if not self.anchors:
            return real_ms
        at = bisect_right(self.anchors, (real_ms, float("inf"))) - 1
        return real_ms + self.anchors[max(at, 0)][1]

    def shown_message(self, received_at: int, occurred_at: int | None, sender_role: str) -> int:
        """A message's own time: on a script clock a buyer message is stamped with its script time,
        which holds even when one page brings "Tuesday 9:00" and "Friday 18:00" together."""
        if self.anchors and sender_role == "external" and occurred_at is not None:
            return occurred_at
        return self.shown(received_at)


REAL_TIME = ConversationClock()

KEPT = 4096  # conversations whose clock a process keeps


@dataclass
class _Read:
    """A conversation's anchors as read up to its buyer message `last` (received_at, id)."""

    last: tuple[int, int] = (0, 0)
    anchors: list[tuple[int, int]] = field(default_factory=list)


_read: Lru[tuple[Path, int], _Read] = Lru(KEPT)


def conversation_clock(conn: Connection, customer_id: int) -> ConversationClock:
    """A simulated conversation's script clock from its stored buyer messages; real time for a
    real one (a real platform's `occurred_at` is evidence, never the shop's clock). The anchors
    read are kept in this process, so a turn reads only the buyer messages stored since the
    last (a message received before those read, from a host whose clock is behind, reads all
    again); a message pruned or erased since leaves its anchor, a time, not its content."""
    path = getattr(conn.dbapi, "kefu_path", None)
    key = (path, customer_id) if path is not None else None
    read = (_read.pop(key) if key is not None else None) or _Read()
    rows = conn.execute(queries.inbound_message.SCRIPT_TIMES, {"c": customer_id, "after": read.last[1]}).all()
    if rows and (rows[0][0], rows[0][2]) < read.last:
        read = _Read()
        rows = conn.execute(queries.inbound_message.SCRIPT_TIMES, {"c": customer_id, "after": 0}).all()
    anchors = read.anchors
    for received_at, occurred_at, _ in rows:
        offset = occurred_at - received_at
        if not anchors or abs(offset - anchors[-1][1]) > _SAME_OFFSET_MS:
            anchors.append((received_at, offset))
    if rows:
        read.last = (rows[-1][0], rows[-1][2])
    if key is not None:
        _read.put(key, read)
    if len(anchors) == 1 and abs(anchors[0][1]) <= _SAME_OFFSET_MS:
        return REAL_TIME  # a simulation without a script clock (the demo's rate load, `kefu simulate say`)
    return ConversationClock(tuple(anchors))
