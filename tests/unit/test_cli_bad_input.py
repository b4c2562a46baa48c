"""Issue 43, items 4 and 5: every bad input an operator can give the real `kefu` command is
answered with its KEFU_ code and exit 2 (never a traceback, never exit 0, 1 or 3), on a new,
empty data dir; and every command that lists rows shows real rows by default and simulated
ones only with `--source simulation`."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from config import Settings
from runtime.accounts.registry import AccountSpec, create_account
from runtime.agent.session_log import SessionLog
from runtime.agent.sessions import session_path
from runtime.memory.engine import scope_of
from runtime.store import DeliveryStore
from tests.unit.test_simulated_separation import REAL, buyer, remember
from worker.cli import cli

KEFU = Path(sys.executable).parent / "kefu"

BAD_SCRIPT = """start = "nope"
[[conversations]]
name = "x"
buyer = { id = "b1" }
steps = [{ say = "x", image = "a.png", file = "b.txt" }]
"""
ONE_MISTAKE = """[[conversations]]
name = "x"
buyer = { id = "b1" }
steps = [{ say = "x" }]
"""


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A port something else listens on."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        yield held.getsockname()[1]


def kefu_process(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The installed `kefu` on a new data dir, as a script runs it: no terminal (its own session,
    stdin from /dev/null), no KEFU_SETUP_SECRET, a broker nobody listens on."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("KEFU_")}
    env |= {
        "KEFU_DATA_DIR": str(tmp_path / "var"),
        "KEFU_BROKER_URL": "redis://127.0.0.1:1/0",
        "KEFU_LANGUAGE": "en",
        "COLUMNS": "200",  # an error panel never wraps a code
    }
    return subprocess.run(
        [str(KEFU), *args],
        cwd=tmp_path,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        start_new_session=True,
    )


CASES: list[tuple[list[str], str, list[str]]] = [
    # (arguments, the code, more words the answer must have)
    (["outbox", "--state", "bogus"], "KEFU_INVALID_INPUT", ["--state", "result-unknown"]),
    (["status"], "KEFU_STORE_MISSING", ["delivery-default.sqlite"]),
    (["send", "1", "hello"], "KEFU_STORE_MISSING", ["delivery-default.sqlite"]),
    (["memory", "report"], "KEFU_STORE_MISSING", ["memory-default.sqlite"]),
    (["console", "--port", "99999"], "KEFU_INVALID_INPUT", ["--port"]),
    (["console", "--port", "{busy}"], "KEFU_CONSOLE_PORT_UNAVAILABLE", ["127.0.0.1:{busy}"]),
    (
        ["accounts", "add", "dingtalk", "--id", "d", "--client-id", "c", "--robot-code", "r"],
        "KEFU_SECRET_REQUIRED",
        ["KEFU_SETUP_SECRET"],
    ),
    (["operators", "add", ""], "KEFU_OPERATOR_INVALID", ["operator name"]),
    (["operators", "add", "alice"], "KEFU_SECRET_REQUIRED", ["--password-stdin"]),
    (
        ["simulate", "batch", "{bad_script}"],
        "KEFU_SIMULATION_SCRIPT_INVALID",
        ["3 problems:", "start:", "conversations.0.buyer.name:", "conversations.0.steps.0:"],
    ),
    (["simulate", "batch", "{one_mistake}"], "KEFU_SIMULATION_SCRIPT_INVALID", ["1 problem:", "buyer.name"]),
    (["rounds", "--source", "bogus"], "KEFU_INVALID_INPUT", ["--source"]),
    (["memory", "audit", "--source", "bogus"], "KEFU_INVALID_INPUT", ["--source"]),
    (["no-such-command"], "KEFU_INVALID_INPUT", ["no-such-command"]),
    (["customers", "--no-such-option"], "KEFU_INVALID_INPUT", ["--no-such-option"]),
    (["history", "not-a-number"], "KEFU_INVALID_INPUT", ["customer_id"]),
]


@pytest.mark.parametrize(("args", "code", "words"), CASES, ids=[" ".join(c[0]) or "''" for c in CASES])
def test_bad_input_gets_its_code_and_exit_2(tmp_path, busy_port, args, code, words):
    (tmp_path / "bad.toml").write_text(BAD_SCRIPT, encoding="utf-8")
    (tmp_path / "one.toml").write_text(ONE_MISTAKE, encoding="utf-8")
    fill: dict[str, object] = {"busy": busy_port, "bad_script": "bad.toml", "one_mistake": "one.toml"}
    ran = kefu_process(tmp_path, *(a.format(**fill) for a in args))
    output = ran.stdout + ran.stderr
    assert ran.returncode == 2, output
    assert code in output, output
    assert "Traceback" not in output and "Warning" not in output and "Aborted" not in output, output
    for word in words:
        assert word.format(**fill) in output, output
    assert "problems)" not in output and "Password" not in output, output  # asked for nothing, counted right
    assert not (tmp_path / "var" / "delivery-default.sqlite").exists()  # nothing half-written


# Every command that lists rows, and how to tell whose rows it showed: the customer ids (or
# account ids) in its output.
Shown = Callable[[str, int, int], set[str]]


def _ids(rows: list[dict], real: int, simulated: int) -> set[str]:
    found = {str(row.get("customer_id", row.get("id"))) for row in rows} | {row.get("scope", "") for row in rows}
    return {who for who, id in (("real", real), ("simulated", simulated)) if str(id) in found or scope_of(id) in found}


def _from_json(output: str, real: int, simulated: int) -> set[str]:
    loaded = json.loads(output)
    return _ids(loaded["scopes"] if isinstance(loaded, dict) else loaded, real, simulated)


def _from_text(output: str, real: int, simulated: int) -> set[str]:
    return {who for who, name in (("real", REAL), ("simulated", "shop")) if re.search(rf"\b{name}\b", output)}


LISTINGS: list[tuple[list[str], Shown]] = [
    (["customers", "--json"], _from_json),
    (["outbox", "--json"], _from_json),
    (["rounds", "--json"], _from_json),
    (["memory", "report", "--json"], _from_json),
    (["memory", "audit", "--json"], _from_json),
    (["checkpoint"], _from_text),
    (["status"], _from_text),  # its checkpoints' accounts
]


@pytest.fixture
def both(settings: Settings, store: DeliveryStore, shop: str) -> tuple[int, int]:
    """A real customer and a simulated one, each with messages, outbox requests, memory and a round."""
    create_account(store, AccountSpec(id=REAL, platform="wangwang", identity="cntaobao某店"))
    real, simulated = buyer(store, REAL, 3, 1), buyer(store, shop, 5, 2)
    for customer in (real, simulated):
        remember(settings, customer)
        log = SessionLog(session_path(settings.sessions_dir, f"s{customer}-1"))
        log.append("turn/start", at=1_780_000_000_000, turn="t0", batch_id="b0", kind="batch")
        log.flush()
    return real, simulated


def test_every_listing_command_hides_simulated_rows_unless_asked(kefu: CliRunner, both: tuple[int, int]) -> None:
    real, simulated = both
    for args, shown in LISTINGS:
        default = kefu.invoke(cli, args)
        assert default.exit_code == 0, (args, default.output)
        assert shown(default.output, real, simulated) == {"real"}, (args, default.output)
        asked = kefu.invoke(cli, [*args, "--source", "simulation"])
        assert asked.exit_code == 0, (args, asked.output)
        assert shown(asked.output, real, simulated) == {"simulated"}, (args, asked.output)
        explicit = kefu.invoke(cli, [*args, "--source", "real"])
        assert explicit.exit_code == 0 and explicit.output == default.output, (args, explicit.output)


def test_rounds_of_simulated_customers_only_hint_at_the_simulation(
    kefu: CliRunner, settings: Settings, store: DeliveryStore, shop: str
) -> None:
    simulated = buyer(store, shop, 1, 0)
    remember(settings, simulated)
    log = SessionLog(session_path(settings.sessions_dir, f"s{simulated}-1"))
    log.append("turn/start", at=1_780_000_000_000, turn="t0", batch_id="b0", kind="batch")
    log.flush()
    for args in (["rounds"], ["memory", "audit"]):
        shown = kefu.invoke(cli, args)
        assert shown.exit_code == 0, shown.output
        assert f"kefu {' '.join(args)} --source simulation" in shown.output, shown.output


def test_a_file_a_command_cannot_write_is_named_by_code_not_a_traceback(tmp_path: Path) -> None:
    DeliveryStore(tmp_path / "var" / "delivery-default.sqlite").close()  # a data dir that has run
    ran = kefu_process(tmp_path, "backup", "/proc/kefu-backup")  # no folder can be made there
    output = ran.stdout + ran.stderr
    assert ran.returncode == 2, output
    assert "KEFU_FILE_UNAVAILABLE: /proc/kefu-backup" in output and "Traceback" not in output, output
