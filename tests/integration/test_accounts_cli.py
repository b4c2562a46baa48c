"""`kefu accounts` and `kefu routes` as an operator runs them, against the local DingTalk fake_dingtalk."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fakes.dingtalk import FakeDingTalk

BIN = Path(sys.executable).parent


@pytest.fixture
def kefu(tmp_path, fake_dingtalk):
    env = {k: v for k, v in os.environ.items() if not k.startswith("KEFU_")}
    env |= {
        "KEFU_DATA_DIR": str(tmp_path / "var"),
        "KEFU_DINGTALK__OPENAPI_URL": fake_dingtalk.url,
        "COLUMNS": "200",
        "KEFU_LANGUAGE": "en",  # the words asserted here are English (kefu speaks Chinese by default)
    }

    def run(*args: str, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(BIN / "kefu"), *args], env=env | extra, cwd=tmp_path, capture_output=True, text=True, timeout=120
        )

    return run


def add_args(fake_dingtalk: FakeDingTalk, account: str = "ding", op: str = "op-add-1") -> list[str]:
    return [
        *("accounts", "add", "dingtalk", "--id", account, "--client-id", fake_dingtalk.client_id),
        *("--robot-code", fake_dingtalk.robot_code, "--op-id", op, "--yes"),
    ]


def test_an_operator_adds_a_dingtalk_robot_and_its_routes(kefu, fake_dingtalk):
    wrong = kefu(*add_args(fake_dingtalk), KEFU_SETUP_SECRET="not-the-secret")
    assert wrong.returncode == 2 and "KEFU_ACCOUNT_IDENTITY_UNVERIFIED" in wrong.stdout
    assert json.loads(kefu("accounts", "list", "--json").stdout) == []  # nothing kept

    added = kefu(*add_args(fake_dingtalk), KEFU_SETUP_SECRET=fake_dingtalk.client_secret)
    assert added.returncode == 0, added.stdout + added.stderr
    assert "verified: dingtalk ding-robot as account ding" in added.stdout and "account ding saved" in added.stdout
    replayed = kefu(*add_args(fake_dingtalk), KEFU_SETUP_SECRET=fake_dingtalk.client_secret)
    assert replayed.returncode == 0 and "was saved by operation op-add-1" in replayed.stdout
    twice = kefu(
        *add_args(fake_dingtalk, account="ding-2", op="op-add-2"), KEFU_SETUP_SECRET=fake_dingtalk.client_secret
    )
    assert twice.returncode == 2 and "KEFU_ACCOUNT_EXISTS" in twice.stdout

    listed = json.loads(kefu("accounts", "list", "--json").stdout)
    assert [(a["id"], a["platform"], a["identity"]) for a in listed] == [("ding", "dingtalk", "ding-robot")]
    for result in (wrong, added, replayed, twice):
        assert fake_dingtalk.client_secret not in result.stdout + result.stderr

    assert kefu("routes", "add", "d1", "--account", "ding", "--type", "direct").returncode == 0
    bad = kefu("routes", "add", "g1", "--account", "ding", "--type", "group")
    assert bad.returncode == 2 and "KEFU_ROUTE_INVALID" in bad.stdout and "trigger" in bad.stdout
    assert kefu("routes", "add", "g1", "--account", "ding", "--type", "group", "--mention").returncode == 0
    assert "route g1: disabled (revision 2)" in kefu("routes", "disable", "g1").stdout
    assert "route g1: enabled (revision 3)" in kefu("routes", "enable", "g1").stdout
    assert "route d1 deleted" in kefu("routes", "delete", "d1").stdout
    routes = json.loads(kefu("routes", "list", "--account", "ding", "--json").stdout)
    assert [(r["id"], r["enabled"], r["revision"]) for r in routes] == [("g1", True, 3)]
    unknown = kefu("routes", "delete", "d1")
    assert unknown.returncode == 2 and "KEFU_ROUTE_UNKNOWN" in unknown.stdout

    assert "account ding: disconnected (revision 2)" in kefu("accounts", "pause", "ding").stdout
    assert "account ding: connected (revision 3)" in kefu("accounts", "resume", "ding").stdout
    stale = kefu("accounts", "delete", "ding", "--revision", "1")
    assert stale.returncode == 2 and "KEFU_REVISION_CONFLICT" in stale.stdout
    assert "account ding deleted" in kefu("accounts", "delete", "ding").stdout
    assert json.loads(kefu("accounts", "list", "--json").stdout) == []
    assert json.loads(kefu("routes", "list", "--json").stdout) == []


def test_credentials_rotate_without_deleting_and_a_deleted_id_comes_back_with_its_identity(kefu, fake_dingtalk):
    assert kefu(*add_args(fake_dingtalk), KEFU_SETUP_SECRET=fake_dingtalk.client_secret).returncode == 0
    assert kefu("routes", "add", "d1", "--account", "ding", "--type", "direct").returncode == 0
    old_secret, fake_dingtalk.client_secret = fake_dingtalk.client_secret, "ding-secret-rotated"  # rotated on DingTalk
    refused = kefu("accounts", "renew", "ding", KEFU_SETUP_SECRET=old_secret)
    assert refused.returncode == 2 and "KEFU_ACCOUNT_IDENTITY_UNVERIFIED" in refused.stdout
    wrong_option = kefu("accounts", "renew", "ding", "--app-key", "k", KEFU_SETUP_SECRET=fake_dingtalk.client_secret)
    assert wrong_option.returncode == 2 and "KEFU_INVALID_INPUT" in wrong_option.stdout
    stale = kefu("accounts", "renew", "ding", "--revision", "0", KEFU_SETUP_SECRET=fake_dingtalk.client_secret)
    assert stale.returncode == 2 and "KEFU_REVISION_CONFLICT" in stale.stdout
    renewed = kefu("accounts", "renew", "ding", KEFU_SETUP_SECRET=fake_dingtalk.client_secret)
    assert renewed.returncode == 0 and "credentials renewed and verified (revision 2)" in renewed.stdout
    for result in (refused, renewed):
        assert fake_dingtalk.client_secret not in result.stdout + result.stderr and old_secret not in result.stdout
    [account] = json.loads(kefu("accounts", "list", "--json").stdout)
    assert (account["revision"], account["connection_intent"]) == (2, "connected")
    assert [r["id"] for r in json.loads(kefu("routes", "list", "--json").stdout)] == ["d1"]  # routes stay

    assert "account ding deleted" in kefu("accounts", "delete", "ding").stdout
    another_robot = [arg if arg != fake_dingtalk.robot_code else "another-robot" for arg in add_args(fake_dingtalk)]
    other = kefu(*another_robot[:-2], "op-add-other", "--yes", KEFU_SETUP_SECRET=fake_dingtalk.client_secret)
    assert other.returncode == 2 and "KEFU_ACCOUNT_EXISTS" in other.stdout  # the id's history is another robot's
    again = kefu(*add_args(fake_dingtalk, op="op-add-again"), KEFU_SETUP_SECRET=fake_dingtalk.client_secret)
    assert again.returncode == 0 and "account ding saved" in again.stdout, again.stdout + again.stderr
    [account] = json.loads(kefu("accounts", "list", "--json").stdout)
    assert (account["id"], account["identity"], account["revision"]) == ("ding", "ding-robot", 4)
