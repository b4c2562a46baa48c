"""Writer leases expire with their holder; bad state (a damaged or too-new store, an unbuilt
provider) stops startup with its code, and operator commands answer with it."""

from __future__ import annotations

import sqlite3
from contextlib import closing

import pytest
import sqlalchemy.exc
import typer
from celery.signals import beat_init, worker_init

from config import load_settings
from runtime.errors import KefuError
from runtime.store import DeliveryStore, leases
from runtime.store.clock import clock_at, now_ms
from runtime.store.failures import store_error
from runtime.store.migrations import LATEST_VERSION
from worker.broker import broker_config
from worker.celery_app import make_app
from worker.context import WorkerRuntime, build_provider


def test_a_lease_has_one_holder_until_it_expires(store):
    assert leases.acquire(store, "customer:1", "w1", ttl_s=0.2)
    assert not leases.acquire(store, "customer:1", "w2", ttl_s=0.2)
    assert leases.acquire(store, "customer:1", "w1", ttl_s=0.2)  # the holder renews
    with clock_at(now_ms() + 300):
        assert leases.acquire(store, "customer:1", "w2", ttl_s=0.2)  # the dead holder's lease lapsed
    leases.release(store, "customer:1", "w1")  # a former holder cannot release it
    assert not leases.acquire(store, "customer:1", "w3", ttl_s=0.2)
    leases.release(store, "customer:1", "w2")
    assert leases.acquire(store, "customer:1", "w3", ttl_s=0.2)


def test_an_openai_provider_without_endpoint_settings_stops_startup_naming_them(tmp_path):
    settings = load_settings(data_dir=tmp_path, agent={"provider": "openai", "openai": {"model": "m"}})
    with pytest.raises(KefuError) as raised:
        build_provider(settings)
    assert raised.value.code == "KEFU_PROVIDER_CONFIG"
    assert "KEFU_AGENT__OPENAI__BASE_URL, KEFU_AGENT__OPENAI__API_KEY" in str(raised.value)
    with pytest.raises(KefuError):
        WorkerRuntime(settings).check()


def test_the_rules_provider_loads_the_shipped_faq(tmp_path):
    runtime = WorkerRuntime(load_settings(data_dir=tmp_path))
    runtime.check()
    assert runtime.provider.name == "rules"
    assert runtime.store.user_version() >= 1


class _Sender:
    """What worker_init and beat_init send: a WorkController or a beat Service, with its app."""

    def __init__(self, app: object) -> None:
        self.app = app


def _overwrite_header(path) -> None:
    with open(path, "r+b") as file:
        file.write(b"NOT A SQLITE DB!")


def _sqlite_error(kind: type[sqlite3.DatabaseError], text: str, name: str) -> sqlite3.DatabaseError:
    error = kind(text)
    error.sqlite_errorname = name  # type: ignore[attr-defined]  # SQLite sets it on real errors
    return error


def test_a_store_with_an_overwritten_header_is_a_coded_error_naming_the_file(store, settings):
    store.close()
    _overwrite_header(settings.delivery_path)
    with pytest.raises(KefuError) as raised:
        WorkerRuntime(settings).check()
    assert raised.value.code == "KEFU_DELIVERY_STORE_UNREADABLE"
    assert f"{settings.delivery_path} cannot be used as a kefu delivery store (file is not a database)" in str(
        raised.value
    )


def test_a_data_dir_that_cannot_be_created_is_a_coded_error(tmp_path):
    (tmp_path / "a-file").write_text("")
    settings = load_settings(data_dir=tmp_path / "a-file" / "var")
    with pytest.raises(KefuError) as raised:
        DeliveryStore(settings.delivery_path, settings.delivery)
    assert raised.value.code == "KEFU_DELIVERY_STORE_UNREADABLE" and str(settings.delivery_path) in str(raised.value)


def test_a_busy_store_stays_a_busy_error_for_the_tasks_to_retry(tmp_path, monkeypatch):
    busy = sqlalchemy.exc.OperationalError(
        "PRAGMA", {}, _sqlite_error(sqlite3.OperationalError, "database is locked", "SQLITE_BUSY")
    )

    def locked(*_: object) -> None:
        raise busy

    monkeypatch.setattr(DeliveryStore, "_open", locked)
    settings = load_settings(data_dir=tmp_path)
    with pytest.raises(sqlalchemy.exc.OperationalError):
        DeliveryStore(settings.delivery_path, settings.delivery)
    assert store_error(settings.delivery_path, busy).code == "KEFU_DELIVERY_SQLITE_BUSY"  # type: ignore[union-attr]


def test_a_sql_error_that_is_not_the_file_stays_itself(tmp_path):
    clash = sqlalchemy.exc.IntegrityError(
        "INSERT", {}, _sqlite_error(sqlite3.IntegrityError, "UNIQUE constraint failed", "SQLITE_CONSTRAINT_UNIQUE")
    )
    assert store_error(tmp_path / "delivery.sqlite", clash) is None


@pytest.mark.parametrize("signal", [worker_init, beat_init])
@pytest.mark.parametrize("damage", ["header", "schema"])
def test_a_bad_store_stops_worker_and_beat_start_through_celery_signal_dispatch(
    store, settings, capsys, signal, damage
):
    """Celery's Signal.send logs and swallows a receiver's Exception: the check must leave
    by SystemExit, which is what makes `celery worker` and `celery beat` exit."""
    store.close()
    if damage == "header":
        _overwrite_header(settings.delivery_path)
    else:
        with sqlite3.connect(settings.delivery_path) as db:
            db.execute(f"PRAGMA user_version = {LATEST_VERSION + 1}")
    sender = _Sender(make_app(settings))
    with pytest.raises(SystemExit) as raised:
        signal.send(sender=sender)
    assert raised.value.code == 2
    code = "KEFU_DELIVERY_STORE_UNREADABLE" if damage == "header" else "KEFU_SCHEMA_TOO_NEW"
    assert capsys.readouterr().err.startswith(f"kefu: {code}: {settings.delivery_path}")


def test_a_healthy_store_passes_the_start_check(settings, capsys):
    worker_init.send(sender=_Sender(make_app(settings)))
    assert capsys.readouterr().err == ""


def test_the_redis_visibility_timeout_is_the_setting_everywhere_celery_reads_it(tmp_path):
    settings = load_settings(data_dir=tmp_path, broker_url="redis://127.0.0.1:1/0", broker_visibility_timeout_s=900)
    config = broker_config(settings)
    assert config["visibility_timeout"] == 900
    assert config["broker_transport_options"]["visibility_timeout"] == 900
    assert config["result_backend_transport_options"] == {"visibility_timeout": 900}


def test_operator_errors_turn_a_damaged_store_into_its_code_and_exit_2(settings, capsys):
    from worker.cli.common import operator_errors

    damaged = sqlalchemy.exc.DatabaseError(
        "SELECT", {}, _sqlite_error(sqlite3.DatabaseError, "database disk image is malformed", "SQLITE_CORRUPT")
    )
    with pytest.raises(typer.Exit) as raised, operator_errors():
        raise damaged
    assert raised.value.exit_code == 2
    assert "KEFU_DELIVERY_STORE_UNREADABLE" in capsys.readouterr().out
    with pytest.raises(sqlalchemy.exc.IntegrityError), operator_errors():
        raise sqlalchemy.exc.IntegrityError("INSERT", {}, sqlite3.IntegrityError("UNIQUE constraint failed"))


def test_operator_errors_name_the_file_a_damaged_page_was_found_in(settings, tmp_path, capsys):
    """Not every SQLite file is the delivery store: a memory store damaged past its header
    fails mid-command, and the operator is told which file, with the code of kefu's other files."""
    from runtime.store.connection import connect
    from worker.cli.common import operator_errors

    path = tmp_path / "memory.sqlite"
    with closing(sqlite3.connect(path)) as db:
        db.execute("CREATE TABLE note (text TEXT)")
        db.executemany("INSERT INTO note VALUES (?)", [("x" * 500,)] * 200)
        db.commit()
    with path.open("r+b") as file:
        file.seek(path.stat().st_size // 2 // 4096 * 4096)
        file.write(b"\xff" * 4096)
    with pytest.raises(typer.Exit) as raised, operator_errors():
        connect(path).execute("SELECT text FROM note").fetchall()
    assert raised.value.exit_code == 2
    printed = capsys.readouterr().out
    assert "KEFU_SQLITE_FILE_UNREADABLE" in printed and "memory.sqlite" in printed.replace("\n", "")
    assert "KEFU_DELIVERY" not in printed


def test_operator_errors_turn_an_unreachable_redis_into_its_code_and_exit_2(capsys):
    import redis

    from worker.cli.common import operator_errors

    with pytest.raises(typer.Exit) as raised, operator_errors():
        raise redis.ConnectionError("Error 111 connecting to 127.0.0.1:1.")
    assert raised.value.exit_code == 2
    assert "KEFU_COORDINATION_UNAVAILABLE" in capsys.readouterr().out


def test_the_heartbeat_leaves_a_lease_its_holder_renewed_by_writing_and_renews_one_it_did_not(store):
    """Each fenced write of a turn renews its lease: the heartbeat writes only for a holder
    that has not written for a quarter of the lease (one waiting on the model)."""

    def expires() -> int:
        with store.read() as conn:
            return int(conn.execute("SELECT expires_at FROM lease WHERE name = 'hb'").scalar_one())

    with leases.held(store, "hb", ttl_s=8) as fence:
        assert fence is not None
        with leases.fenced(store, fence):
            pass
        written = expires()
        wait_s = leases._renewals._renew(fence)
        assert expires() == written and wait_s is not None and 0 < wait_s <= 2.0
        fence.held_until -= 3000  # as if the holder had last written 3 s ago, more than a quarter
        assert leases._renewals._renew(fence) == 2.0
        assert expires() == fence.held_until >= written  # written again by the heartbeat
