"""A moving account's credential travels sealed to the target shard's key (SPEC 3.12; issue 42,
item 9).

Why. The shards share nothing but the coordination store (Redis; no home-made cluster protocol,
SPEC 3.12), so a move's credential has to pass through it, and nobody who only reads Redis (a
dump, a replica, `MONITOR`, a backup of its RDB file) may read the secret there. Each shard has
a key pair: the private half is made in, and never leaves, the shard's own delivery store (where
the credentials it protects live anyway); the public half is published in Redis
(`shard-key:<shard>`, at every directory pass and whenever the shard imports). No setting is
shared between hosts for this.

How. libsodium's sealed box (PyNaCl: X25519 with a fresh one-time sender key per seal, then
XSalsa20-Poly1305), so kefu assembles no cryptography of its own. A sealed box carries no
associated data: the move id and account id are sealed with the secret and checked after
opening, so a seal is never opened for another move or account.

The limit: someone who can *write* Redis can publish a key of their own in place of a shard's
(or seal a credential of their own); they can also queue tasks to every worker, so this defends
against reading Redis, not against owning it.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from typing import Literal

from nacl.exceptions import CryptoError
from nacl.public import PrivateKey, PublicKey, SealedBox
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from runtime.errors import KefuError
from runtime.ports import Coordination
from runtime.store import DeliveryStore, now_ms, queries


def key_blob(shard: str) -> str:
    """Where a shard's public key is published in the coordination store."""
    return f"shard-key:{shard}"


class ShardKey(BaseModel):
    """A shard's X25519 key pair as its own store keeps it (hex, 32 bytes each)."""

    model_config = ConfigDict(frozen=True)
    public_key: str
    private_key: str = Field(repr=False)

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.public_key)


def fingerprint(public_key: str) -> str:
    return hashlib.sha256(bytes.fromhex(public_key)).hexdigest()


def shard_key(store: DeliveryStore, shard: str) -> ShardKey:
    """The shard's key pair, made (once) in its store the first time it is asked for."""
    with store.read() as conn:
        row = conn.execute(queries.shard_key.KEY, {"s": shard}).first()
    if row is None:
        private = PrivateKey.generate()
        made = {"s": shard, "pub": bytes(private.public_key).hex(), "priv": bytes(private).hex(), "at": now_ms()}
        with store.write() as conn:
            conn.execute(queries.shard_key.CREATE, made)
            row = conn.execute(queries.shard_key.KEY, {"s": shard}).first()
    assert row is not None
    return ShardKey(public_key=row[0], private_key=row[1])


def publish_shard_key(store: DeliveryStore, coordination: Coordination, shard: str) -> ShardKey:
    """Make sure the coordination store names this shard's public key (a read when it does)."""
    key = shard_key(store, shard)
    wanted = json.dumps({"shard": shard, "public_key": key.public_key}).encode()
    if coordination.blob(key_blob(shard)) != wanted:
        coordination.put_blob(key_blob(shard), wanted)
    return key


def published_key(coordination: Coordination, shard: str) -> str | None:
    """The public key `shard` published (hex), if any that reads as one."""
    raw = coordination.blob(key_blob(shard))
    try:
        found = json.loads(raw) if raw is not None else None
        public = found["public_key"] if isinstance(found, dict) and found.get("shard") == shard else None
        return public if isinstance(public, str) and len(bytes.fromhex(public)) == PublicKey.SIZE else None
    except (ValueError, KeyError):
        return None


class Sealed(BaseModel):
    """What the coordination store holds of a credential: nothing readable without the key."""

    model_config = ConfigDict(extra="forbid")
    version: Literal[1]
    key: str  # the fingerprint of the target's public key it is sealed to (names a stale key)
    box: str  # the sealed box (base64) of a SealedCredential


class SealedCredential(BaseModel):
    """What is inside the box: the secret and the move and account it is for."""

    model_config = ConfigDict(extra="forbid")
    move_id: str
    account_id: str
    secret: str


class SealBroken(KefuError):
    def __init__(self, why: str) -> None:
        super().__init__(
            "KEFU_PLACEMENT_CREDENTIAL_SEAL",
            f"the moving account's sealed credential cannot be opened here: {why}",
            "the source seals it again to this shard's current key",
        )


def seal(secret: str, target_public_key: str, move_id: str, account_id: str) -> bytes:
    """`secret` sealed to the target's public key, for this move of this account."""
    inside = SealedCredential(move_id=move_id, account_id=account_id, secret=secret)
    try:
        box = SealedBox(PublicKey(bytes.fromhex(target_public_key))).encrypt(inside.model_dump_json().encode())
    except (ValueError, CryptoError):
        raise SealBroken("the target's published key is not a usable key") from None
    sealed = Sealed(version=1, key=fingerprint(target_public_key), box=base64.b64encode(box).decode())
    return sealed.model_dump_json().encode()


def open_sealed(data: bytes, key: ShardKey, move_id: str, account_id: str) -> str:
    """The secret, if `data` was sealed to `key` for this move of this account and not changed
    since; else SealBroken (sealed to an earlier key of this shard, or for another move, or damaged)."""
    try:
        sealed = Sealed.model_validate_json(data)
        box = base64.b64decode(sealed.box, validate=True)
    except (ValidationError, binascii.Error, ValueError):
        raise SealBroken("it is not a sealed credential") from None
    if sealed.key != key.fingerprint:
        raise SealBroken("it is sealed to another key than this shard's")
    try:
        opened = SealedBox(PrivateKey(bytes.fromhex(key.private_key))).decrypt(box)
    except CryptoError:
        raise SealBroken("it does not open with this shard's key (changed, or damaged)") from None
    try:
        inside = SealedCredential.model_validate_json(opened)
    except ValidationError:
        raise SealBroken("it does not read as a credential") from None
    if (inside.move_id, inside.account_id) != (move_id, account_id):
        raise SealBroken("it was sealed for another move or account")
    return inside.secret
