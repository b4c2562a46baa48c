"""A store's transactions run on long-lived sqlite3 connections (runtime.store.connection):
SQLAlchemy's result methods and error types, a connection per transaction in progress on a
thread, each thread its own, and none shared across a fork."""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from contextlib import closing

import pytest
from sqlalchemy.exc import DatabaseError, IntegrityError, MultipleResultsFound, NoResultFound

from config import DeliverySettings
from runtime.store import DeliveryStore
from runtime.store.connection import connect, failed_file


def _two_accounts(store: DeliveryStore) -> None:
    with store.write() as conn:
        for name in ("a", "b"):
            conn.execute(
                "INSERT INTO account (id, platform, identity, created_at) VALUES (:id, 'simulator', :id, 0)",
                {"id": name},
            )


def test_results_read_as_sqlalchemy_reads_them(store):
    _two_accounts(store)
    with store.read() as conn:
        query = "SELECT id, platform FROM account ORDER BY id"
        assert conn.execute(query).all() == [("a", "simulator"), ("b", "simulator")]
        assert conn.execute(query).first() == ("a", "simulator")
        assert conn.execute(query).mappings().first() == {"id": "a", "platform": "simulator"}
        assert conn.execute(query).mappings().all()[1] == {"id": "b", "platform": "simulator"}
        assert conn.execute(query).scalars().all() == ["a", "b"]
        assert conn.execute("SELECT count(*) FROM account").scalar_one() == 2
        assert conn.execute("SELECT id FROM account WHERE id = :id", {"id": "z"}).scalar_one_or_none() is None
        assert conn.execute("SELECT id FROM account WHERE id = ?", ("b",)).scalar() == "b"
        with pytest.raises(MultipleResultsFound):
            conn.execute(query).one()
        with pytest.raises(NoResultFound):
            conn.execute("SELECT id FROM account WHERE id = 'z'").scalar_one()


def test_a_failed_statement_raises_sqlalchemys_error_without_its_parameters_and_writes_nothing(store):
    _two_accounts(store)
    with pytest.raises(IntegrityError) as failed:
        with store.write() as conn:
            conn.execute("UPDATE account SET identity = 'changed' WHERE id = 'a'")
            conn.execute(
                "INSERT INTO account (id, platform, identity, created_at) VALUES (:id, 'simulator', :secret, 0)",
                {"id": "a", "secret": "a-buyer-said-this"},
            )
    assert "a-buyer-said-this" not in str(failed.value)
    with store.read() as conn:
        assert conn.execute("SELECT identity FROM account WHERE id = 'a'").scalar_one() == "a"  # rolled back


def test_a_transaction_inside_another_on_one_thread_has_its_own_connection(store):
    _two_accounts(store)
    with store.read() as outer:
        before = outer.execute("SELECT count(*) FROM account").scalar_one()
        with store.write() as inner:
            inner.execute("DELETE FROM account WHERE id = 'b'")
        assert outer.execute("SELECT count(*) FROM account").scalar_one() == before  # its own snapshot
    with store.read() as conn:
        assert conn.execute("SELECT count(*) FROM account").scalar_one() == before - 1


def test_threads_share_a_pool_of_as_many_connections_as_transactions_run_at_once(store):
    """A thread pool of hundreds of turns must not hold a connection (and its page cache) per
    thread: threads that take turns reuse one connection; two at once take two."""
    seen: list[int] = []

    def use() -> None:
        with store.raw() as db:
            seen.append(id(db.dbapi))

    for _ in range(20):  # one after another, each on a thread of its own
        thread = threading.Thread(target=use)
        thread.start()
        thread.join()
    assert len(set(seen)) == 1
    inside = threading.Event()
    release = threading.Event()

    def hold() -> None:
        with store.raw() as db:
            seen.append(id(db.dbapi))
            inside.set()
            release.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    assert inside.wait(10)
    use()  # while the other thread holds the pooled one: a second connection
    release.set()
    holder.join()
    assert len(set(seen)) == 2
    store.close()
    with store.read() as conn:  # opened anew after close
        assert conn.execute("SELECT 1").scalar_one() == 1


def test_writers_of_one_process_queue_instead_of_timing_out(tmp_path):
    """Many threads writing at once (a thread pool's turns) each wait their turn in the process,
    even when one transaction outlasts the busy timeout many times over in all."""
    store = DeliveryStore(tmp_path / "d.sqlite", DeliverySettings(busy_timeout_ms=200))
    _two_accounts(store)
    errors: list[BaseException] = []

    def write(index: int) -> None:
        try:
            with store.write() as conn:
                conn.execute("UPDATE account SET identity = :w WHERE id = 'a'", {"w": f"w{index}"})
                time.sleep(0.01)  # 40 writers × 10 ms: twice the busy timeout in all
        except BaseException as error:  # noqa: BLE001 - collected for the assertion
            errors.append(error)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(40)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    store.close()


def test_a_forked_child_never_uses_its_parents_connections(store):
    with store.read() as conn:
        conn.execute("SELECT 1").scalar_one()
    pid = os.fork()
    if pid == 0:  # the child: its parent's store must refuse, not share SQLite's locks
        try:
            with store.read():
                os._exit(1)
        except RuntimeError:
            os._exit(0)
        os._exit(2)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    with store.read() as conn:
        assert conn.execute("SELECT 1").scalar_one() == 1


def test_close_lets_a_transaction_in_progress_finish_then_closes_its_connection(store):
    _two_accounts(store)
    with store.write() as conn:
        store.close()  # e.g. a worker shutting down while a listener thread commits a page
        conn.execute("DELETE FROM account WHERE id = 'b'")
    with pytest.raises(sqlite3.ProgrammingError):
        conn.dbapi.execute("SELECT 1")  # closed once it was free
    with store.read() as conn:
        assert conn.execute("SELECT count(*) FROM account").scalar_one() == 1  # the commit went through


def _open_files(path: object) -> int:
    """This process's descriptors on the store file (Linux /proc)."""
    return sum(1 for fd in os.listdir("/proc/self/fd") if os.path.realpath(f"/proc/self/fd/{fd}") == str(path))


def test_lease_renewals_share_one_thread_and_its_one_connection(store):
    from runtime.store import leases

    with store.read() as conn:
        conn.execute("SELECT 1").scalar_one()
    before = _open_files(store.path)
    threads = threading.active_count()
    for turn in range(5):  # each renewed every 25 ms
        with leases.held(store, f"customer:{turn}", ttl_s=0.1) as fence:
            assert fence is not None
            time.sleep(0.1)
            with store.read() as conn:  # renewed past its first duration
                expires_at = conn.execute("SELECT expires_at FROM lease WHERE name = ?", (fence.name,)).scalar_one()
            assert expires_at > leases.now_ms() + 50
    assert threading.active_count() <= threads + 1  # the process's renewal thread, if it was not there yet
    # SQLite may keep one closed connection's descriptor for reuse while the file has locks
    # in this process; what must not happen is one more open connection per lease held.
    assert _open_files(store.path) <= before + 1


def test_a_page_damaged_past_the_first_row_fails_as_the_statement_would_naming_its_file(tmp_path):
    """SQLite reads a page when a row needs it: a damaged one deep in a table fails while the
    rows are fetched, and that failure is the same error `execute` raises (what the CLI and the
    task retries catch), naming the file, never a raw driver error."""
    path = tmp_path / "damaged.sqlite"
    with closing(sqlite3.connect(path)) as db:
        db.execute("CREATE TABLE note (text TEXT)")
        db.executemany("INSERT INTO note VALUES (?)", [("x" * 500,)] * 200)
        db.commit()
    with path.open("r+b") as file:  # a page in the middle of the table, not the header
        file.seek(path.stat().st_size // 2 // 4096 * 4096)
        file.write(b"\xff" * 4096)
    rows = connect(path).execute("SELECT text FROM note")  # the first rows read fine
    with pytest.raises(DatabaseError) as raised:
        rows.fetchall()
    assert failed_file(raised.value) == path.resolve()
