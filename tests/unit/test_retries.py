"""The retry schedules (config.retries): what each wait is, and that the task base and the
listener policy take theirs from there."""

from __future__ import annotations

from itertools import islice

from config import ListenerSettings
from config.retries import (
    IMAGE_RESCUE,
    SEND_NOT_SUBMITTED,
    STORE_MIGRATION_BUSY,
    TASK_STORE_BUSY,
    Backoff,
    Steps,
    listener_reconnect,
    model_call,
)
from runtime.accounts.listener_policy import ListenerPolicy


def test_a_backoff_grows_by_its_factor_up_to_its_cap_and_never_undercuts_a_hint() -> None:
    backoff = Backoff(first_s=1, factor=2, max_s=5)
    assert [backoff.wait_s(n) for n in range(1, 6)] == [1, 2, 4, 5, 5]
    assert backoff.wait_s(1, hint_s=7.5) == 7.5
    assert backoff.wait_s(3, hint_s=0.5) == 4


def test_a_bounded_backoff_yields_as_many_waits_as_retries_an_unbounded_one_goes_on() -> None:
    assert list(Backoff(first_s=0.5, factor=3, retries=3).waits_s()) == [0.5, 1.5, 4.5]
    assert list(islice(STORE_MIGRATION_BUSY.waits_s(), 8)) == [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.5, 0.5]


def test_steps_give_their_waits_one_by_one_and_their_count_is_the_retries() -> None:
    steps = Steps((1, 3))
    assert (steps.retries, list(steps.waits_s())) == (2, [1, 3])
    assert [steps.wait_s(1), steps.wait_s(2), steps.wait_s(5)] == [1, 3, 3]
    assert SEND_NOT_SUBMITTED.wait_s(1, hint_s=20) == 20


def test_the_named_schedules_keep_their_documented_waits() -> None:
    assert list(SEND_NOT_SUBMITTED.waits_s()) == [1, 2, 5, 10, 30, 60]
    assert [IMAGE_RESCUE.wait_s(1), IMAGE_RESCUE.wait_s(2)] == [30, 120]  # 30 s, then 2 min
    assert [model_call(1.5).wait_s(n) for n in (1, 2, 3)] == [1.5, 3, 6]
    assert [listener_reconnect(1000, 5000).wait_s(n) for n in range(1, 6)] == [1, 2, 4, 5, 5]


def test_the_task_base_retries_a_busy_store_on_its_named_schedule() -> None:
    from worker.tasks.base import KefuTask

    assert (KefuTask.retry_backoff, KefuTask.retry_backoff_max, KefuTask.max_retries) == (
        TASK_STORE_BUSY.first_s,
        TASK_STORE_BUSY.max_s,
        TASK_STORE_BUSY.retries,
    )


def test_a_listener_waits_its_reconnect_schedule_in_milliseconds() -> None:
    settings = ListenerSettings(reconnect_initial_ms=250, reconnect_max_ms=1000, reconnect_max_attempts=10)
    policy = ListenerPolicy(settings)
    policy.start()
    waits = []
    for now in range(1, 6):
        policy.connected(now)
        waits.append(policy.failed(now, "X"))
    assert waits == [250, 500, 1000, 1000, 1000]
