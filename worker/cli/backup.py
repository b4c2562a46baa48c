"""Backups (issue 42): `kefu backup DEST` takes a shard's record while it runs, `kefu restore SRC`
puts one in place on a data dir that holds nothing of the shard, verified first, and
`kefu restore-gap` lists what a restore held back for an operator (runtime.store.backup;
docs/recovery.md is the procedure for a lost host)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from runtime.errors import KefuError
from worker.cli.common import (
    N_,
    _,
    check_shard_name,
    cli,
    console,
    current_settings,
    open_store,
    operator_errors,
    print_table,
    shop_time,
)

if TYPE_CHECKING:  # loaded where used: `kefu --help` loads none of them
    from config import Settings
    from runtime.store.backup import GapReport, Manifest, Progress, RestoreResult

# Each stage's words on a progress line (msgids; runtime.store.backup.Stage).
STAGES = {
    "delivery": N_("delivery store copied"),
    "session-logs": N_("session logs copied"),
    "memory": N_("memory store copied"),
    "memory-images": N_("memory images copied"),
    "manifest": N_("manifest written"),
    "copied": N_("files copied and checksums verified"),
    "verified": N_("stores checked (integrity, schema versions, row counts)"),
    "marked": N_("restore window marked"),
    "placed": N_("files put in place"),
}
# The tables whose counts a backup's summary names (every table's are in the manifest).
SUMMARY_TABLES = {
    "customer": N_("customers"),
    "inbound_message": N_("messages"),
    "outbox_request": N_("replies"),
    "admission_batch": N_("batches"),
}


def _size(count: int) -> str:
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{count} B"


def _progress_to(err: Console) -> Callable[[Progress], None]:
    def report(step: Progress) -> None:
        err.print(
            _("{stage}: {files} files, {size}, {seconds} s").format(
                stage=_(STAGES[step.stage]), files=step.files, size=_size(step.bytes), seconds=f"{step.seconds:.1f}"
            ),
            style="dim",
            highlight=False,
            soft_wrap=True,
        )

    return report


@cli.command()
def backup(
    dest: Annotated[Path, typer.Argument(help="a new or empty folder for the backup, outside the data dir")],
    shard: Annotated[str | None, typer.Option(help="the shard to back up (default: KEFU_SHARD)")] = None,
) -> None:
    """Back up a shard while it runs: its stores, session logs and memory images, consistent
    and with a checksum manifest. Progress goes to stderr, the summary to stdout."""
    from runtime.store.backup import ShardFiles, take_backup

    settings = current_settings()
    with operator_errors():
        if shard is not None:
            check_shard_name(shard)
            settings = settings.model_copy(update={"shard": shard})
        manifest = take_backup(
            ShardFiles.of(settings),
            dest,
            settings.instance,
            _progress_to(Console(stderr=True)),
        )
    _backup_summary(manifest, dest.expanduser().resolve())


def _backup_summary(manifest: Manifest, dest: Path) -> None:
    size = sum(entry.size for entry in manifest.files)
    console.print(
        _("backup {id} of shard {shard}: {files} files, {size}, in {seconds} s").format(
            id=manifest.backup_id,
            shard=manifest.shard,
            files=len(manifest.files),
            size=_size(size),
            seconds=f"{manifest.took_s:.1f}",
        ),  # fmt: skip
        soft_wrap=True,
        highlight=False,
    )
    counts = ", ".join(f"{_(word)} {manifest.delivery.counts.get(table, 0)}" for table, word in SUMMARY_TABLES.items())
    console.print(
        _("delivery store: schema version {version}; {counts}").format(
            version=manifest.delivery.schema_version, counts=counts
        ),
        soft_wrap=True,
        highlight=False,
    )
    if manifest.memory is not None:
        console.print(
            _("memory store: schema version {version}; {folders} memories").format(
                version=manifest.memory.schema_version, folders=manifest.memory.counts.get("folder", 0)
            ),
            soft_wrap=True,
            highlight=False,
        )
    console.print(
        _(
            "written to {dest}; manifest.json lists every file's sha256. It holds the shop's credentials: keep it"
            " private."
        ).format(dest=dest),  # fmt: skip
        soft_wrap=True,
        highlight=False,
    )


def _refuse_if_served(settings: Settings, shard: str) -> None:
    """A restore beside a host that still serves the shard would answer its buyers a second time:
    refused while anyone holds the shard's lease (only Redis is seen from another host)."""
    if not settings.redis_broker:
        return  # the embedded broker's lease lives in the lost data dir
    from worker.coordination import coordinator_for

    holder = coordinator_for(settings).holder(shard)
    if holder is not None:
        raise KefuError(
            "KEFU_RESTORE_SHARD_SERVED",
            f"instance {holder.owner!r} holds shard {shard!r}'s lease (grant {holder.token}) now; a restore beside"
            " it would answer its buyers a second time",
            "stop that instance, or wait until `kefu shards` shows nobody serving the shard (a dead host's lease"
            " lapses within KEFU_SHARD_LEASE_S)",
        )


@cli.command()
def restore(
    src: Annotated[Path, typer.Argument(help="a folder `kefu backup` wrote")],
    data_dir: Annotated[
        Path | None,
        typer.Option("--data-dir", help="the data dir to restore into (default: KEFU_DATA_DIR); nothing of the shard"),
    ] = None,
) -> None:
    """Restore a shard from a backup, verified before anything is put in place (checksums,
    schema versions, integrity, row counts), into a data dir that holds nothing of the shard.
    What the lost host may have answered after the backup is held back: `kefu restore-gap`."""
    from runtime.store.backup import read_manifest, restore_backup

    settings = current_settings()
    target = (data_dir or settings.data_dir).expanduser().resolve()
    with operator_errors():
        manifest = read_manifest(src.expanduser().resolve())
        _refuse_if_served(settings, manifest.shard)
        result = restore_backup(src, target, _progress_to(Console(stderr=True)))
    _restore_summary(result)


def _restore_summary(result: RestoreResult) -> None:
    def say(line: str) -> None:
        console.print(line, soft_wrap=True, highlight=False)

    if result.resumed:
        say(_("an interrupted restore of backup {id} was completed").format(id=result.backup_id))
    restored = _(
        "restored backup {id} of shard {shard} into {data_dir}: {files} files, {size}, verified, in {seconds} s"
    )
    say(
        restored.format(
            id=result.backup_id,
            shard=result.shard,
            data_dir=result.data_dir,
            files=result.files,
            size=_size(result.bytes),
            seconds=f"{result.took_s:.1f}",
        )  # fmt: skip
    )
    say(
        _(
            "the gap: from the backup ({backup}) to the restore ({restored}); buyers' messages of it that a platform"
            " delivers again are stored and not answered automatically"
        ).format(backup=shop_time(result.backup_at), restored=shop_time(result.restored_at))
    )
    say(
        _(
            "held back for an operator: {inputs} waiting messages, {batches} admitted batches, {sends} replies now"
            " result-unknown (a platform's receipt or an operator settles each)"
        ).format(inputs=result.inputs_held, batches=result.batches_held, sends=result.sends_unknown)
    )
    for path in result.unlisted:
        say(_("not restored (the manifest does not list it): {path}").format(path=path))
    say(
        _("next: start the shard's worker (KEFU_SHARD={shard}); `kefu restore-gap` lists what was held back").format(
            shard=result.shard
        )
    )


@cli.command("restore-gap")
def restore_gap(as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """What the last restore from a backup held back for an operator: its window, and per
    conversation the messages and replies kefu did not handle automatically."""
    from runtime.store.backup import gap_report

    store = open_store()
    with operator_errors():
        report = gap_report(store)
    if as_json:
        print(json.dumps(report.model_dump(), ensure_ascii=False))
        return
    if not report.windows:
        console.print(_("this shard's store was never restored from a backup"))
        return
    _print_gap(report)


def _print_gap(report: GapReport) -> None:
    for window in report.windows:
        console.print(
            _("restore {id}: backup {backup} taken on {instance}; gap {start} → {end}").format(
                id=window.id,
                backup=window.backup_id,
                instance=window.source_instance,
                start=shop_time(window.backup_at),
                end=shop_time(window.restored_at),
            ),  # fmt: skip
            soft_wrap=True,
            highlight=False,
        )
    columns = [
        N_("customer"),
        N_("account"),
        N_("conversation"),
        N_("waiting messages"),
        N_("revoked batches"),
        N_("unknown replies"),
        N_("gap messages"),
    ]
    rows = [
        [str(h.customer_id), h.account_id or "-", h.conversation_id or "-", str(h.inputs), str(h.batches),
         str(h.sends), str(h.gap)]
        for h in report.held
    ]  # fmt: skip
    if rows:
        print_table(_("held back by the last restore"), columns, rows)
    else:
        console.print(_("the last restore held nothing back"))
    last = report.windows[-1]
    console.print(
        _(
            "messages a platform does not deliver again (DingTalk messages the lost host acknowledged after the"
            " backup) are not in the store: look for them in the platform between {start} and {end}"
        ).format(start=shop_time(last.backup_at), end=shop_time(last.restored_at)),
        soft_wrap=True,
        highlight=False,
    )
