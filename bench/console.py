"""Console page load time on a full store: 10,000 customers and 100,000 messages by default.

The store is filled through the ingest path as pages of a minute's messages, spread over
`--days` days that end yesterday in the shop's zone: each customer writes every day, in bursts
of one to five lines, and each burst gets a reply that was sent (mostly the agent's within a
minute, some an operator's within fifteen, a few none); one burst in a hundred is handed off by
the agent and resolved by an operator (runtime functions: the handling pause, the resolve). The
replies are written as sent requests with their attempt (`insert_named`, the row models' own
inserts) rather than sent one by one: three transactions a reply would make the fill of 10^6
messages take an hour. Every hundredth conversation is assigned to the bench's operator.

Then the console app (worker.console) is served by uvicorn on loopback and each page is fetched
over HTTP, signed in, several times: the first page of the list, a page deep in the list (by
cursor), its filters (mine, unassigned, open), a literal search, one conversation, its live
stream's first event, one update of the live list (its stream's first event: the list read
again, drawn, and the operator's attention counted: what every open list pays per change of
the store), and the reports (yesterday's page and CSV, the whole fill's page, and
yesterday's page again after each of the repeats stored 100 new messages, so that its
catch-up is in the time), and the live list's latency: from a page of new messages committed
to an open list's stream sending its rows again. The baseline in the same run is the console's `/healthz` (the HTTP
and app overhead with no store read). The report facts are built once after the fill, timed
apart (the catch-up a first report on an existing store pays once), and so is the search index
(runtime.customers.search_index): a search of three characters or more reads it, one of two
scans its rows (`发票`, which no message says: every row is read).

    python -m bench.console [--customers 10000] [--messages 100000] [--days 10] [--repeat 20]
"""

from __future__ import annotations

import argparse
import queue
import random
import re
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from itertools import groupby
from pathlib import Path
from zoneinfo import ZoneInfo

import httpx
import uvicorn
from rich.console import Console
from rich.table import Table

from bench.growth import ACCOUNT
from config import load_settings
from runtime.accounts.registry import AccountSpec, create_account
from runtime.admission.handling import pause_handling
from runtime.admission.routes import RouteSpec, create_route
from runtime.customers import search_index
from runtime.customers.assignment import assign, resolve
from runtime.inbound.ingest import ingest_page
from runtime.inbound.pages import ConversationGroup, InboundMessage, InboundPage, Sender, TextContent
from runtime.operators.accounts import Role, add_operator
from runtime.operators.reports.facts import catch_up
from runtime.operators.reports.periods import midnight, today
from runtime.store.clock import clock_at
from runtime.store.states import AttemptState, OutboxState
from runtime.store.tables import OutboxAttempt, OutboxRequest, insert_named
from worker.console import create_app
from worker.context import WorkerRuntime

PASSWORD = "bench-password"
OPERATORS = ["ops-1", "ops-2", "ops-3", "ops-4", "ops-5"]
# How busy each hour of the shop's day is (a burst begins in hour h with weight HOURLY[h]).
HOURLY = [1, 1, 1, 1, 1, 1, 2, 4, 7, 10, 11, 10, 8, 9, 10, 10, 9, 8, 7, 8, 10, 11, 8, 4]


@dataclass(frozen=True)
class Burst:
    """A buyer's lines in a row (15 s apart) and what answered them."""

    customer: int  # 0-based: conversation b<customer>
    start_ms: int
    lines: int
    reply: str | None  # auto, manual, or None: nobody answered
    delay_ms: int  # after the burst's last line
    operator: str | None
    handoff: bool


def bursts(customers: int, messages: int, days: list[date], zone: ZoneInfo, rng: random.Random) -> list[Burst]:
    """`messages` lines over the days, every customer writing each day in bursts of 1-5."""
    per_day, extra = divmod(messages, len(days))
    out: list[Burst] = []
    for index, day in enumerate(days):
        begins = midnight(day, zone)
        left = per_day + (1 if index < extra else 0)
        for customer in range(customers):
            share = left // (customers - customer)
            left -= share
            sizes = []
            while share > 0:
                sizes.append(min(share, rng.randint(1, 5)))
                share -= sizes[-1]
            slots = _slots(len(sizes), rng)
            for size, slot in zip(sizes, slots, strict=True):
                start = begins + (slot // 2) * 3_600_000 + (slot % 2) * 1_800_000 + rng.randrange(600_000)
                out.append(_burst(customer, start, size, rng))
    return out


def _slots(count: int, rng: random.Random) -> list[int]:
    """`count` distinct half hours of the day, busy ones likelier: a burst begins in the first
    10 minutes of its half hour and its reply (15 minutes at the latest) comes before the next."""
    free = list(range(len(HOURLY) * 2))
    weights = [HOURLY[slot // 2] for slot in free]
    taken = []
    for _ in range(count):
        [index] = rng.choices(range(len(free)), weights)
        taken.append(free.pop(index))
        weights.pop(index)
    return sorted(taken)


def _burst(customer: int, start: int, lines: int, rng: random.Random) -> Burst:
    roll = rng.random()
    if roll < 0.02:
        return Burst(customer, start, lines, None, 0, None, False)
    if roll < 0.82:
        return Burst(customer, start, lines, "auto", rng.randint(3_000, 40_000), None, False)
    handoff = roll > 0.99
    return Burst(customer, start, lines, "manual", rng.randint(20_000, 900_000), rng.choice(OPERATORS), handoff)


def fill(runtime: WorkerRuntime, customers: int, messages: int, days: int, rng: random.Random) -> int:
    """The store as described above; returns the replies written."""
    zone = runtime.settings.zone
    last = today(zone) - timedelta(days=1)
    plan = bursts(customers, messages, [last - timedelta(days=n) for n in reversed(range(days))], zone, rng)
    lines = sorted((b.start_ms + n * 15_000, b.customer) for b in plan for n in range(b.lines))
    store, sent = runtime.store, 0
    for minute, said in groupby(lines, key=lambda line: line[0] // 60_000):
        page = _page(minute, list(said))
        with clock_at(minute * 60_000):
            ingest_page(store, page, admit_batch_size=runtime.settings.admission.batch_size)
    with store.read() as conn:
        ids = {str(c): int(i) for i, c in conn.execute("SELECT id, conversation_id FROM customer")}
    rows = [b for b in plan if b.reply is not None]
    with store.write() as conn:
        for number, burst in enumerate(rows):
            conn.execute(insert_named("outbox_request", OutboxRequest.model_fields), _request(burst, number, ids))
            conn.execute(insert_named("outbox_attempt", OutboxAttempt.model_fields), _attempt(burst, number))
            sent += 1
    for burst in (b for b in plan if b.handoff):
        customer = ids[f"b{burst.customer}"]
        with clock_at(burst.start_ms + 5_000):
            pause_handling(store, customer, "handoff: 常见问题里没有答案", handoff=True)
        with clock_at(_sent_at(burst) + 60_000):
            resolve(store, customer, burst.operator or OPERATORS[0])
    return sent


def _page(minute: int, said: list[tuple[int, int]]) -> InboundPage:
    occurred = datetime.fromtimestamp(minute * 60, tz=UTC)
    groups = []
    for customer, lines in groupby(sorted(said, key=lambda line: line[1]), key=lambda line: line[1]):
        messages = [
            InboundMessage(
                platform_message_id=f"m{at}-{customer}",
                sender=Sender(id=f"b{customer}", display_name=f"买家{customer}", role="buyer"),
                content=TextContent(text="在吗？这个什么时候发货"),
                occurred_at=occurred,
                direct_peer_id=f"b{customer}",
            )
            for at, _ in lines
        ]
        groups.append(ConversationGroup(conversation_id=f"b{customer}", conversation_type="direct", messages=messages))
    return InboundPage(
        account_id=ACCOUNT, stream_id="bench", cursor=str(minute), page_op_id=f"minute-{minute}", groups=groups
    )


def _sent_at(burst: Burst) -> int:
    return burst.start_ms + (burst.lines - 1) * 15_000 + burst.delay_ms


def _request(burst: Burst, number: int, ids: dict[str, int]) -> dict[str, object]:
    at = _sent_at(burst)
    request = OutboxRequest(
        request_id=f"r{number}",
        customer_id=ids[f"b{burst.customer}"],
        account_id=ACCOUNT,
        conversation_id=f"b{burst.customer}",
        recipient_id=f"b{burst.customer}",
        origin="manual" if burst.reply == "manual" else "auto",
        body="在的，请问有什么可以帮您？",
        operator=burst.operator,
        state=OutboxState.SENT,
        platform_message_id=f"p{number}",
        created_at=at - 1_000,
        updated_at=at,
    )
    return request.model_dump()


def _attempt(burst: Burst, number: int) -> dict[str, object]:
    at = _sent_at(burst)
    attempt = OutboxAttempt(
        request_id=f"r{number}",
        attempt_no=1,
        state=AttemptState.SENT,
        owner="bench",
        started_at=at - 500,
        finished_at=at,
        platform_message_id=f"p{number}",
    )
    return attempt.model_dump()


def serve(runtime: WorkerRuntime) -> tuple[uvicorn.Server, threading.Thread, str]:
    config = uvicorn.Config(create_app(runtime), host="127.0.0.1", port=0, log_level="warning")
    config.timeout_graceful_shutdown = 1
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    return server, thread, f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"


def timed(fetch: Callable[[], object], repeat: int, before: Callable[[int], object] = lambda n: None) -> list[float]:
    """`repeat` fetches after a first (warm: templates compiled, connections open); `before` runs
    untimed ahead of each."""
    response = fetch()
    if isinstance(response, httpx.Response):
        response.raise_for_status()
    times = []
    for n in range(repeat):
        before(n)
        began = time.perf_counter()
        response = fetch()
        times.append((time.perf_counter() - began) * 1000)
        if isinstance(response, httpx.Response):
            response.raise_for_status()
    return times


def first_event(client: httpx.Client, path: str) -> None:
    with client.stream("GET", path) as stream:
        for line in stream.iter_lines():
            if line.startswith("data:"):
                return


def live_list_latency(base: str, cookies: httpx.Cookies, store_page: Callable[[int], None], repeat: int) -> list[float]:
    """Milliseconds from a page of new messages committed to an open list's stream sending its
    rows again: the time an operator waits to see a buyer's message in the list. Each time a
    stream is opened on its own thread and connection, as a browser tab holds it, and the page
    is stored at a random moment of its polling (a stream asks every live.POLL_S)."""
    rng, times = random.Random(repeat), []
    for n in range(repeat):
        arrived: queue.Queue[float] = queue.Queue()
        listener = threading.Thread(target=_rows_events, args=(base, cookies, arrived), daemon=True)
        listener.start()
        arrived.get(timeout=120)  # the list as it is
        time.sleep(rng.uniform(0, 1))
        began = time.perf_counter()
        store_page(n)
        times.append((arrived.get(timeout=120) - began) * 1000)
        listener.join(10)
    return times


def _rows_events(base: str, cookies: httpx.Cookies, arrived: queue.Queue[float]) -> None:
    """Puts the time of the list stream's first two rows events on `arrived`."""
    with (
        httpx.Client(base_url=base, cookies=cookies, timeout=120) as own,
        own.stream("GET", "/events?source=simulation") as stream,
    ):
        event, left = "", 2
        for line in stream.iter_lines():
            if line.startswith("event:"):
                event = line.removeprefix("event:").strip()
            elif line.startswith("data:") and event == "rows":
                arrived.put(time.perf_counter())
                left -= 1
                if not left:
                    return


def new_messages(runtime: WorkerRuntime, customers: int, name: str = "new") -> Callable[[int], None]:
    """Stores a page of 100 new lines (of 100 customers) now: what a report's catch-up then reads."""

    def store_page(n: int) -> None:
        said = [(time.time_ns() // 1_000_000, (n * 100 + i) % customers) for i in range(100)]
        minute = said[0][0] // 60_000
        page = _page(minute, said).model_copy(update={"page_op_id": f"{name}-{n}"})
        ingest_page(runtime.store, page, admit_batch_size=runtime.settings.admission.batch_size)

    return store_page


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--customers", type=int, default=10_000)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--days", type=int, default=10, help="the days the messages spread over (1-31)")
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--seed", type=int, default=41)
    args = parser.parse_args()
    console = Console()
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:
        runtime = WorkerRuntime(load_settings(data_dir=Path(tmp)))
        zone = runtime.settings.zone
        create_account(runtime.store, AccountSpec(id=ACCOUNT, platform="simulator", identity="bench"))
        create_route(runtime.store, RouteSpec(id="all", account_id=ACCOUNT, conversation_type="direct"), op_id="r")
        add_operator(runtime.store, "bench", Role.OPERATOR, PASSWORD)
        for name in OPERATORS:
            add_operator(runtime.store, name, Role.OPERATOR, PASSWORD)
        began = time.perf_counter()
        replies = fill(runtime, args.customers, args.messages, args.days, random.Random(args.seed))
        with runtime.store.read() as conn:
            written = [int(row[0]) for row in conn.execute("SELECT id FROM customer ORDER BY id")]
        for customer in written[::100]:  # fewer messages than customers a day leaves some silent
            assign(runtime.store, customer, "bench", "bench")
        console.print(
            f"filled: {args.customers:,} customers, {args.messages:,} messages, {replies:,} replies over"
            f" {args.days} days in {time.perf_counter() - began:.0f} s"
        )
        began = time.perf_counter()
        built = catch_up(runtime.store, zone)
        console.print(
            f"report facts built: {built.messages:,} messages and {built.replies:,} replies in"
            f" {built.transactions} transactions, {time.perf_counter() - began:.1f} s"
            " (once: later catch-ups read what is new)"
        )
        began = time.perf_counter()
        indexed = search_index.catch_up(runtime.store)
        console.print(f"search index built: {indexed:,} messages, {time.perf_counter() - began:.1f} s (once, too)")
        yesterday = today(zone) - timedelta(days=1)
        first = yesterday - timedelta(days=min(args.days, 31) - 1)
        day = f"from={yesterday}&to={yesterday}&source=simulation"
        server, thread, base = serve(runtime)
        try:
            with httpx.Client(base_url=base, follow_redirects=True, timeout=120) as client:
                token = re.search(r'name="csrf" value="([^"]+)"', client.get("/login").text)[1]  # type: ignore[index]
                client.post("/login", data={"csrf": token, "name": "bench", "password": PASSWORD})
                deep = client.get("/?source=simulation")
                depth = min(20, args.customers // 50 - 1)  # pages of 50 in: a cursor up to 1,000 rows deep
                for _ in range(depth):
                    deep = client.get(re.search(r'id="older" href="([^"]+)"', deep.text)[1].replace("&amp;", "&"))  # type: ignore[index]
                deep_url = str(deep.url)
                pages: dict[str, Callable[[], object]] = {
                    "/healthz (baseline)": lambda: client.get("/healthz"),
                    "list, first page (50 rows)": lambda: client.get("/?source=simulation"),
                    f"list, {depth * 50:,} rows deep": lambda: client.get(deep_url),
                    "list, mine": lambda: client.get("/?source=simulation&view=mine"),
                    "list, unassigned": lambda: client.get("/?source=simulation&view=unassigned"),
                    "list, open": lambda: client.get("/?source=simulation&status=open"),
                    "list, literal search": lambda: client.get("/?source=simulation&q=买家1234"),
                    "list, search of two characters": lambda: client.get("/?source=simulation&q=发票"),
                    "conversation": lambda: client.get("/c/1"),
                    "live stream, first event": lambda: first_event(client, "/c/1/events"),
                    # What each open list pays per change of the store: its page read again,
                    # drawn, and the operator's attention counted.
                    "live list, one update": lambda: first_event(client, "/events?source=simulation"),
                    "reports, a day": lambda: client.get(f"/reports?{day}"),
                    "reports.csv, a day": lambda: client.get(f"/reports.csv?{day}"),
                    f"reports, {(yesterday - first).days + 1} days": lambda: client.get(
                        f"/reports?from={first}&to={yesterday}&source=simulation"
                    ),
                }
                results = {name: timed(fetch, args.repeat) for name, fetch in pages.items()}
                results["reports, a day, after 100 new messages"] = timed(
                    lambda: client.get(f"/reports?{day}"), args.repeat, new_messages(runtime, args.customers)
                )
                results["live list, a new message to its event"] = live_list_latency(
                    base, client.cookies, new_messages(runtime, args.customers, "live"), args.repeat
                )
                shown = client.get(f"/reports?{day}").text
                figure = re.search(r'id="total-messages">(\d+)<', shown)
        finally:
            server.should_exit = True
            thread.join(10)
    baseline = statistics.median(results["/healthz (baseline)"])
    table = Table("page", "p50 ms", "max ms", "p50 / baseline", title=f"console pages, {args.repeat} fetches each")
    for name, times in results.items():
        median = statistics.median(times)
        table.add_row(name, f"{median:.1f}", f"{max(times):.1f}", f"{median / baseline:.1f}x")
    console.print(table)
    console.print(f"the day's report shows {figure[1] if figure else '?'} buyer messages ({yesterday})")


if __name__ == "__main__":
    main()
