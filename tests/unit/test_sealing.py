"""A moving account's credential sealed to the target shard's key (runtime.placement.sealing):
only the key it was sealed to opens it, only for the move and account it was sealed for, and a
changed byte is refused."""

from __future__ import annotations

import base64
import json

import pytest
from nacl.public import PublicKey, SealedBox

from runtime.placement.sealing import (
    SealBroken,
    SealedCredential,
    fingerprint,
    open_sealed,
    publish_shard_key,
    published_key,
    seal,
    shard_key,
)
from worker.coordination import LocalCoordinator

SECRET = json.dumps({"client_id": "ding-app", "client_secret": "s3cret-Vq7ZpL0x", "robot_code": "r1"})


def test_only_the_shards_key_opens_a_seal_and_only_for_its_move_and_account(store, tmp_path):
    coordination = LocalCoordinator(tmp_path / "coordination.sqlite")
    assert published_key(coordination, "default") is None
    key = publish_shard_key(store, coordination, "default")
    assert published_key(coordination, "default") == key.public_key
    assert shard_key(store, "default") == key  # made once, kept in the shard's store
    assert len(bytes.fromhex(key.private_key)) == 32 and key.private_key not in repr(key)

    sealed = seal(SECRET, key.public_key, "m1", "ding")
    assert b"s3cret" not in sealed and json.loads(sealed)["key"] == key.fingerprint
    assert open_sealed(sealed, key, "m1", "ding") == SECRET
    assert seal(SECRET, key.public_key, "m1", "ding") != sealed  # a fresh one-time key every time

    other = shard_key(store, "other")  # another shard's pair (a key made since, a wrong target)
    envelope = json.loads(sealed)
    for data, move, account, opener, why in [
        (sealed, "m2", "ding", key, "another move"),
        (sealed, "m1", "shop", key, "another account"),
        (sealed, "m1", "ding", other, "another key"),
        (json.dumps({**envelope, "key": other.fingerprint}).encode(), "m1", "ding", other, "another key, relabelled"),
        (b"s3cret-Vq7ZpL0x", "m1", "ding", key, "not a sealed credential"),
    ]:
        with pytest.raises(SealBroken) as broken:
            open_sealed(data, opener, move, account)
        assert broken.value.code == "KEFU_PLACEMENT_CREDENTIAL_SEAL", why
        assert "s3cret" not in broken.value.message
    for bad_key in ["01", "00" * 32]:  # not a key; the all-zero point no key pair has
        with pytest.raises(SealBroken):
            seal(SECRET, bad_key, "m1", "ding")


def test_a_changed_byte_anywhere_in_the_box_is_refused(store):
    key = shard_key(store, "default")
    envelope = json.loads(seal(SECRET, key.public_key, "m1", "ding"))
    box = base64.b64decode(envelope["box"])
    for index in [0, 31, 32, 47, 48, len(box) - 1]:  # the one-time key, the tag, the ciphertext
        changed = bytearray(box)
        changed[index] ^= 1
        data = json.dumps({**envelope, "box": base64.b64encode(changed).decode()}).encode()
        with pytest.raises(SealBroken) as broken:
            open_sealed(data, key, "m1", "ding")
        assert broken.value.code == "KEFU_PLACEMENT_CREDENTIAL_SEAL", index
    short = json.dumps({**envelope, "box": base64.b64encode(box[:40]).decode()}).encode()
    with pytest.raises(SealBroken):
        open_sealed(short, key, "m1", "ding")


def test_what_opens_but_is_not_a_credential_is_refused(store):
    """A box that does open (anyone can seal to a public key) still has to hold a credential."""
    key = shard_key(store, "default")
    sealed_to = key.fingerprint
    target = SealedBox(PublicKey(bytes.fromhex(key.public_key)))
    for inside in [b"s3cret-Vq7ZpL0x", json.dumps({"move_id": "m1", "account_id": "ding"}).encode()]:
        data = json.dumps({"version": 1, "key": sealed_to, "box": base64.b64encode(target.encrypt(inside)).decode()})
        with pytest.raises(SealBroken) as broken:
            open_sealed(data.encode(), key, "m1", "ding")
        assert "s3cret" not in broken.value.message
    made = SealedCredential(move_id="m1", account_id="ding", secret=SECRET).model_dump_json().encode()
    data = json.dumps({"version": 1, "key": sealed_to, "box": base64.b64encode(target.encrypt(made)).decode()})
    assert open_sealed(data.encode(), key, "m1", "ding") == SECRET


def test_a_credential_the_target_cannot_open_is_sealed_again_then_the_move_rolls_back(tmp_path):
    """Each time the target finds nothing its key opens, it publishes its key and hands the step
    back to the source, which seals again; past RESEALS of those the move rolls back, and the
    target kept nothing of the account."""
    from config import load_settings
    from runtime.accounts.credentials import save_credentials, stored_secret
    from runtime.accounts.registry import AccountSpec, create_account
    from runtime.placement import moves
    from runtime.placement.directory import enter_accounts
    from runtime.placement.moves import begin_move, load_move
    from runtime.placement.shards import customer_id_base
    from runtime.store import DeliveryStore
    from runtime.store.states import MoveStep
    from tests.local_services import Local

    def shard(name: str) -> Local:
        settings = load_settings(data_dir=tmp_path / name, shard=name)
        return Local(
            settings, DeliveryStore(settings.delivery_path, settings.delivery, customer_id_base=customer_id_base(name))
        )

    a, b = shard("a"), shard("b")
    create_account(a.store, AccountSpec(id="ding", platform="dingtalk", identity="r1"))
    with a.store.write() as conn:
        save_credentials(conn, "ding", json.loads(SECRET))
    coordination = LocalCoordinator(tmp_path / "coordination.sqlite")
    enter_accounts(a.store, coordination, "a")
    begin_move(coordination, "m1", "ding", "b")
    taken = []
    for _ in range(12):
        record = load_move(coordination, "m1")
        if record.step in moves.FINAL_STEPS:
            break
        if record.step == MoveStep.EXPORTED and (sealed := coordination.blob("m1:credential")) is not None:
            # what the target finds is sealed to its key, but for another move
            target_key = json.loads(coordination.blob("shard-key:b") or b"{}")["public_key"]
            assert json.loads(sealed)["key"] == fingerprint(target_key)
            coordination.put_blob("m1:credential", seal(SECRET, target_key, "m0", "ding"))
        taken.append((record.step.value, moves.advance({"a": a, "b": b}[record.actor()], coordination, "m1").outcome))
    record = load_move(coordination, "m1")
    assert record.step == MoveStep.ROLLED_BACK and record.error == "KEFU_PLACEMENT_CREDENTIAL_SEAL", taken
    assert [step for step, _ in taken].count("exported") == moves.RESEALS + 1  # sealed again twice, then given up
    assert "s3cret" not in json.dumps(record.model_dump(mode="json"))
    with b.store.read() as conn:
        assert stored_secret(conn, "ding") is None
    with a.store.read() as conn:
        assert json.loads(stored_secret(conn, "ding")) == json.loads(SECRET)
    a.store.close()
    b.store.close()
