"""worker.dispatch.Ran: what a task that ran steps inline reports (its result in Flower), and
which sends fail it (issue 43)."""

from __future__ import annotations

import pytest

from runtime.pipeline import Attempt, Settle, Step
from worker.dispatch import Ran, SendNotDelivered


def test_a_task_without_inline_steps_returns_its_outcome():
    assert Ran().result("ingested") == "ingested"


def test_inline_steps_are_listed_under_their_task_names():
    ran = Ran()
    turn = ran.begin("kefu.agent.run_turn", "customer 7")
    ran.sent("r-1", Step("sent", (Attempt("r-2"),)))
    turn[2] = "complete"
    assert ran.result("ingested") == {
        "outcome": "ingested",
        "steps": ["kefu.agent.run_turn customer 7: complete", "kefu.outbox.attempt r-1: sent"],
    }


def test_a_send_retried_later_does_not_fail_the_task():
    ran = Ran()
    ran.sent("r-1", Step("not-submitted", (Attempt("r-1", 2.0, 1),)))
    assert ran.result("complete") == {"outcome": "complete", "steps": ["kefu.outbox.attempt r-1: not-submitted"]}


@pytest.mark.parametrize(
    "step",
    [
        Step("rejected", (Attempt("r-2"),)),  # the next reply's attempt is not a retry of this one
        Step("result-unknown", (Settle("r-1"),)),
        Step("not-submitted"),  # out of retries
    ],
)
def test_a_send_not_delivered_fails_the_task_naming_the_request(step):
    ran = Ran()
    ran.sent("r-1", step, inline=False)  # the task's own attempt: not listed as an inline step
    with pytest.raises(SendNotDelivered, match=f"r-1: {step.outcome}"):
        ran.result(step.outcome)
    assert ran.steps == []
