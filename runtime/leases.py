"""Expiring named leases in the delivery store: one holder across processes and hosts.

A lease, unlike a process lock, frees itself when its holder dies: it simply expires.
"""

from __future__ import annotations

import os
import socket
import uuid

from runtime.store import DeliveryStore, now_ms
from runtime.store.sql import sql


def new_owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def acquire(store: DeliveryStore, name: str, owner: str, ttl_s: float) -> bool:
    at = now_ms()
    with store.write() as conn:
        changed = conn.execute(
            sql(
                "INSERT INTO lease (name, owner, expires_at) VALUES (:n, :o, :e)"
                " ON CONFLICT (name) DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at"
                " WHERE lease.expires_at < :now OR lease.owner = excluded.owner"
            ),
            {"n": name, "o": owner, "e": at + int(ttl_s * 1000), "now": at},
        ).rowcount
    return changed == 1


def release(store: DeliveryStore, name: str, owner: str) -> None:
    with store.write() as conn:
        conn.execute(sql("DELETE FROM lease WHERE name = :n AND owner = :o"), {"n": name, "o": owner})
