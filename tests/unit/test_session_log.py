"""Session log: zstd frames, contiguous seq, torn last frame ignored, crash closers, one model
per event type with the JSON on disk as it always was."""

from __future__ import annotations

import gc
import json
from pathlib import Path
from typing import Any, get_args

import pytest
import zstandard
from pydantic import ValidationError

from runtime.agent.repair import repair
from runtime.agent.session_log import (
    SESSION_EVENT,
    AssistantMessage,
    CorruptSessionLog,
    EventType,
    ExtensionEvent,
    KnownEvent,
    MemoryRecall,
    SessionEvent,
    SessionLog,
    SystemMessage,
    ToolResult,
    TurnEnd,
    TurnStart,
    UserMessage,
    batch_turns,
    event_line,
)
from runtime.agent.view import model_view
from runtime.store.clock import clock_at
from runtime.store.lru import Lru


def test_flush_reports_durability_and_frames_read_back(tmp_path: Path) -> None:
    log = SessionLog(tmp_path / "s.jsonl.zst")
    assert log.flush() is False
    log.append("turn/start", turn="t0", batch_id="b1", kind="batch")
    log.append("user/message", source="b1", text="[2026-11-30 14:05] [counterpart 张三] 你好")
    assert log.offset == 2
    assert log.flush() is True
    log.append("turn/end", turn="t0", outcome="complete")
    log.flush()
    events = SessionLog(log.path).load()
    assert [e.seq for e in events] == [0, 1, 2]
    assert isinstance(events[1], UserMessage) and events[1].text.endswith("你好")


def test_a_torn_last_frame_is_ignored_then_truncated_before_appending(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl.zst"
    log = SessionLog(path)
    log.append("turn/start", turn="t0", batch_id="b1", kind="batch")
    log.flush()
    good_size = path.stat().st_size
    log.append("user/message", source="b1", text="被截断的帧")
    log.flush()
    with open(path, "r+b") as handle:  # a crash mid-write: the second frame is cut short
        handle.truncate(good_size + (path.stat().st_size - good_size) // 2)
    reader = SessionLog(path)
    assert [e.type for e in reader.load()] == ["turn/start"]
    assert reader.torn_bytes > 0
    writer = SessionLog(path)
    writer.open_for_append()
    assert path.stat().st_size == good_size
    writer.append("turn/end", turn="t0", outcome="interrupted")
    writer.flush()
    assert [e.seq for e in SessionLog(path).load()] == [0, 1]


@pytest.mark.parametrize("seq", [-1, 1.5, "2"])
def test_seq_must_be_a_non_negative_integer(seq: object) -> None:
    with pytest.raises(ValidationError):
        SESSION_EVENT.validate_python({"seq": seq, "type": "system/message", "at": 0, "text": ""})


def _closer(event: SessionEvent) -> tuple[str, str | None]:
    if isinstance(event, ToolResult):
        return event.type, event.code
    return event.type, event.outcome if isinstance(event, TurnEnd) else None


def test_repair_closes_an_interrupted_turn_without_running_tools(tmp_path: Path) -> None:
    log = SessionLog(tmp_path / "s.jsonl.zst")
    log.append("turn/start", turn="t0", batch_id="b1", kind="batch")
    log.append("step/start", turn="t0", step=0)
    calls = [
        {"id": "c1", "name": "im_send_message", "arguments": "{}"},
        {"id": "c2", "name": "im_send_message", "arguments": "{}"},
    ]
    log.append("assistant/message", text="", tool_calls=calls)
    log.append("tool/call", call_id="c1", name="im_send_message")
    log.flush()
    reopened = SessionLog(log.path)
    reopened.open_for_append()
    assert repair(reopened) is True
    tail = [_closer(e) for e in SessionLog(log.path).load()[4:]]
    assert tail == [
        ("tool/result", "TOOL_OUTCOME_UNKNOWN"),
        ("tool/result", "TOOL_NOT_STARTED"),
        ("step/end", None),
        ("turn/end", "interrupted"),
    ]
    assert repair(reopened) is False  # a closed tail needs nothing more


def test_repairing_the_same_log_twice_writes_the_same_closers(tmp_path: Path, monkeypatch) -> None:
    log = SessionLog(tmp_path / "s.jsonl.zst")
    log.append("turn/start", turn="t0", batch_id="b1", kind="batch")
    log.append("step/start", turn="t0", step=0)
    log.append("assistant/message", text="", tool_calls=[{"id": "c1", "name": "im_handoff", "arguments": "{}"}])
    log.flush()
    copy = tmp_path / "copy.jsonl.zst"
    copy.write_bytes(log.path.read_bytes())
    repaired = []
    for path, clock in ((log.path, 10**13), (copy, 2 * 10**13)):  # two repairs, at two different times
        with clock_at(clock):
            reopened = SessionLog(path)
            reopened.open_for_append()
            repair(reopened)
        repaired.append(path.read_bytes())
    assert repaired[0] == repaired[1]
    closers = SessionLog(log.path).load()[3:]
    assert [e.type for e in closers] == ["tool/result", "step/end", "turn/end"]
    assert {e.at for e in closers} == {log.events[2].at}  # stamped with the last event's time


def _frame(*lines: bytes) -> bytes:
    return zstandard.ZstdCompressor().compress(b"".join(line + b"\n" for line in lines))


def _event(seq: int) -> bytes:
    return event_line(SystemMessage(seq=seq, at=1, text=f"第{seq}条")).rstrip("\n").encode()


def test_a_truncated_json_line_at_the_tail_loads_up_to_the_last_whole_event(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl.zst"
    path.write_bytes(_frame(_event(0), _event(1)) + _frame(_event(2), _event(3)[:-7]))
    assert [e.seq for e in SessionLog(path).load()] == [0, 1, 2]
    writer = SessionLog(path)
    writer.open_for_append()  # the damaged frame is cut off and its whole event re-written
    writer.append("turn/end", turn="t0", outcome="interrupted")
    writer.flush()
    assert [(e.seq, e.type) for e in SessionLog(path).load()] == [
        (0, "system/message"),
        (1, "system/message"),
        (2, "system/message"),
        (3, "turn/end"),
    ]


def test_damage_before_the_tail_is_corruption_not_a_torn_tail(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl.zst"
    path.write_bytes(_frame(_event(0), b'{"seq": 1, "type"') + _frame(_event(2)))
    with pytest.raises(CorruptSessionLog, match="event 1 is not a whole event"):
        SessionLog(path).load()


def test_an_offset_is_a_count_of_events(tmp_path: Path) -> None:
    log = SessionLog(tmp_path / "s.jsonl.zst")
    for text in ("a", "b", "c"):
        log.append("system/message", text=text)
    log.flush()
    assert [e.text for e in log.since(1) if isinstance(e, SystemMessage)] == ["b", "c"]
    assert log.since(3) == [] and len(log.since(0)) == 3
    bad: object
    for bad in (-1, 1.5, "2", 4):
        with pytest.raises(ValueError):
            log.since(bad)  # type: ignore[arg-type]


# --- the event models ------------------------------------------------------------------------

CALL = {"id": "c1", "name": "im_send_message", "arguments": '{"text": "现货48小时内发货。"}'}
# One line of every event type as the writers have always stored it: seq, type, at, then the
# writer's fields (those some writers leave out are left out here too).
LEGACY: list[tuple[EventType, dict[str, Any]]] = [
    ("system/message", {"text": "你是本店客服。"}),
    ("turn/start", {"turn": "t1", "batch_id": "b1-1", "kind": "batch"}),
    ("user/message", {"source": "b1-1", "text": "[2026-11-30 14:05] [counterpart 张三] 什么时候发货？"}),
    ("step/start", {"turn": "t1", "step": 0}),
    ("assistant/attempt", {"attempt": 1, "code": "KEFU_MODEL_RATE_LIMITED", "status": 429}),
    ("assistant/attempt", {"attempt": 2, "code": "KEFU_MODEL_TIMEOUT", "status": None}),
    ("assistant/message", {"text": "", "tool_calls": [CALL], "usage": {"context_tokens": 812, "source": "estimate"}}),
    ("assistant/message", {"text": "已回复顾客。", "tool_calls": []}),
    ("tool/call", {"call_id": "c1", "name": "im_send_message"}),
    (
        "tool/result",
        {"call_id": "c1", "name": "im_send_message", "content": "Queued", "is_error": False, "request_id": "auto-1"},
    ),
    ("tool/result", {"call_id": "c2", "name": "memory_recall", "content": "-", "is_error": False, "request_id": None}),
    (
        "tool/result",
        {"call_id": "c3", "name": "im_send_message", "is_error": True, "code": "TOOL_NOT_STARTED", "content": "Error"},
    ),
    ("step/end", {"turn": "t1", "step": 0}),
    ("im/message-read", {"request_id": "auto-1", "platform_message_id": "p1", "read_at": 0, "text": "[im-read] 已读"}),
    ("turn/end", {"turn": "t1", "outcome": "complete"}),
    ("turn/end", {"turn": "t2", "outcome": "interrupted", "reason": "handling-paused"}),
    ("turn/start", {"turn": "t3", "batch_id": "b1-1", "kind": "follow-up", "follows": "t2"}),
    (
        "memory/archive",
        {"plan_id": "ab12", "upto": 14, "folders": 2, "segments": 2, "after_percent": 41.5, "note": "[memory] 2"},
    ),
    ("memory/recall", {"entries": [{"folder_id": "f1", "turn": "t3"}], "text": "[长期记忆] …"}),
    ("request/header", {"model": "openai:gpt-4o-mini", "tools": ["im_send_message", "im_handoff"]}),
    ("request/context", {"step": 0, "estimated_tokens": 812, "window_tokens": None}),
    ("developer/message", {"text": "[kefu] 可用工具有变化", "added": ["memory_recall"], "removed": []}),
    ("session/end-seed", {"inherited": True, "parent": "s1-1"}),
    ("turn/end", {"turn": "t3", "outcome": "forked"}),
]


def _legacy_lines() -> list[str]:
    """The lines as the log wrote them before the event models (json.dumps of the event)."""
    return [
        json.dumps({"seq": seq, "type": type_, "at": 1_700_000_000_000 + seq, **data}, ensure_ascii=False)
        for seq, (type_, data) in enumerate(LEGACY)
    ]


def test_every_event_type_has_one_model_in_the_union() -> None:
    types = {type_ for type_, _ in LEGACY}
    assert types == set(get_args(EventType))
    members = get_args(get_args(KnownEvent)[0])
    assert sorted(m.model_fields["type"].default for m in members) == sorted(get_args(EventType))


def test_existing_lines_load_into_their_models_and_are_written_back_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl.zst"
    lines = _legacy_lines()
    path.write_bytes(_frame(*(line.encode() for line in lines)))
    events = SessionLog(path).load()
    assert [type(e).__name__ for e in events[:4]] == ["SystemMessage", "TurnStart", "UserMessage", "StepStart"]
    assert all(e.type == type_ for e, (type_, _) in zip(events, LEGACY, strict=True))
    # Nothing added (no null for a field a writer left out), nothing lost; the same keys in
    # the same order where the models declare them in the writers' order.
    assert [json.loads(event_line(e)) for e in events] == [json.loads(line) for line in lines]
    # (the closers of repair give is_error and code before content: only there the order differs)
    assert [event_line(e).rstrip("\n") for e in events if e.seq != 11] == [x for i, x in enumerate(lines) if i != 11]
    message = events[6]
    assert isinstance(message, AssistantMessage) and message.tool_calls == [CALL]
    assert isinstance(events[16], TurnStart) and events[16].follows == "t2"
    assert isinstance(events[18], MemoryRecall) and events[18].entries == [{"folder_id": "f1", "turn": "t3"}]


def test_append_validates_into_the_type_model_and_writes_the_same_lines(tmp_path: Path) -> None:
    log = SessionLog(tmp_path / "s.jsonl.zst")
    for type_, data in LEGACY:
        log.append(type_, **data)
    log.flush()
    written = zstandard.ZstdDecompressor().decompressobj().decompress(log.path.read_bytes()).decode()
    stored = [{k: v for k, v in json.loads(line).items() if k != "at"} for line in written.splitlines()]
    assert stored == [{"seq": seq, "type": t, **data} for seq, (t, data) in enumerate(LEGACY)]
    assert isinstance(SessionLog(log.path).load()[9], ToolResult)


@pytest.mark.parametrize(
    ("type_", "data"),
    [
        ("system/message", {"text": "x", "source": "b1"}),  # a field the type does not have
        ("turn/start", {"turn": "t0", "batch_id": "b1"}),  # a field the type needs
        ("turn/end", {"turn": "t0", "outcome": "done"}),  # a value the type does not take
        ("assistant/message", {"tool_calls": [{"id": "c1", "name": "x"}]}),
        ("memory/recall", {"entries": [{"folder_id": "f1"}], "text": ""}),
        ("kefu/unknown", {}),  # a type no model has
    ],
)
def test_append_refuses_what_the_type_does_not_have(tmp_path: Path, type_: Any, data: dict[str, Any]) -> None:
    log = SessionLog(tmp_path / "s.jsonl.zst")
    with pytest.raises(ValidationError):
        log.append(type_, **data)
    assert log.offset == 0


def test_an_unknown_type_loads_as_it_always_did_as_an_event_that_is_not_whole(tmp_path: Path) -> None:
    """A newer version's event type: corruption before the tail, a torn tail at the end."""
    newer = b'{"seq": 1, "type": "kefu/from-the-future", "at": 1}'
    path = tmp_path / "s.jsonl.zst"
    path.write_bytes(_frame(_event(0), newer) + _frame(_event(2)))
    with pytest.raises(CorruptSessionLog, match="event 1 is not a whole event"):
        SessionLog(path).load()
    path.write_bytes(_frame(_event(0)) + _frame(newer))
    log = SessionLog(path)
    assert [e.seq for e in log.load()] == [0] and log.torn_bytes > 0


def test_an_ignorable_extension_event_is_kept_in_place_and_skipped_by_readers(tmp_path: Path) -> None:
    """Seed 002: an extension event an old reader does not know is refused unless its envelope
    says `ignorable: true`; then it keeps its seq and nothing that reads the log sees it."""
    extension = b'{"seq": 1, "type": "goal/change", "at": 1, "ignorable": true, "goal": "upsell"}'
    path = tmp_path / "s.jsonl.zst"
    path.write_bytes(_frame(_event(0), extension, _event(2)))
    log = SessionLog(path)
    events = log.load()
    assert [e.seq for e in events] == [0, 1, 2] and isinstance(events[1], ExtensionEvent)
    assert [m.content for m in model_view(log)] == ["第0条"]  # the system message; the extension is not shown
    log.open_for_append()
    log.append("user/message", source="b1", text="在吗")  # the log goes on after it
    log.flush()
    assert [e.seq for e in SessionLog(path).load()] == [0, 1, 2, 3]
    required = extension.replace(b', "ignorable": true', b"")
    path.write_bytes(_frame(_event(0), required, _event(2)))
    with pytest.raises(CorruptSessionLog, match="event 1 is not a whole event"):
        SessionLog(path).load()
    known = b'{"seq": 1, "type": "turn/end", "at": 1, "ignorable": true}'  # damage to a known event stays damage
    path.write_bytes(_frame(_event(0), known, _event(2)))
    with pytest.raises(CorruptSessionLog):
        SessionLog(path).load()


def _appended_frame(*events: dict[str, Any]) -> bytes:
    """A frame as another process's writer would append it."""
    body = "".join(event_line(SESSION_EVENT.validate_python({"at": 0, **e})) for e in events).encode()
    return zstandard.ZstdCompressor(write_checksum=True, write_content_size=True).compress(body)


def test_a_load_after_another_writer_appended_reads_the_new_frames_and_derives_each_event_once(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl.zst"
    log = SessionLog(path)
    log.append("turn/start", turn="t0", batch_id="b1", kind="batch")
    log.append("user/message", source="b1", text="在吗")
    log.flush()
    derived: list[int] = []

    def derive(event: SessionEvent) -> int:
        derived.append(event.seq)
        return event.seq

    assert log.derived("seq", derive) == [0, 1]
    with open(path, "ab") as handle:  # another worker process took the customer's next turn
        handle.write(_appended_frame({"seq": 2, "type": "turn/end", "turn": "t0", "outcome": "complete"}))
    again = SessionLog(path)
    assert [e.seq for e in again.load()] == [0, 1, 2]
    assert again.derived("seq", derive) == [0, 1, 2] and derived == [0, 1, 2]  # only the new event derived
    assert [e.seq for e in again.of_type("turn/end")] == [2] and again.last("turn/start") == again.events[0]
    again.append("turn/start", turn="t3", batch_id="b2", kind="batch")  # buffered: indexed, not yet durable
    assert again.last("turn/start") is not None and again.last("turn/start").seq == 3
    assert [e.seq for e in SessionLog(path).load()] == [0, 1, 2]


def test_damage_inside_what_this_process_already_read_is_still_found(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl.zst"
    log = SessionLog(path)
    for n in range(3):
        log.append("user/message", source="b1", text=f"第{n}条消息")
        log.flush()
    data = bytearray(path.read_bytes())
    data[len(data) // 3] ^= 0xFF  # the same size, the same tail: damage in the middle
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptSessionLog):
        SessionLog(path).load()


def test_a_torn_frame_after_what_this_process_read_is_a_torn_tail(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl.zst"
    log = SessionLog(path)
    log.append("user/message", source="b1", text="第一条")
    log.flush()
    frame = _appended_frame({"seq": 1, "type": "user/message", "source": "b1", "text": "第二条"})
    with open(path, "ab") as handle:
        handle.write(frame[: len(frame) // 2])
    reader = SessionLog(path)
    assert [e.seq for e in reader.load()] == [0] and reader.torn_bytes == len(frame) // 2


def test_a_fold_takes_only_new_events_and_starts_over_on_events_it_never_took(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl.zst"
    log = SessionLog(path)
    log.append("turn/start", turn="t0", batch_id="b1", kind="batch")
    log.append("turn/end", turn="t0", outcome="complete")
    log.flush()
    taken: list[int] = []

    def step(state: list[int], event: SessionEvent) -> None:
        taken.append(event.seq)
        state.append(event.seq)

    assert log.folded("seqs", list, step, list) == [0, 1]
    log.append("turn/start", turn="t2", batch_id="b2", kind="batch")  # buffered
    assert log.folded("seqs", list, step, list) == [0, 1, 2] and taken == [0, 1, 2]
    assert [t.turn for t, outcome in batch_turns(log, "b2")] == ["t2"]
    del log  # it ends without flushing: seq 2 never became durable
    gc.collect()
    again = SessionLog(path)
    again.load()
    assert again.folded("seqs", list, step, list) == [0, 1] and taken == [0, 1, 2, 0, 1]
    assert batch_turns(again, "b1") == [(again.events[0], "complete")] and batch_turns(again, "b2") == []


def test_a_load_after_a_log_that_ended_without_flushing_holds_only_durable_events(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl.zst"
    log = SessionLog(path)
    log.append("user/message", source="b1", text="在吗")
    log.flush()
    log.append("user/message", source="b1", text="没写完")  # indexed into the lists the cache shares
    assert log.derived("seq", lambda event: event.seq) == [0, 1]
    del log
    gc.collect()
    again = SessionLog(path)
    assert [e.seq for e in again.load()] == [0] and again.offset == 1
    assert [e.seq for e in again.of_type("user/message")] == [0]
    assert again.derived("seq", lambda event: event.seq) == [0]
    again.append("user/message", source="b1", text="第二条")
    again.flush()
    assert [e.text for e in SessionLog(path).load() if isinstance(e, UserMessage)] == ["在吗", "第二条"]


def test_the_view_kept_between_steps_is_the_view_built_from_scratch(tmp_path: Path, monkeypatch) -> None:
    import runtime.agent.session_log as session_log

    path = tmp_path / "s.jsonl.zst"
    log = SessionLog(path)
    log.append("system/message", text="你是客服")
    image = {"sha256": "a" * 64, "mime": "image/png"}

    def fresh() -> list[Any]:
        with monkeypatch.context() as scoped:
            scoped.setattr(session_log, "_folds", Lru(2048))
            return model_view(log, "", image_rounds=2)

    for n in range(6):
        log.append("turn/start", turn=f"t{n}", batch_id=f"b{n}", kind="batch")
        log.append("user/message", source=f"b{n}", text=f"第{n}条 [image]", images=[image])
        assert model_view(log, "", image_rounds=2) == fresh()
        log.append("assistant/message", text=f"回复{n}")
        log.append("turn/end", turn=f"t{n}", outcome="complete")
        log.flush()
        if n == 3:  # the first turns archived out of the view
            log.append(
                "memory/archive", plan_id="p1", upto=9, folders=1, segments=1, after_percent=10.0, note="[memory]"
            )
        view = model_view(log, "", image_rounds=2)
        assert view == fresh()
    assert [m.content for m in view if m.role == "assistant"] == ["回复2", "回复3", "回复4", "回复5"]
    assert [bool(m.images) for m in view if m.role == "user"] == [False, False, True, True]
