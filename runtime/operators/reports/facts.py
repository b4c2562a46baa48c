"""The facts reports are read from, kept up to date by a catch-up over the rows stored since.

Counting a day from the raw rows reads every message of it (a busy shop's day is 10^5 of them);
the facts hold one row per conversation and hour (`report_activity`) and one per wait or reply
(`reply_wait`, where a conversation's open wait is found, with its reply time as counted). A
month of them is still 10^5-10^6 rows, so V24's triggers keep summaries of them as they are
written or deleted: per hour, per day (conversations, by their day before), per day, origin and
reply time, per operator; a report reads those, about what it shows. `catch_up` brings the
facts up to the store's rows: buyer messages after the stored mark (ids grow with receive
order: they are given inside the writing transaction,
where the receive time is stamped too), and replies sent since the last catch-up (found by the
sent-attempt index; each is placed once, by its request id). Handoffs and resolves need no
catch-up: migration V24's triggers write them (`report_event`) with the change itself.

It runs in transactions of at most `BATCH` messages, so a first catch-up on a large store never
holds the write lock for long; each transaction moves the mark with the facts it wrote, so a
crash loses nothing and counts nothing twice. Within a transaction each conversation's messages
and replies are replayed in time order against its open wait. A batch that ends before the
newest message takes the replies sent up to its last message's time; the rest wait for the
next batch, so a reply is never placed before messages received earlier.

A conversation the facts have never seen (a new one, or one of an account that moved here and
brought its old rows under new message ids) has all its sent replies read, not only the recent:
a moved account's facts are counted again on its new shard from the rows it brought
(runtime.placement.slices moves only `report_event`, which nothing else could rebuild).
Another shop zone (settings.timezone changed) rebuilds them all: hours and days are the zone's.
It forgets the state first, so that facts and summaries are deleted wholesale (V24's delete
triggers take from summaries only while facts are kept): 10^6 messages' take seconds, not the
tens of seconds a row at a time would hold the write lock for.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any
from zoneinfo import ZoneInfo

from pydantic import BaseModel

from runtime.operators.reports.periods import ZoneClock
from runtime.store import DeliveryStore, now_ms
from runtime.store.connection import Connection
from runtime.store.queries import reply_wait, report, report_activity, report_event, report_state

BATCH = 50_000  # buyer messages per transaction
LAG_MS = 60_000  # replies sent this long before the last catch-up are looked at again (clock steps)


class CatchUp(BaseModel):
    """What one catch-up did."""

    messages: int = 0  # buyer messages counted
    replies: int = 0  # replies placed
    transactions: int = 0
    rebuilt: bool = False  # the facts were of another zone and were made again


@dataclass
class _Standing:
    """A conversation as the facts hold it: its open wait and its latest wait's start."""

    open_id: int | None = None
    open_at: int | None = None
    open_first: bool = False
    last_start: int | None = None
    known: bool = False


@dataclass
class _Writes:
    """What a transaction of the catch-up writes."""

    clock: ZoneClock
    waits: list[tuple[Any, ...]] = field(default_factory=list)  # reply_wait.INSERT rows
    answers: list[tuple[Any, ...]] = field(default_factory=list)  # reply_wait.ANSWER rows
    activity: dict[tuple[int, int], list[Any]] = field(default_factory=dict)  # (customer, hour) -> ADD row


def reply_seconds(ms: int) -> int:
    """A reply time as it is counted: whole seconds rounded up, to the second up to 2 minutes,
    to 5 s up to 10 minutes, to 30 s up to an hour, to 5 minutes beyond (a day's counts stay a
    few hundred rows however long operators take; "within 3 minutes" stays exact)."""
    seconds = (ms + 999) // 1000
    for limit, step in ((120, 1), (600, 5), (3600, 30)):
        if seconds <= limit:
            return -(-seconds // step) * step
    return -(-seconds // 300) * 300


def catch_up(store: DeliveryStore, zone: ZoneInfo, batch: int = BATCH) -> CatchUp:
    """Bring the facts up to the store's rows. A store with nothing new is only read."""
    done = CatchUp()
    if not _anything_new(store, zone):
        return done
    while True:
        with store.write() as conn:
            final = _step(conn, zone, batch, done)
        if final:
            return done


def _anything_new(store: DeliveryStore, zone: ZoneInfo) -> bool:
    with store.read() as conn:
        state = conn.execute(report_state.READ).first()
        if state is None or state[0] != zone.key:
            return True
        return bool(conn.execute(report.ANYTHING_NEW, {"after": state[1], "since": state[2] - LAG_MS}).scalar())


def _step(conn: Connection, zone: ZoneInfo, batch: int, done: CatchUp) -> bool:
    """One transaction of the catch-up; True when it reached the newest rows."""
    state = conn.execute(report_state.READ).first()
    if state is None or state[0] != zone.key:
        conn.execute(report_state.FORGET)  # first: deleting facts wholesale, nothing to take from summaries
        for statement in (*report_activity.DELETE_ALL, *reply_wait.DELETE_ALL, report_event.FORGET_HOURS):
            conn.execute(statement)
        done.rebuilt = state is not None
        after, sent = 0, 0
    else:
        after, sent = int(state[1]), int(state[2])
    messages = conn.execute(report.BUYER_MESSAGES_AFTER, {"after": after, "n": batch}).all()
    final = len(messages) < batch
    horizon = now_ms() if final else int(messages[-1][3])
    mark = max(after, int(conn.execute(report.LAST_MESSAGE_ID).scalar_one())) if final else int(messages[-1][0])
    replies = conn.execute(report.REPLIES_SENT_BETWEEN, {"after": sent - LAG_MS, "until": horizon}).all()
    touched = sorted({int(m[1]) for m in messages} | {int(r[0]) for r in replies})
    standing = _standing(conn, touched)
    unseen = sorted({int(m[1]) for m in messages if not standing[int(m[1])].known})
    if unseen:
        placed = {r[2] for r in replies}
        found = conn.execute(report.REPLIES_SENT_TO, {"customers": json.dumps(unseen), "until": horizon}).all()
        replies += [r for r in found if r[2] not in placed]
    writes = _replay(messages, replies, standing, ZoneClock(zone))
    conn.executemany(reply_wait.ANSWER, writes.answers)
    conn.executemany(reply_wait.INSERT, writes.waits)
    conn.executemany(report_activity.ADD, [(c, h, *rest) for (c, h), rest in writes.activity.items()])
    conn.execute(report_state.SAVE, {"zone": zone.key, "m": mark, "s": horizon, "at": now_ms()})
    done.messages += len(messages)
    done.replies += len(replies)
    done.transactions += 1
    return final


def _standing(conn: Connection, customers: list[int]) -> dict[int, _Standing]:
    found: dict[int, _Standing] = defaultdict(_Standing)
    if customers:
        rows = conn.execute(reply_wait.STANDING, {"customers": json.dumps(customers)})
        for customer, open_id, open_at, open_first, last_start, known in rows:
            found[int(customer)] = _Standing(open_id, open_at, bool(open_first), last_start, bool(known))
    return found


def _replay(
    messages: list[tuple[Any, ...]], replies: list[tuple[Any, ...]], standing: dict[int, _Standing], clock: ZoneClock
) -> _Writes:
    """Each conversation's new messages and replies in time order, against its open wait: a
    buyer message opens a wait unless one is open; the next reply sent ends it."""
    events: dict[int, list[tuple[int, int, tuple[Any, ...]]]] = defaultdict(list)
    for row in messages:
        events[int(row[1])].append((int(row[3]), 0, row))  # a message before a reply of the same ms
    for row in replies:
        events[int(row[0])].append((int(row[5]), 1, row))
    writes = _Writes(clock)
    for customer, happened in events.items():
        happened.sort(key=lambda event: (event[0], event[1]))
        _replay_one(customer, happened, standing[customer], writes)
    return writes


def _replay_one(
    customer: int, happened: list[tuple[int, int, tuple[Any, ...]]], now: _Standing, writes: _Writes
) -> None:
    account = ""
    for at, kind, row in happened:
        if kind == 0:  # a buyer message: (id, customer, account, received_at)
            account = row[2]
            hour, day = writes.clock.starts(at)
            counted = writes.activity.setdefault((customer, hour), [account, day, 0])
            counted[2] += 1
            if now.open_at is None:
                now.open_first = now.last_start is None or now.last_start < day
                now.open_id, now.open_at, now.last_start = None, at, at
            continue
        _, account, request_id, origin, operator, _ = row  # a reply sent
        reply = (at, writes.clock.starts(at)[1])  # sent, on the day of
        if now.open_at is not None and at >= now.open_at:
            answer = (*reply, reply_seconds(at - now.open_at), origin, operator, request_id)
            if now.open_id is not None:
                writes.answers.append((*answer, now.open_id))
            else:
                day = writes.clock.starts(now.open_at)[1]
                writes.waits.append((customer, account, now.open_at, day, now.open_first, *answer))
            now.open_id = now.open_at = None
        else:
            writes.waits.append((customer, account, None, None, False, *reply, None, origin, operator, request_id))
    if now.open_at is not None and now.open_id is None:  # opened here, still waiting
        day = writes.clock.starts(now.open_at)[1]
        writes.waits.append((customer, account, now.open_at, day, now.open_first, None, None, None, None, None, None))
