"""Backups and restores of a shard (issue 42, item 3; runtime.store.backup, `kefu backup`,
`kefu restore`, `kefu restore-gap`): consistent under concurrent writes, verified before anything
is put in place, refused with a KEFU_ code (exit 2) when they cannot be trusted, and holding back
what a lost host may have answered after the backup."""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from pathlib import Path

import pytest
import zstandard

from config import Settings
from runtime.errors import KefuError
from runtime.inbound.ingest import committed_cursor, ingest_page
from runtime.outbox.requests import begin_attempt, register_outbound
from runtime.store import LATEST_VERSION, DeliveryStore
from runtime.store.backup import (
    CUSTOMER_ID_GAP,
    MANIFEST,
    SESSION_GAP,
    ShardFiles,
    consistent_length,
    gap_report,
    held_lines,
    read_manifest,
    restore_backup,
    take_backup,
)
from runtime.store.tables import OutboundIntent
from transports.simulator import SimulatedPlatform, SimulatorTransport
from worker.cli import cli

WAIT_S = 30.0


def files_of(settings: Settings) -> ShardFiles:
    return ShardFiles.of(settings)


def restored_settings(settings: Settings, data_dir: Path) -> Settings:
    return settings.model_copy(update={"data_dir": data_dir})


def customer_of(store: DeliveryStore, conversation: str) -> int:
    with store.read() as conn:
        return int(conn.execute("SELECT id FROM customer WHERE conversation_id = ?", (conversation,)).scalar_one())


def say_and_ingest(
    store: DeliveryStore,
    platform: SimulatedPlatform,
    transport: SimulatorTransport,
    shop: str,
    buyer: str,
    admit: int | None = 1000,
    at_ms: int | None = None,
) -> None:
    """A buyer's line on the platform, paged after the store's cursor and ingested (admitted
    unless `admit` is None)."""
    platform.buyer_says(shop, buyer, "买家", f"{buyer} 在吗", at_ms=at_ms)
    page = transport.page_after(shop, committed_cursor(store, shop, transport.stream_id))
    assert page is not None
    ingest_page(store, page, admit_batch_size=admit)


def first_session(store: DeliveryStore, customer: int) -> str:
    """The customer's first agent session begun (as a turn begins it): the store names its log."""
    from runtime.agent.sessions import begin_first_session

    with store.write() as conn:
        return begin_first_session(conn, customer, "rules").id


@pytest.fixture
def backed_up(settings: Settings, store: DeliveryStore, shop: str, platform, transport, tmp_path: Path) -> Path:
    """A backup of a small shop: a conversation, its session log, a memory image, and a log the
    store does not name (begun after the snapshot: left out)."""
    say_and_ingest(store, platform, transport, shop, "b1")
    session = first_session(store, customer_of(store, platform.conversation_for("b1")))
    settings.sessions_dir.mkdir(parents=True, exist_ok=True)
    frame = zstandard.ZstdCompressor(write_checksum=True).compress(b'{"seq": 0, "type": "system/message", "at": 1}\n')
    (settings.sessions_dir / f"{session}.jsonl.zst").write_bytes(frame)
    (settings.sessions_dir / "s77-1.jsonl.zst").write_bytes(frame)
    (settings.memory_images_dir / "scope-1").mkdir(parents=True)
    (settings.memory_images_dir / "scope-1" / "ab.png").write_bytes(b"\x89PNG\r\n\x1a\n image")
    take_backup(files_of(settings), tmp_path / "backup", "host-a")
    return tmp_path / "backup"


def rewrite_manifest(backup: Path, change) -> None:
    path = backup / MANIFEST
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def refused(code: str, backup: Path, target: Path) -> KefuError:
    with pytest.raises(KefuError) as caught:
        restore_backup(backup, target)
    assert caught.value.code == code, caught.value
    return caught.value


def nothing_of_the_shard(target: Path) -> bool:
    """Nothing was put in place, and no staging folder is left behind."""
    return not target.exists() or not any(target.iterdir())


# --- consistency under concurrent writes ------------------------------------------------------------


class Writers:
    """A page ingested per buyer message, one after another, and a session log appended, frame by
    frame, both until stopped: the shard at work while the backup runs."""

    def __init__(self, settings: Settings, store, shop, platform, transport) -> None:
        self.settings, self.store, self.shop, self.platform, self.transport = settings, store, shop, platform, transport
        self.pages = 0
        self.frames = 0
        self.changed = threading.Condition()
        self.stop = threading.Event()
        self.errors: list[BaseException] = []
        self.threads = [threading.Thread(target=self._guarded, args=(w,)) for w in (self._ingest, self._log)]

    def _guarded(self, work) -> None:
        try:
            work()
        except BaseException as error:  # surfaced by the test
            self.errors.append(error)
            with self.changed:
                self.changed.notify_all()

    def _ingest(self) -> None:
        while not self.stop.is_set():
            say_and_ingest(self.store, self.platform, self.transport, self.shop, f"b{self.pages % 5}")
            with self.changed:
                self.pages += 1
                self.changed.notify_all()

    def _log(self) -> None:
        from runtime.agent.session_log import SessionLog

        log = SessionLog(self.settings.sessions_dir / "s1-1.jsonl.zst")  # the first customer's first session
        while not self.stop.is_set():
            log.append("system/message", text=f"line {self.frames} " + "字" * 200)
            log.flush()
            with self.changed:
                self.frames += 1
                self.changed.notify_all()

    def wait_for(self, pages: int, frames: int) -> None:
        with self.changed:
            assert self.changed.wait_for(
                lambda: self.errors or (self.pages >= pages and self.frames >= frames), WAIT_S
            ), "the writers made no progress"
        assert not self.errors, self.errors

    def __enter__(self) -> Writers:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(WAIT_S)
        assert not self.errors, self.errors


def test_a_backup_under_concurrent_writes_restores_a_consistent_prefix(settings, store, shop, platform, transport):
    root = settings.data_dir.parent
    say_and_ingest(store, platform, transport, shop, "b0")
    session = first_session(store, customer_of(store, platform.conversation_for("b0")))
    with Writers(settings, store, shop, platform, transport) as writers:
        writers.wait_for(pages=3, frames=3)
        before = writers.pages

        def meanwhile(step) -> None:  # the writers go on between the stores' snapshots
            if step.stage == "delivery":
                writers.wait_for(pages=writers.pages + 2, frames=writers.frames + 2)

        manifest = take_backup(files_of(settings), root / "backup", "host-a", meanwhile)
        after = writers.pages
    result = restore_backup(root / "backup", root / "restored")
    restored = DeliveryStore(root / "restored" / settings.delivery_path.name)
    with restored.read() as conn:
        ids = sorted(
            int(m.removeprefix("sim-")) for (m,) in conn.execute("SELECT platform_message_id FROM inbound_message")
        )
        receipts = conn.execute("SELECT count(*) FROM page_receipt").scalar_one()
        cursor = conn.execute("SELECT cursor FROM provider_cursor").scalar_one()
    restored.close()
    # The first k messages with their pages and the cursor after the k-th: one commit's state.
    k = len(ids)
    assert ids == list(range(1, k + 1)) and receipts == k and cursor == str(k)
    assert before + 1 <= k <= after - 1  # taken while the writer wrote: after some pages, before others
    assert manifest.delivery.counts["inbound_message"] == k and result.files == len(manifest.files)
    db = sqlite3.connect(root / "restored" / settings.delivery_path.name)
    assert db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    db.close()
    from runtime.agent.session_log import SessionLog

    copied = SessionLog(root / "restored" / "sessions" / settings.shard / f"{session}.jsonl.zst")
    events = copied.load()
    assert copied.torn_bytes == 0 and [e.seq for e in events] == list(range(len(events)))
    assert 3 <= len(events) <= writers.frames
    # The customer goes on in a new session holding the old one whole, and a note for the model.
    forked = SessionLog(root / "restored" / "sessions" / settings.shard / f"s1-{1 + SESSION_GAP}.jsonl.zst").load()
    assert [e.type for e in forked[len(events) :]] == ["session/end-seed", "developer/message"]
    assert forked[: len(events)] == events


def test_a_session_log_is_copied_up_to_its_last_whole_frame():
    compressor = zstandard.ZstdCompressor(write_checksum=True)
    one, two = compressor.compress(b'{"seq": 0}\n'), compressor.compress(b'{"seq": 1}\n' * 20)
    assert consistent_length(one + two) == len(one + two)
    assert consistent_length(one + two[: len(two) // 2]) == len(one)  # a frame being written: left out
    assert consistent_length(two[:5]) == 0
    damaged = one + b"\x00" * 7 + two  # damage before the tail: kept whole, as evidence
    assert consistent_length(damaged) == len(damaged)


# --- what the backup holds ------------------------------------------------------------------------------


def test_the_manifest_lists_every_file_with_its_checksum_and_the_stores_facts(settings, backed_up):
    manifest = read_manifest(backed_up)
    kinds = {entry.path: entry.kind for entry in manifest.files}
    assert kinds == {
        settings.delivery_path.name: "delivery",
        f"sessions/{settings.shard}/s1-1.jsonl.zst": "session-log",
        f"memory-images/{settings.shard}/scope-1/ab.png": "memory-image",
    }
    assert manifest.delivery.schema_version == LATEST_VERSION and manifest.delivery.counts["inbound_message"] == 1
    assert manifest.memory is None and manifest.shard == settings.shard and manifest.instance == "host-a"
    assert manifest.delivery_at >= manifest.started_at and manifest.took_s >= 0
    assert oct((backed_up / settings.delivery_path.name).stat().st_mode & 0o777) == "0o600"
    assert oct(backed_up.stat().st_mode & 0o777) == "0o700"


def test_a_backup_goes_into_a_new_or_empty_folder_outside_the_data_dir(settings, store, tmp_path):
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "old.txt").write_text("x")
    for dest, code in [
        (tmp_path / "used", "KEFU_BACKUP_DEST_NOT_EMPTY"),
        (settings.data_dir / "backups", "KEFU_BACKUP_DEST_IN_DATA_DIR"),
    ]:
        with pytest.raises(KefuError) as caught:
            take_backup(files_of(settings), dest, "host-a")
        assert caught.value.code == code
    assert sorted(p.name for p in (tmp_path / "used").iterdir()) == ["old.txt"]
    assert not (settings.data_dir / "backups").exists()


# --- restore refusals -------------------------------------------------------------------------------------


def test_a_restore_refuses_a_data_dir_that_holds_the_shard(settings, backed_up):
    before = settings.delivery_path.read_bytes()
    refused("KEFU_RESTORE_TARGET_NOT_EMPTY", backed_up, settings.data_dir)
    assert settings.delivery_path.read_bytes() == before
    assert not list(settings.data_dir.glob(".kefu-restore*"))


def test_a_corrupt_file_is_refused_before_anything_is_in_place(settings, backed_up, tmp_path):
    log = backed_up / "sessions" / settings.shard / "s1-1.jsonl.zst"
    data = bytearray(log.read_bytes())
    data[len(data) // 2] ^= 0xFF
    log.write_bytes(bytes(data))
    error = refused("KEFU_BACKUP_CHECKSUM_MISMATCH", backed_up, tmp_path / "target")
    assert "s1-1.jsonl.zst" in str(error)
    assert nothing_of_the_shard(tmp_path / "target")


def test_a_tampered_checksum_is_refused(settings, backed_up, tmp_path):
    def tamper(manifest) -> None:
        entry = next(f for f in manifest["files"] if f["kind"] == "delivery")
        entry["sha256"] = "0" * 64

    rewrite_manifest(backed_up, tamper)
    refused("KEFU_BACKUP_CHECKSUM_MISMATCH", backed_up, tmp_path / "target")
    assert nothing_of_the_shard(tmp_path / "target")


def test_a_damaged_store_that_matches_its_checksum_fails_the_integrity_check(settings, backed_up, tmp_path):
    import hashlib

    path = backed_up / settings.delivery_path.name
    data = bytearray(path.read_bytes())
    page_size = int.from_bytes(data[16:18], "big")
    for offset in range(2 * page_size, len(data), page_size):  # every page but the schema's: garbage
        data[offset + 8 : offset + 40] = b"\xa5" * 32
    path.write_bytes(bytes(data))

    def matching(manifest) -> None:
        entry = next(f for f in manifest["files"] if f["kind"] == "delivery")
        entry["sha256"], entry["size"] = hashlib.sha256(data).hexdigest(), len(data)

    rewrite_manifest(backed_up, matching)
    refused("KEFU_BACKUP_CORRUPT", backed_up, tmp_path / "target")
    assert nothing_of_the_shard(tmp_path / "target")


def test_counts_that_differ_from_the_manifest_are_refused(backed_up, tmp_path):
    rewrite_manifest(backed_up, lambda m: m["delivery"]["counts"].update(inbound_message=7))
    error = refused("KEFU_BACKUP_COUNT_MISMATCH", backed_up, tmp_path / "target")
    assert "inbound_message" in str(error)
    assert nothing_of_the_shard(tmp_path / "target")


def test_a_too_new_schema_is_refused(settings, backed_up, tmp_path):
    rewrite_manifest(backed_up, lambda m: m["delivery"].update(schema_version=LATEST_VERSION + 1))
    refused("KEFU_BACKUP_SCHEMA_TOO_NEW", backed_up, tmp_path / "target")
    rewrite_manifest(backed_up, lambda m: m.update(format=2))
    refused("KEFU_BACKUP_SCHEMA_TOO_NEW", backed_up, tmp_path / "target")
    assert nothing_of_the_shard(tmp_path / "target")


def test_a_file_of_a_newer_kefu_is_refused_even_when_the_manifest_hides_it(settings, backed_up, tmp_path):
    import hashlib

    path = backed_up / settings.delivery_path.name
    db = sqlite3.connect(path)
    db.execute(f"PRAGMA user_version = {LATEST_VERSION + 1}")
    db.close()
    data = path.read_bytes()

    def matching(manifest) -> None:
        entry = next(f for f in manifest["files"] if f["kind"] == "delivery")
        entry["sha256"], entry["size"] = hashlib.sha256(data).hexdigest(), len(data)

    rewrite_manifest(backed_up, matching)
    refused("KEFU_BACKUP_SCHEMA_TOO_NEW", backed_up, tmp_path / "target")


def test_a_missing_or_invalid_manifest_is_refused(settings, backed_up, tmp_path):
    rewrite_manifest(backed_up, lambda m: m["files"][0].update(path="../../etc/passwd"))
    refused("KEFU_BACKUP_MANIFEST_INVALID", backed_up, tmp_path / "target")
    (backed_up / MANIFEST).write_text("{not json")
    refused("KEFU_BACKUP_MANIFEST_INVALID", backed_up, tmp_path / "target")
    (backed_up / MANIFEST).unlink()
    refused("KEFU_BACKUP_MANIFEST_MISSING", backed_up, tmp_path / "target")
    assert nothing_of_the_shard(tmp_path / "target")


def test_a_listed_file_that_is_missing_is_refused(settings, backed_up, tmp_path):
    (backed_up / "memory-images" / settings.shard / "scope-1" / "ab.png").unlink()
    refused("KEFU_BACKUP_FILE_MISSING", backed_up, tmp_path / "target")
    assert nothing_of_the_shard(tmp_path / "target")


# --- what a restore holds back ----------------------------------------------------------------------------


def register(store: DeliveryStore, customer: int, request_id: str, conversation: str) -> None:
    intent = OutboundIntent(
        request_id=request_id, customer_id=customer, account_id="shop", conversation_id=conversation,
        origin="manual", body="您好",
    )  # fmt: skip
    with store.write() as conn:
        register_outbound(conn, intent)


def test_a_restore_holds_back_what_the_lost_host_may_have_answered(settings, store, shop, platform, transport):
    root = settings.data_dir.parent
    say_and_ingest(store, platform, transport, shop, "waiting", admit=None)  # input no batch claimed yet
    say_and_ingest(store, platform, transport, shop, "admitted")  # a batch claimed, its turn not run
    customer = customer_of(store, platform.conversation_for("admitted"))
    register(store, customer, "in-flight", platform.conversation_for("admitted"))
    begin_attempt(store, "in-flight", "host-a:1", 60)  # sending: its outcome never recorded
    register(store, customer, "not-tried", platform.conversation_for("admitted"))  # waits for it
    take_backup(files_of(settings), root / "backup", "host-a")
    result = restore_backup(root / "backup", root / "restored")
    assert (result.inputs_held, result.batches_held, result.sends_unknown) == (1, 1, 2)

    restored = DeliveryStore(root / "restored" / settings.delivery_path.name)
    with restored.read() as conn:
        lines = dict(conn.execute("SELECT conversation_id, state FROM inbound_message").all())
        batches = conn.execute("SELECT state FROM admission_batch").scalars().all()
        sends = dict(conn.execute("SELECT request_id, state || ' ' || error_code FROM outbox_request").all())
        attempts = conn.execute("SELECT request_id, state, owner FROM outbox_attempt ORDER BY request_id").all()
        alerts = conn.execute("SELECT request_id FROM alert WHERE kind = 'send-unknown' ORDER BY 1").scalars().all()
    assert set(lines.values()) == {"suppressed"} and batches == ["revoked"]
    assert sends == {r: "result-unknown KEFU_RESTORED_SEND_UNKNOWN" for r in ("not-tried", "in-flight")}
    assert attempts == [("in-flight", "unknown", "host-a:1"), ("not-tried", "unknown", "restore")]
    assert alerts == ["in-flight", "not-tried"]
    with restored.read() as conn:  # numbers the lost host may have given after the backup are skipped
        sessions = dict(conn.execute("SELECT id, session_id FROM customer").all())
    assert sessions == {c: f"s{c}-{SESSION_GAP}" for c in sessions}
    report = gap_report(restored)
    assert [w.backup_id for w in report.windows] == [result.backup_id]
    held = {h.conversation_id: (h.inputs, h.batches, h.sends, h.gap) for h in report.held}
    assert held == {
        platform.conversation_for("waiting"): (1, 0, 0, 0),
        platform.conversation_for("admitted"): (0, 1, 2, 0),
    }

    # The platform delivers the window again: a line written before the restore is kept and not
    # admitted; one written after it is answered as ever.
    say_and_ingest(restored, platform, transport, shop, "in-gap", at_ms=result.restored_at - 1)
    say_and_ingest(restored, platform, transport, shop, "after")
    with restored.read() as conn:
        states = dict(conn.execute("SELECT conversation_id, state FROM inbound_message").all())
    assert states[platform.conversation_for("in-gap")] == "suppressed"
    assert states[platform.conversation_for("after")] == "claimed"
    new_ids = [customer_of(restored, platform.conversation_for(b)) for b in ("in-gap", "after")]
    assert new_ids == [max(sessions) + CUSTOMER_ID_GAP + 1, max(sessions) + CUSTOMER_ID_GAP + 2]
    gap = {h.conversation_id: h.gap for h in gap_report(restored).held}
    assert gap[platform.conversation_for("in-gap")] == 1
    assert len(held_lines(restored, result.window_id)) == 3  # waiting, admitted, in-gap
    restored.close()


def test_a_store_never_restored_admits_old_input_as_ever(settings, store, shop, platform, transport):
    say_and_ingest(store, platform, transport, shop, "late", at_ms=1_000)
    with store.read() as conn:
        assert conn.execute("SELECT state FROM inbound_message").scalar_one() == "claimed"
    assert gap_report(store).windows == []


def test_paths_into_the_old_data_dir_follow_the_restore(settings, store, shop, platform, transport, tmp_path):
    say_and_ingest(store, platform, transport, shop, "b1")
    customer = customer_of(store, platform.conversation_for("b1"))
    kept = settings.sessions_dir / "damaged" / "s9-x.jsonl.zst"
    with store.write() as conn:
        conn.execute(
            "INSERT INTO damaged_session (session_id, customer_id, replaced_by, kept_path, problem, detected_at)"
            " VALUES ('s9-x', ?, 's9-y', ?, 'torn', 1)",
            (customer, str(kept)),
        )
    take_backup(files_of(settings), tmp_path / "backup", "host-a")
    restore_backup(tmp_path / "backup", tmp_path / "elsewhere")
    db = sqlite3.connect(tmp_path / "elsewhere" / settings.delivery_path.name)
    (path,) = db.execute("SELECT kept_path FROM damaged_session").fetchone()
    db.close()
    assert path == str(tmp_path / "elsewhere" / "sessions" / settings.shard / "damaged" / "s9-x.jsonl.zst")


def test_an_interrupted_restore_is_completed_by_running_it_again(settings, backed_up, tmp_path, monkeypatch):
    import runtime.store.backup as backup

    target = tmp_path / "target"
    real_rename = os.rename

    def crash_on_the_store(source, destination) -> None:
        if Path(destination).name == settings.delivery_path.name:
            raise OSError("power lost")
        real_rename(source, destination)

    monkeypatch.setattr(backup.os, "rename", crash_on_the_store)
    with pytest.raises(OSError):
        restore_backup(backed_up, target)
    assert not (target / settings.delivery_path.name).exists()  # no record yet: the shard is not there
    monkeypatch.setattr(backup.os, "rename", real_rename)
    result = restore_backup(backed_up, target)
    assert result.resumed and (target / settings.delivery_path.name).is_file()
    assert (target / "sessions" / settings.shard / "s1-1.jsonl.zst").is_file()
    assert not list(target.glob(".kefu-restore*"))
    refused("KEFU_RESTORE_TARGET_NOT_EMPTY", backed_up, target)


# --- the commands -------------------------------------------------------------------------------------------


def test_the_commands_back_up_restore_and_list_the_gap(kefu, settings, shop, monkeypatch, tmp_path):
    from worker.celery_app import app

    taken = kefu.invoke(cli, ["backup", str(tmp_path / "backup")])
    assert taken.exit_code == 0, taken.output
    assert "delivery store copied" in taken.output and "manifest.json lists every file's sha256" in taken.output
    again = kefu.invoke(cli, ["backup", str(tmp_path / "backup")])
    assert again.exit_code == 2 and "KEFU_BACKUP_DEST_NOT_EMPTY" in again.output
    occupied = kefu.invoke(cli, ["restore", str(tmp_path / "backup")])  # the data dir holds the shard
    assert occupied.exit_code == 2 and "KEFU_RESTORE_TARGET_NOT_EMPTY" in occupied.output
    never = kefu.invoke(cli, ["restore-gap"])
    assert never.exit_code == 0 and "never restored" in never.output

    done = kefu.invoke(cli, ["restore", str(tmp_path / "backup"), "--data-dir", str(tmp_path / "new")])
    assert done.exit_code == 0, done.output
    assert "restored backup" in done.output and "the gap: from the backup" in done.output
    monkeypatch.setattr(app, "kefu_settings", restored_settings(settings, tmp_path / "new"))
    monkeypatch.setattr(app, "kefu_runtime", None)
    gap = kefu.invoke(cli, ["restore-gap", "--json"])
    assert gap.exit_code == 0, gap.output
    assert [w["backup_id"] for w in json.loads(gap.output)["windows"]] == [read_manifest(tmp_path / "backup").backup_id]
    listed = kefu.invoke(cli, ["restore-gap"])
    assert "the last restore held nothing back" in listed.output and "look for them in the platform" in listed.output


def test_a_refused_restore_prints_its_code_and_exits_2(kefu, settings, shop, tmp_path):
    assert kefu.invoke(cli, ["backup", str(tmp_path / "backup")]).exit_code == 0
    rewrite_manifest(tmp_path / "backup", lambda m: m["files"][0].update(sha256="f" * 64))
    refused_run = kefu.invoke(cli, ["restore", str(tmp_path / "backup"), "--data-dir", str(tmp_path / "new")])
    assert refused_run.exit_code == 2 and "KEFU_BACKUP_CHECKSUM_MISMATCH" in refused_run.output
    assert "Traceback" not in refused_run.output
    assert nothing_of_the_shard(tmp_path / "new")
    missing = kefu.invoke(cli, ["restore", str(tmp_path / "nowhere"), "--data-dir", str(tmp_path / "new")])
    assert missing.exit_code == 2 and "KEFU_BACKUP_MANIFEST_MISSING" in missing.output
