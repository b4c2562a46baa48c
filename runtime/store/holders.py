"""Who holds a lease, named so that others can tell when it is gone.

A lease frees itself by expiring, which makes its length the time a dead holder's work waits.
kefu's writer leases are short and heartbeated, and on top of that a holder's name says which
process it is: host, kernel boot, pid namespace, pid and the process's start time. A process on
the same host and in the same pid namespace can then see for certain that a holder is gone (no
process with its pid and start time exists any more: a pid reused by another process has
another start time) and release its leases at once, instead of waiting them out.
The kernel's boot id, random per boot, is what says "the same machine": two hosts may share a
name, and every host's first pid namespace has the same inode. Another machine's holder, a
holder from before a reboot, another container's, or one /proc cannot tell about is never
concluded gone: its lease expires as before.

    <host>:<pid>:<nonce>:<boot>:<pid namespace>:<start ticks>
"""

from __future__ import annotations

import os
import socket
import uuid
from dataclasses import dataclass
from pathlib import Path

UNKNOWN = "-"


@dataclass(frozen=True)
class ProcessId:
    host: str
    pid: int
    boot: str  # /proc/sys/kernel/random/boot_id, shortened; UNKNOWN off Linux
    pid_namespace: str  # the inode of /proc/self/ns/pid; UNKNOWN where unreadable
    started: str  # /proc/<pid>/stat's start time, in clock ticks after boot; UNKNOWN if unreadable

    @property
    def known(self) -> bool:
        return UNKNOWN not in (self.boot, self.pid_namespace, self.started)


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None


def start_ticks(pid: int) -> str | None:
    """When the process `pid` started (clock ticks after boot), or None when there is none.
    The command name in field 2 may hold spaces and parentheses: fields are read after its end."""
    stat = _read(f"/proc/{pid}/stat")
    if stat is None:
        return None
    fields = stat.rsplit(")", 1)[-1].split()
    return fields[19] if len(fields) > 19 else None  # field 22 of the line, 20 after the name


def _boot() -> str:
    boot = _read("/proc/sys/kernel/random/boot_id")
    return boot.replace("-", "")[:12] if boot else UNKNOWN


def _pid_namespace() -> str:
    try:
        link = os.readlink("/proc/self/ns/pid")  # "pid:[4026531836]"
    except OSError:
        return UNKNOWN
    return link.partition("[")[2].rstrip("]") or UNKNOWN


_this: ProcessId | None = None


def this_process() -> ProcessId:
    """This process, read once per process (a forked child reads its own)."""
    global _this
    pid = os.getpid()
    if _this is None or _this.pid != pid:
        _this = ProcessId(socket.gethostname(), pid, _boot(), _pid_namespace(), start_ticks(pid) or UNKNOWN)
    return _this


def new_owner() -> str:
    """A holder name for one hold by this process: unique, and telling which process it is."""
    me = this_process()
    return f"{me.host}:{me.pid}:{uuid.uuid4().hex[:8]}:{me.boot}:{me.pid_namespace}:{me.started}"


def parse(owner: str) -> ProcessId | None:
    """The process an owner name names; None for names of another form (older kefu, a
    hand-made one): those are never taken for gone."""
    parts = owner.split(":")
    if len(parts) != 6 or not parts[1].isdigit():
        return None
    host, pid, _nonce, boot, namespace, started = parts
    return ProcessId(host, int(pid), boot, namespace, started)


def gone(owner: str) -> bool:
    """True only on positive evidence that the holder process no longer runs: it ran on this
    very kernel boot and pid namespace, and now its pid has no process (the kernel says so) or
    one with another start time (the pid was reused). A process this one may not look at (a
    /proc mounted hidepid, another user's) is not gone: nothing is concluded from silence."""
    holder, me = parse(owner), this_process()
    if holder is None or not holder.known or not me.known:
        return False
    if (holder.host, holder.boot, holder.pid_namespace) != (me.host, me.boot, me.pid_namespace):
        return False
    try:
        os.kill(holder.pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass  # it exists, under another user: its start time tells whether it is the holder
    started = start_ticks(holder.pid)
    return started is not None and started != holder.started
