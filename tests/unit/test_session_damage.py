"""Damage before the tail of a session log is corruption, never a torn tail (SPEC 2, 3.7): the
file is kept byte for byte, the customer continues in a new session, and only a genuinely torn
last frame is repaired."""

from __future__ import annotations

import pytest

from runtime.admission.batches import evaluate
from runtime.agent.session_log import CorruptSessionLog, SessionLog, read_frames
from runtime.agent.sessions import DAMAGED_NOTE, damaged_sessions, session_path
from tests.unit.test_agent_turn import say, turn


def write_frames(path, count: int) -> SessionLog:
    log = SessionLog(path)
    for n in range(count):
        if n == 0:
            log.append("system/message", text="第0条")
        else:
            log.append("user/message", source="b", text=f"第{n}条")
        log.append("turn/end", turn=f"t{n}", outcome="complete")
        log.flush()
    return log


def flip_byte_in_frame(path, index: int) -> bytes:
    data = bytearray(path.read_bytes())
    start, end, _ = read_frames(bytes(data))[index]
    data[(start + end) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    return bytes(data)


def test_one_flipped_byte_in_frame_2_of_20_is_corruption_and_nothing_is_cut(tmp_path):
    path = tmp_path / "s.jsonl.zst"
    write_frames(path, 20)
    damaged = flip_byte_in_frame(path, 2)
    with pytest.raises(CorruptSessionLog, match="do not decode and whole frames follow"):
        SessionLog(path).load()
    with pytest.raises(CorruptSessionLog):
        SessionLog(path).open_for_append()
    assert path.read_bytes() == damaged  # 42 of 45 events used to be deleted here, silently


def test_damage_in_the_last_frame_alone_is_a_torn_tail_and_is_repaired(tmp_path):
    path = tmp_path / "s.jsonl.zst"
    write_frames(path, 5)
    flip_byte_in_frame(path, 4)
    log = SessionLog(path)
    assert len(log.open_for_append()) == 8 and log.torn_bytes == 0
    assert len(SessionLog(path).load()) == 8


def damage_current_session(settings, customer: int) -> tuple[bytes, str]:
    path = session_path(settings.sessions_dir, f"s{customer}-1")
    log = SessionLog(path)
    log.load()
    for n in range(3):  # more frames after the damaged one
        log.append("im/message-read", request_id=f"r{n}", platform_message_id=f"p{n}", read_at=0, text="已读")
        log.flush()
    return flip_byte_in_frame(path, 1), str(path)


def test_a_customer_whose_log_is_damaged_continues_in_a_new_session_with_the_file_kept(
    store, settings, shop, transport, platform
):
    customer = say(store, transport, platform, "b1", "什么时候发货？")
    evaluate(store, customer, 1000)
    turn(store, settings, customer)
    damaged, original = damage_current_session(settings, customer)

    say(store, transport, platform, "b1", "可以退货吗")
    evaluate(store, customer, 1000)
    registered: list[str] = []
    result = turn(store, settings, customer, registered)

    assert (result.outcome, result.session_id, len(registered)) == ("complete", f"s{customer}-2", 1)
    with store.read() as conn:
        [record] = damaged_sessions(conn)
        assert conn.execute("SELECT session_id FROM customer").scalar_one() == f"s{customer}-2"
    assert (record.customer_id, record.session_id) == (customer, f"s{customer}-1")
    assert open(record.kept_path, "rb").read() == damaged  # kept byte for byte
    assert "/damaged/" in record.kept_path and not session_path(settings.sessions_dir, f"s{customer}-1").exists()
    assert record.problem.startswith(f"{original}: bytes ")  # the file and where, none of its content
    events = SessionLog(session_path(settings.sessions_dir, result.session_id)).load()
    assert DAMAGED_NOTE in events[0].text
    assert "可以退货吗" in next(e.text for e in events if e.type == "user/message")


def test_a_batch_answered_in_the_damaged_log_is_not_answered_again(store, settings, shop, transport, platform):
    customer = say(store, transport, platform, "b1", "什么时候发货？")
    evaluate(store, customer, 1000)
    turn(store, settings, customer)
    with store.write() as conn:  # the worker died after the reply was registered, before the batch was done
        conn.execute("UPDATE admission_batch SET state = 'committed'")
    damage_current_session(settings, customer)

    registered: list[str] = []
    result = turn(store, settings, customer, registered)

    assert result.outcome == "complete" and registered == []
    with store.read() as conn:
        assert conn.execute("SELECT count(*) FROM outbox_request").scalar_one() == 1
        assert conn.execute("SELECT state FROM admission_batch").scalar_one() == "done"
    # The new session's first turn still tells the model that earlier context was lost.
    say(store, transport, platform, "b1", "可以退货吗")
    evaluate(store, customer, 1000)
    later = turn(store, settings, customer, registered)
    assert len(registered) == 1
    first = SessionLog(session_path(settings.sessions_dir, later.session_id)).load()[0]
    assert first.type == "system/message" and DAMAGED_NOTE in first.text
