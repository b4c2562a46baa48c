"""Importing kefu's shell makes nothing: the Celery app's broker folders are made when a process
first connects, so `kefu --help` (or any import) in an empty folder leaves it empty (issue 40)."""

from __future__ import annotations

import os
import subprocess
import sys


def test_importing_the_worker_and_the_cli_creates_no_file(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("KEFU_")}  # the default ./var data dir
    code = (
        "import worker, worker.cli, worker.console; from worker.cli import cli; cli(['--help'], standalone_mode=False)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "Usage" in done.stdout and list(tmp_path.iterdir()) == []


def test_the_cli_loads_no_model_client_platform_sdk_segmenter_store_broker_or_celery():
    """What `kefu --help` loads: each of these costs a tenth of a second or more at start."""
    heavy = {"openai", "dingtalk_stream", "rjieba", "sqlalchemy", "sqlmodel", "redis", "celery"}
    code = f"import sys, worker.cli; print(sorted({heavy!r} & set(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stderr
