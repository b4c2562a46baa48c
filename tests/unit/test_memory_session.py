"""The memory engine inside agent turns: archive cuts, the session surface, crash adoption,
recall into the system prompt (restored byte for byte), re-archive of recalled blocks."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from config import Settings
from runtime.admission.batches import evaluate
from runtime.agent.rules import RulesProvider, load_knowledge
from runtime.agent.script_clock import REAL_TIME, ConversationClock
from runtime.agent.session_log import SessionLog
from runtime.agent.sessions import session_path
from runtime.agent.turn import TurnResult, run_turn
from runtime.agent.view import model_view, system_text
from runtime.customers.erasure import erase_customer
from runtime.inbound.ingest import ingest_page
from runtime.memory.engine import MemoryEngine, SessionMemory, archive, block_entries, rearchive, scope_of
from runtime.memory.jobs import SessionJobs, archive_job, score_scope
from runtime.memory.recall import load_state
from runtime.memory.store import MemoryStore
from runtime.store import DeliveryStore
from transports.simulator import SimulatedPlatform, SimulatorTransport

KNOWLEDGE = load_knowledge(None)
EARLY = [
    "你好，在吗？",
    "今天下单什么时候发货？",
    "发什么快递？",
    "可以开发票吗",
    "这款是什么材质的？",
    "有优惠券吗",
    "能用花呗分期吗？",
    "枕套的尺寸多大？",
    "收到有破损怎么办",
    "好的，谢谢",
]


def engine(
    settings: Settings, window: int = 1000, allow_small: bool = True, model_scores: bool = False
) -> MemoryEngine:
    memory = settings.memory.model_copy(update={"allow_small_window": allow_small})
    return MemoryEngine(MemoryStore(settings.memory_path), memory, window, settings.zone, model_scores)


def say_and_turn(
    store: DeliveryStore,
    settings: Settings,
    transport: SimulatorTransport,
    platform: SimulatedPlatform,
    memory: MemoryEngine,
    text: str,
) -> tuple[int, TurnResult]:
    message = platform.buyer_says("shop", "b1", "张三", text)
    customer = ingest_page(store, transport.page_of("shop", [message])).customer_ids[0]
    evaluate(store, customer, 1000)
    result = run_turn(
        store, RulesProvider(KNOWLEDGE), customer, settings.sessions_dir, settings.zone, settings.agent,
        memory_engine=memory,
    )  # fmt: skip
    assert result is not None
    if result.archive_due:  # what the kefu.memory.archive task does after the turn
        SessionJobs(store, settings.sessions_dir, memory, 60).run(customer, archive_job)
    return customer, result


def session_of(result: TurnResult) -> str:
    assert result.session_id is not None
    return result.session_id


def session(settings: Settings, result: TurnResult) -> SessionLog:
    log = SessionLog(session_path(settings.sessions_dir, session_of(result)))
    log.load()
    return log


def converse(
    store: DeliveryStore,
    settings: Settings,
    transport: SimulatorTransport,
    platform: SimulatedPlatform,
    memory: MemoryEngine,
    texts: list[str],
) -> tuple[int, TurnResult]:
    turns = [say_and_turn(store, settings, transport, platform, memory, text) for text in texts]
    return turns[-1]


def test_old_turns_are_archived_whole_and_the_surface_gets_one_merged_note(
    store: DeliveryStore, settings: Settings, shop: str, transport: SimulatorTransport, platform: SimulatedPlatform
) -> None:
    memory = engine(settings)
    customer, result = converse(store, settings, transport, platform, memory, EARLY)
    log = session(settings, result)
    archives = [e for e in log.events if e.type == "memory/archive"]
    assert len(archives) >= 2
    starts = {e.seq for e in log.events if e.type == "turn/start"}
    assert all(e.upto in starts for e in archives)  # cut at whole turns: no tool pair split
    assert archives[-1].upto <= max(starts)  # never the latest turn
    folders = memory.store.folders(scope_of(customer))
    assert archives[-1].segments == len(folders) == sum(e.folders for e in archives)
    assert all(f.scored and f.score_source == "heuristic" for f in folders)
    view = model_view(log)
    system = view[0].content
    assert system.count("[memory]") == 1 and f"[memory] {len(folders)} earlier segments archived" in system
    archived_text = "".join(memory.store.text(f.id) for f in folders)
    for text in EARLY[:2]:
        assert text in archived_text and all(text not in m.content for m in view[1:])
    assert any(EARLY[-1] in m.content for m in view[1:])
    answered = {m.tool_call_id for m in view if m.role == "tool"}
    assert all(c.id in answered for m in view for c in m.tool_calls)
    assert all(m.role != "tool" or m.tool_call_id in {c.id for v in view for c in v.tool_calls} for m in view)


def test_a_small_window_is_not_archived_unless_allowed(
    store: DeliveryStore, settings: Settings, shop: str, transport: SimulatorTransport, platform: SimulatedPlatform
) -> None:
    memory = engine(settings, allow_small=False)
    customer, result = converse(store, settings, transport, platform, memory, EARLY)
    assert memory.store.folders(scope_of(customer)) == []
    log = session(settings, result)
    log.open_for_append()
    assert archive(log, session_of(result), memory.session(customer), 60).reason == "small-window"


def test_archiving_stops_after_two_episodes_above_the_hard_limit(
    store: DeliveryStore, settings: Settings, shop: str, transport: SimulatorTransport, platform: SimulatedPlatform
) -> None:
    memory = engine(settings, window=100_000)
    customer, result = converse(store, settings, transport, platform, memory, EARLY[:3])
    log = session(settings, result)
    log.open_for_append()
    for _ in range(2):
        log.append("memory/archive", plan_id="x", upto=0, folders=0, segments=0, after_percent=120.0, note="")
    small = engine(settings, window=1000).session(customer)
    assert archive(log, session_of(result), small, 10).reason == "hard-limit"


class CrashOnArchiveEvent(SessionLog):
    def flush(self) -> bool:
        if any(e.type == "memory/archive" for e in self._pending):
            raise RuntimeError("power cut")
        return super().flush()


def test_folders_committed_before_a_crash_are_adopted_not_archived_twice(
    store: DeliveryStore, settings: Settings, shop: str, transport: SimulatorTransport, platform: SimulatedPlatform
) -> None:
    memory = engine(settings, window=100_000)  # large: nothing archives during the turns
    customer, result = converse(store, settings, transport, platform, memory, EARLY[:4])
    path = session_path(settings.sessions_dir, session_of(result))
    small = engine(settings).session(customer)
    crashing = CrashOnArchiveEvent(path)
    crashing.open_for_append()
    with pytest.raises(RuntimeError, match="power cut"):
        archive(crashing, session_of(result), small, 30)
    made = memory.store.folders(scope_of(customer))
    assert made and not any(e.type == "memory/archive" for e in SessionLog(path).load())
    log = SessionLog(path)
    log.open_for_append()
    outcome = archive(log, session_of(result), small, 30)
    assert (outcome.reason, outcome.folders) == ("adopted", len(made))
    assert memory.store.folders(scope_of(customer)) == made  # no second plan
    assert [e.type for e in SessionLog(path).load()].count("memory/archive") == 1


def test_a_later_question_recalls_a_scored_memory_into_the_system_prompt(
    store: DeliveryStore, settings: Settings, shop: str, transport: SimulatorTransport, platform: SimulatedPlatform
) -> None:
    memory = engine(settings)
    customer, _ = converse(store, settings, transport, platform, memory, EARLY)
    scope = scope_of(customer)
    archived = {f.id: memory.store.text(f.id) for f in memory.store.folders(scope)}
    assert any("快递" in text for text in archived.values())
    _, result = say_and_turn(store, settings, transport, platform, memory, "之前说的快递，改发顺丰要补运费吗？")
    log = session(settings, result)
    recall = [e for e in log.events if e.type == "memory/recall"][-1]
    picked = [entry["folder_id"] for entry in recall.entries]
    assert picked and all("快递" in archived[i] or "顺丰" in archived[i] for i in picked)
    system = model_view(log)[0].content
    assert "[长期记忆]" in system and all(f'id="{i}"' in system for i in picked)
    assert archived[picked[0]].rstrip() in system
    restarted = SessionLog(session_path(settings.sessions_dir, session_of(result)))
    restarted.load()
    assert system_text(restarted) == system_text(log)  # byte for byte after a restart
    assert load_state(memory.store, scope).block == picked


def test_a_memory_asked_about_again_stays_in_the_block_once_and_no_new_recall_is_logged(
    store: DeliveryStore, settings: Settings, shop: str, transport: SimulatorTransport, platform: SimulatedPlatform
) -> None:
    memory = engine(settings, window=50_000)  # room for both rounds' picks
    customer, _ = converse(store, settings, transport, platform, engine(settings), EARLY)
    _, first = say_and_turn(store, settings, transport, platform, memory, "之前说的快递，改发顺丰要补运费吗？")
    log = session(settings, first)
    picked = [e.folder_id for e in block_entries(log)]
    recalls = sum(e.type == "memory/recall" for e in log.events)
    assert picked
    _, again = say_and_turn(store, settings, transport, platform, memory, "之前说的快递，改发顺丰要补运费吗？")
    log = session(settings, again)
    assert [e.folder_id for e in block_entries(log)] == picked  # kept, each once
    assert sum(e.type == "memory/recall" for e in log.events) == recalls  # nothing new: no new block text
    _, other = say_and_turn(store, settings, transport, platform, memory, "发票确认收货后怎么申请？")
    held = [e.folder_id for e in block_entries(session(settings, other))]
    assert len(held) == len(set(held)) and set(picked) <= set(held)  # earlier picks kept while room remains
    assert load_state(memory.store, scope_of(customer)).block == held


def test_rearchive_trims_old_recalled_blocks_first_and_marks_them_for_review(
    store: DeliveryStore, settings: Settings, shop: str, transport: SimulatorTransport, platform: SimulatedPlatform
) -> None:
    customer, _ = converse(store, settings, transport, platform, engine(settings), EARLY)
    memory = engine(settings, window=50_000)  # the recall block's limits leave both recalls in
    say_and_turn(store, settings, transport, platform, memory, "之前说的快递，改发顺丰要补运费吗？")
    _, result = say_and_turn(store, settings, transport, platform, memory, "发票确认收货后怎么申请？")
    log = session(settings, result)
    log.open_for_append()
    entries = block_entries(log)
    latest = [e.turn for e in log.events if e.type == "turn/start"][-1]
    older = [e.folder_id for e in entries if e.turn != latest]
    newer = [e.folder_id for e in entries if e.turn == latest]
    assert older, "an earlier turn's recall must be in the block"
    trimmed, removed = rearchive(log, memory.session(customer), target=10**9)
    assert trimmed == len(older) and removed > 0
    assert [e.folder_id for e in block_entries(log)] == newer  # this turn's picks stay
    review = [f.id for f in memory.store.folders(scope_of(customer)) if f.review]
    assert sorted(review) == sorted(older)
    high = {f.id for f in memory.store.folders(scope_of(customer)) if f.alpha >= 0.6}
    assert set(load_state(memory.store, scope_of(customer)).ledger) == set(older) & high  # for the boost lane
    score_scope(memory.session(customer))  # the heuristic re-reviews them
    assert not any(f.review for f in memory.store.folders(scope_of(customer)))


def test_the_rearchive_task_trims_through_the_worker_shell(
    store: DeliveryStore, settings: Settings, shop: str, transport: SimulatorTransport, platform: SimulatedPlatform
) -> None:
    from worker.celery_app import make_app

    customer, _ = converse(store, settings, transport, platform, engine(settings), EARLY)
    memory = engine(settings, window=50_000)
    say_and_turn(store, settings, transport, platform, memory, "之前说的快递，改发顺丰要补运费吗？")
    _, result = say_and_turn(store, settings, transport, platform, memory, "发票确认收货后怎么申请？")
    before = block_entries(session(settings, result))
    configured = settings.model_copy(
        update={
            "agent": settings.agent.model_copy(update={"context_window_tokens": 50_000}),
            "memory": settings.memory.model_copy(update={"allow_small_window": True}),
        }
    )
    trimmed = int(make_app(configured).tasks["kefu.memory.rearchive"].apply(args=[customer]).get())
    after = block_entries(session(settings, result))
    assert trimmed >= 1 and len(after) == len(before) - trimmed
    latest = [e.turn for e in session(settings, result).events if e.type == "turn/start"][-1]
    assert all(e in after for e in before if e.turn == latest)  # this turn's picks stay
    assert all(f.scored and not f.review for f in memory.store.folders(scope_of(customer)))  # rescored


def test_the_rules_agent_never_reuses_a_request_id_after_archiving(
    store: DeliveryStore, settings: Settings, shop: str, transport: SimulatorTransport, platform: SimulatedPlatform
) -> None:
    memory = engine(settings)
    texts = EARLY + ["有优惠券吗", "可以开发票吗"]
    converse(store, settings, transport, platform, memory, texts)
    with store.read() as conn:
        sends = conn.execute("SELECT COUNT(*) FROM outbox_request").scalar_one()
        batches = conn.execute("SELECT COUNT(*) FROM admission_batch").scalar_one()
    assert sends == batches == len(texts)


PNG = b"\x89PNG\r\n\x1a\n" + b"\0" * 64


def test_an_archived_image_becomes_a_placeholder_and_a_file_memory_image_finds(
    settings: Settings, tmp_path: Path
) -> None:
    from runtime.agent.tools import TurnBinding, execute
    from runtime.memory.tools import MEMORY_TOOLS
    from runtime.ports import ToolCall

    attachments = tmp_path / "attachments"
    attachments.mkdir()
    (attachments / "size-chart.png").write_bytes(PNG)
    memory = MemoryEngine(
        MemoryStore(settings.memory_path),
        settings.memory.model_copy(update={"allow_small_window": True}),
        1000,
        settings.zone,
        model_scores=False,
        images_dir=settings.memory_images_dir,
        attachments_dir=attachments,
    )
    log = SessionLog(tmp_path / "s1.jsonl.zst")
    log.append("system/message", text="persona")
    for n, text in enumerate(["四件套的尺寸表有吗？", "那床单呢？"]):
        log.append("turn/start", turn=f"t{n}", batch_id=f"b{n}", kind="batch")
        log.append("user/message", source=f"b{n}", text=f"[2025-03-03 12:00] [counterpart 张三] {text}")
        arguments = json.dumps({"text": "尺寸表请看图", "attachments": ["size-chart.png"]}, ensure_ascii=False)
        log.append(
            "assistant/message",
            text="",
            tool_calls=[{"id": f"c{n}", "name": "im_send_message", "arguments": arguments}],
        )
        log.append("tool/call", call_id=f"c{n}", name="im_send_message")
        log.append("tool/result", call_id=f"c{n}", name="im_send_message", content="Queued", is_error=False)
        log.append("turn/end", turn=f"t{n}", outcome="complete")
    log.flush()
    outcome = archive(log, "s1", memory.session(1), 0)
    assert outcome.reason == "archived" and outcome.folders == 1
    folder = memory.store.folders(scope_of(1))[0]
    text = memory.store.text(folder.id)
    assert "[图片：（size-chart.png）]" in text and "Queued" not in text and "四件套的尺寸表有吗" in text
    assert folder.title == "四件套的尺寸表有吗？"  # the buyer's words, not the line labels
    (image,) = memory.store.images(scope_of(1))
    assert image.exists and Path(image.path).read_bytes() == PNG and image.mime == "image/png"
    binding = TurnBinding(
        store=None,  # type: ignore[arg-type]
        customer=None,  # type: ignore[arg-type]
        batch=None,  # type: ignore[arg-type]
        session_id="s1",
        account_revision=0,
        zone=settings.zone,
    )
    binding.memory = memory.session(1)
    found = execute(binding, ToolCall(id="x", name="memory_image", arguments='{"name": "size"}'), MEMORY_TOOLS)
    assert image.path in found.content and "exists=True" in found.content
    missing = execute(binding, ToolCall(id="y", name="memory_image", arguments='{"name": "nope"}'), MEMORY_TOOLS)
    assert missing.content == "No archived image matches."


def small_chunks(memory: MemoryEngine, settings: Settings, **limits: int) -> MemoryEngine:
    """The same store, a 1000-token window and 100-character folders, with these limits."""
    update = {"allow_small_window": True, "target_chunk_chars": 100, **limits}
    return MemoryEngine(memory.store, settings.memory.model_copy(update=update), 1000, settings.zone, False)


def test_an_archive_that_would_pass_the_folder_cap_takes_fewer_turns(
    store: DeliveryStore, settings: Settings, shop: str, transport: SimulatorTransport, platform: SimulatedPlatform
) -> None:
    memory = engine(settings, window=100_000)
    customer, result = converse(store, settings, transport, platform, memory, EARLY)
    log = session(settings, result)
    log.open_for_append()
    capped = small_chunks(memory, settings, max_folders_per_run=3)
    outcome = archive(log, session_of(result), capped.session(customer), 10)
    assert outcome.reason == "archived" and 1 <= outcome.folders <= 3
    (event,) = [e for e in log.all_events if e.type == "memory/archive"]
    assert event.upto in {e.seq for e in log.all_events if e.type == "turn/start"}


def test_an_archive_past_the_customers_folder_cap_is_refused_whole(
    store: DeliveryStore, settings: Settings, shop: str, transport: SimulatorTransport, platform: SimulatedPlatform
) -> None:
    roomy = engine(settings, window=100_000)
    customer, result = converse(store, settings, transport, platform, roomy, EARLY)
    log = session(settings, result)
    log.open_for_append()
    events_before = len(log.all_events)
    capped = small_chunks(roomy, settings, max_folders=2)
    outcome = archive(log, session_of(result), capped.session(customer), 10)
    assert outcome.reason == "folder-cap"
    assert roomy.store.folders(scope_of(customer)) == [] and len(log.all_events) == events_before  # nothing half-done
    assert roomy.store.telemetry(scope_of(customer), "archive-refused")[0]["reason"] == "folder-cap"
    opened = small_chunks(roomy, settings, max_folders=10_000)
    assert archive(log, session_of(result), opened.session(customer), 10).reason == "archived"


def test_a_memory_job_of_a_customer_erased_before_it_holds_the_lease_finds_no_session(
    store: DeliveryStore, settings: Settings, shop: str, transport: SimulatorTransport, platform: SimulatedPlatform
) -> None:
    memory = engine(settings)
    customer, result = say_and_turn(store, settings, transport, platform, memory, EARLY[0])

    @dataclass(frozen=True)
    class ErasedMeanwhile(MemoryEngine):
        """The engine as configured; an erasure runs while the job prepares, before its lease."""

        def session(self, customer_id: int, clock: ConversationClock = REAL_TIME) -> SessionMemory:
            erase_customer(store, self.store, settings.sessions_dir, None, customer_id, "tester")
            return super().session(customer_id, clock)

    erasing = ErasedMeanwhile(memory.store, memory.settings, memory.window_tokens, memory.zone, memory.model_scores)
    ran: list[str] = []
    jobs = SessionJobs(store, settings.sessions_dir, erasing, 60)
    assert jobs.run(customer, lambda log, session_id, _: ran.append(session_id)) == "no-session"
    assert ran == [] and not session_path(settings.sessions_dir, session_of(result)).exists()  # not made again
    assert jobs.run(customer, archive_job) == "no-session"  # and once it is gone before the job looks
