"""The data dir is its user's alone: what a kefu process creates is 0600 (folders 0700), and
what an older kefu left open is reported at startup (issue 38, item 8)."""

from __future__ import annotations

import logging
import os
import stat
import subprocess
import sys
from pathlib import Path

from worker.private_files import open_to_others, warn_if_open

MAKE_FILES = """
import os, sys
from pathlib import Path
os.umask(0o022)  # as a shell usually starts it
from worker import app  # noqa: F401  (what `celery -A worker` loads: the kefu process's setup)
from config import load_settings
from runtime.agent.session_log import SessionLog
from runtime.store import DeliveryStore
settings = load_settings(data_dir=Path(sys.argv[1]))
store = DeliveryStore(settings.delivery_path, settings.delivery)
with store.write() as conn:
    conn.execute("CREATE TABLE IF NOT EXISTS probe (x)")
log = SessionLog(settings.sessions_dir / "s1-1.jsonl.zst")
log.append("user/message", source="b1", text="我的地址是……")
log.flush()
store.close()
"""


def test_what_a_kefu_process_creates_is_its_users_alone(tmp_path: Path) -> None:
    data_dir = tmp_path / "var"
    made = subprocess.run([sys.executable, "-c", MAKE_FILES, str(data_dir)], capture_output=True, text=True)
    assert made.returncode == 0, made.stderr
    created = [data_dir, *data_dir.rglob("*")]
    assert any(path.name.endswith(".zst") for path in created) and any(".sqlite" in path.name for path in created)
    assert open_to_others(data_dir) == []
    assert all(stat.S_IMODE(path.stat().st_mode) in (0o600, 0o700) for path in created)


def test_what_an_older_kefu_left_open_is_reported_at_startup(tmp_path: Path, caplog) -> None:
    data_dir = tmp_path / "var"
    (data_dir / "sessions").mkdir(parents=True)
    old = data_dir / "sessions" / "s1-1.jsonl.zst"
    old.write_bytes(b"")
    os.chmod(data_dir, 0o700)
    os.chmod(data_dir / "sessions", 0o700)
    os.chmod(old, 0o644)
    with caplog.at_level(logging.WARNING):
        warn_if_open(data_dir)
    assert "KEFU_DATA_DIR_OPEN" in caplog.text and str(old) in caplog.text
    os.chmod(old, 0o600)
    assert open_to_others(data_dir) == []


def test_what_a_kefu_command_creates_is_its_users_alone(tmp_path: Path) -> None:
    data_dir = tmp_path / "var"
    env = {k: v for k, v in os.environ.items() if not k.startswith("KEFU_")} | {"KEFU_DATA_DIR": str(data_dir)}
    kefu = str(Path(sys.executable).parent / "kefu")
    listed = subprocess.run(
        [kefu, "operators", "list"], env=env, capture_output=True, text=True, preexec_fn=lambda: os.umask(0o022)
    )
    assert listed.returncode == 0, listed.stderr
    assert any(".sqlite" in path.name for path in data_dir.iterdir()) and open_to_others(data_dir) == []
