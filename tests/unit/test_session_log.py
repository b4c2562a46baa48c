"""Session log: zstd frames, contiguous seq, torn last frame ignored, crash closers."""

from __future__ import annotations

import pytest
import zstandard
from pydantic import ValidationError

from runtime.agent.turn import repair
from runtime.session_log import CorruptSessionLog, SessionEvent, SessionLog


def test_flush_reports_durability_and_frames_read_back(tmp_path):
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
    assert events[1].text.endswith("你好")


def test_a_torn_last_frame_is_ignored_then_truncated_before_appending(tmp_path):
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
def test_seq_must_be_a_non_negative_integer(seq):
    with pytest.raises(ValidationError):
        SessionEvent(seq=seq, type="turn/start", at=0)


def test_repair_closes_an_interrupted_turn_without_running_tools(tmp_path):
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
    tail = [(e.type, getattr(e, "code", None) or getattr(e, "outcome", None)) for e in SessionLog(log.path).load()[4:]]
    assert tail == [
        ("tool/result", "TOOL_OUTCOME_UNKNOWN"),
        ("tool/result", "TOOL_NOT_STARTED"),
        ("step/end", None),
        ("turn/end", "interrupted"),
    ]
    assert repair(reopened) is False  # a closed tail needs nothing more


def _frame(*lines: bytes) -> bytes:
    return zstandard.ZstdCompressor().compress(b"".join(line + b"\n" for line in lines))


def _event(seq: int, type_: str = "system/message") -> bytes:
    return SessionEvent(seq=seq, type=type_, at=1).model_dump_json().encode()


def test_a_truncated_json_line_at_the_tail_loads_up_to_the_last_whole_event(tmp_path):
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


def test_damage_before_the_tail_is_corruption_not_a_torn_tail(tmp_path):
    path = tmp_path / "s.jsonl.zst"
    path.write_bytes(_frame(_event(0), b'{"seq": 1, "type"') + _frame(_event(2)))
    with pytest.raises(CorruptSessionLog, match="event 1 is not a whole event"):
        SessionLog(path).load()


def test_an_offset_is_a_count_of_events(tmp_path):
    log = SessionLog(tmp_path / "s.jsonl.zst")
    for text in ("a", "b", "c"):
        log.append("system/message", text=text)
    log.flush()
    assert [e.text for e in log.since(1)] == ["b", "c"]
    assert log.since(3) == [] and len(log.since(0)) == 3
    for bad in (-1, 1.5, "2", 4):
        with pytest.raises(ValueError):
            log.since(bad)
