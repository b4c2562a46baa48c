"""How long `kefu` takes to start: `kefu --help`, and `kefu status` on a data dir whose store
exists (made before the timing), wall time, beside a bare `python -c pass` measured in the same
run (issue 40: --help under a second, status under 1.5 s). Each is run 5 times in a fresh
process; the median is printed.

    python -m bench.cli_start
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

RUNS = 5


def wall_s(argv: list[str], cwd: Path, env: dict[str, str]) -> float:
    times = []
    for _ in range(RUNS):
        started = time.perf_counter()
        subprocess.run(argv, cwd=cwd, env=env, capture_output=True, check=False, timeout=120)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    kefu = str(Path(sys.executable).parent / "kefu")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "cwd"
        folder.mkdir()
        env = {k: v for k, v in os.environ.items() if not k.startswith("KEFU_")}
        env["KEFU_DATA_DIR"] = str(Path(tmp) / "var")
        made = subprocess.run(
            [sys.executable, "-c", "from config import load_settings; from runtime.store import DeliveryStore;"
             " s = load_settings(); s.data_dir.mkdir(parents=True); DeliveryStore(s.delivery_path, s.delivery)"],
            env=env, capture_output=True, check=False,
        )  # fmt: skip
        if made.returncode:
            raise SystemExit(f"could not make the store: {made.stderr.decode()[-500:]}")
        floor = wall_s([sys.executable, "-c", "pass"], folder, env)
        table = Table("command", "median wall s", "minus bare python s", title=f"kefu start-up ({RUNS} runs each)")
        table.add_row("python -c pass", f"{floor:.2f}", "-")
        for argv in (["--help"], ["status"]):
            took = wall_s([kefu, *argv], folder, env)
            table.add_row(f"kefu {' '.join(argv)}", f"{took:.2f}", f"{took - floor:.2f}")
        left = sorted(p.name for p in folder.iterdir())  # the data dir is elsewhere: nothing belongs here
    Console().print(table)
    Console().print(f"files left in the working folder: {left or 'none'}")


if __name__ == "__main__":
    main()
