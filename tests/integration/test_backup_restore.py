"""A lost host recovered from its backup (issue 42, item 3; docs/recovery.md): the fault suite's
`backup-restore` short form with real workers, beat, `kefu listen`, `kefu backup` and
`kefu restore`, and the restore's refusal while another instance still serves the shard."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis

from config import Settings, load_settings
from tests.integration.conftest import REDIS_SECOND_DB
from tests.integration.test_faults import run_short, summary
from worker.cli import cli
from worker.coordination import RedisCoordinator

WALL_BOUND_S = 180  # the short form, on a CI machine shared by two cores


def test_faults_backup_restore_short(tmp_path: Path) -> None:
    """A backup under traffic, the host killed for good, the backup restored on a fresh data
    dir and served again: every buyer message answered exactly once by one of the hosts or held
    for an operator, every message after the backup recovered from the platform, none doubled."""
    report = run_short("backup-restore", tmp_path)
    assert report["passed"] and report["exit_status"] == 0, summary(report)
    rows = dict(report["rows"])
    assert rows["lost (neither answered nor held)"] == "0", summary(report)
    assert rows["doubled"].startswith("0 "), summary(report)
    assert report["faults"] == {"host lost": 1}, summary(report)
    assert report["wall_s"] < WALL_BOUND_S, summary(report)


@pytest.fixture
def settings(tmp_path: Path, redis_base_url: str) -> Settings:
    """Settings on a Redis broker: where another host's shard lease is seen."""
    url = f"{redis_base_url}/{REDIS_SECOND_DB}"
    redis.Redis.from_url(url).flushdb()
    return load_settings(data_dir=tmp_path / "var", broker_url=url)


def test_a_restore_is_refused_while_another_instance_serves_the_shard(kefu, settings, store, shop, tmp_path):
    assert kefu.invoke(cli, ["backup", str(tmp_path / "backup")]).exit_code == 0
    coordinator = RedisCoordinator(settings.broker_url)
    assert coordinator.grant(settings.shard, "the-lost-host", ttl_ms=60_000) is not None
    served = kefu.invoke(cli, ["restore", str(tmp_path / "backup"), "--data-dir", str(tmp_path / "new")])
    assert served.exit_code == 2 and "KEFU_RESTORE_SHARD_SERVED" in served.output, served.output
    assert "the-lost-host" in served.output and not (tmp_path / "new").exists()
    coordinator.release(settings.shard, "the-lost-host")
    done = kefu.invoke(cli, ["restore", str(tmp_path / "backup"), "--data-dir", str(tmp_path / "new")])
    assert done.exit_code == 0, done.output
    assert (tmp_path / "new" / settings.delivery_path.name).is_file()
