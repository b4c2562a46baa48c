"""Every state that runtime's SQL and table mappings name belongs to a state machine of
runtime.store.states: a misspelt state would match nothing and silently stop a stage."""

from __future__ import annotations

import re
from pathlib import Path

import runtime
from runtime.store.states import (
    AlertState,
    AttemptState,
    BatchState,
    ListenerState,
    MessageState,
    OutboxState,
    PlacementState,
)

ROOT = Path(runtime.__file__).parent
ROW_STATES = {*MessageState, *BatchState, *OutboxState, *AttemptState, *PlacementState, *AlertState}
# `state = 'x'`, `state IN ('x', 'y')`, `THEN 'x'` inside a CASE that sets a state column
COMPARED = re.compile(r"\b(listener_state|state)\s*(?:=|!=|<>|IN|NOT IN)\s*\(?((?:'[a-z-]+'(?:,\s*)?)+)\)?")
SET_BY_CASE = re.compile(r"\bstate\s*=\s*CASE\b(.*?)\bEND\b", re.S)


def sources() -> dict[Path, str]:
    return {path: path.read_text("utf-8") for path in ROOT.rglob("*.py") if path.name != "states.py"}


def literals(text: str) -> list[str]:
    return re.findall(r"'([a-z-]+)'", text)


def test_every_state_compared_in_sql_is_a_known_state():
    found: dict[str, set[str]] = {"state": set(), "listener_state": set()}
    for text in sources().values():
        for column, values in COMPARED.findall(text):
            found[column].update(literals(values))
    assert found["state"] and found["state"] <= ROW_STATES, found["state"] - ROW_STATES
    assert found["listener_state"] <= set(ListenerState), found["listener_state"] - set(ListenerState)


def test_every_state_a_case_expression_sets_is_a_known_state():
    text = "\n".join(sources().values())
    set_states = {value for case in SET_BY_CASE.findall(text) for value in re.findall(r"THEN '([a-z-]+)'", case)}
    set_states |= {value for case in SET_BY_CASE.findall(text) for value in re.findall(r"ELSE '([a-z-]+)'", case)}
    assert set_states <= ROW_STATES, set_states - ROW_STATES


def test_a_misspelt_state_is_caught():
    assert set(literals(COMPARED.search("WHERE state IN ('pending', 'sentt')").group(2))) - ROW_STATES == {"sentt"}
