"""Adding an account: a verified preview that writes nothing and expires, then one confirm that
saves the account with its credentials, replayable by operation id."""

from __future__ import annotations

import stat

import pytest

from runtime.accounts.credentials import load_credentials
from runtime.accounts.registry import AccountSpec, list_accounts
from runtime.accounts.setup import AccountSetups, replayed_account
from runtime.errors import KefuError

SPEC = AccountSpec(id="ding", platform="dingtalk", identity="robot-1")
SECRET = {"client_id": "app", "client_secret": "s3cret", "robot_code": "robot-1"}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def ok() -> None:
    return None


def test_preview_writes_nothing_and_confirm_saves_account_and_credentials_together(store):
    setups = AccountSetups(ttl_ms=300_000)
    preview = setups.preview(store, SPEC, SECRET, ok)
    assert list_accounts(store) == [] and preview.expires_in_s == 300
    account = setups.confirm(store, preview.setup_id, "op-1")
    assert [a.id for a in list_accounts(store)] == ["ding"] and account.identity == "robot-1"
    assert load_credentials(store, "ding") == SECRET
    assert stat.S_IMODE(store.path.stat().st_mode) == 0o600  # credentials live here: owner only


def test_a_replayed_confirm_returns_the_same_account(store):
    setups = AccountSetups(ttl_ms=300_000)
    first = setups.confirm(store, setups.preview(store, SPEC, SECRET, ok).setup_id, "op-1")
    again = setups.confirm(store, "no-longer-pending", "op-1")
    assert again == first and replayed_account(store, "op-1", SPEC.id) == first
    assert replayed_account(store, "op-unknown", SPEC.id) is None
    with pytest.raises(KefuError, match="KEFU_OPERATION_CONFLICT"):  # `kefu accounts add` of another account
        replayed_account(store, "op-1", "ding-2")


def test_setup_material_expires_after_the_ttl(store):
    clock = Clock()
    setups = AccountSetups(ttl_ms=5_000, clock=clock)
    preview = setups.preview(store, SPEC, SECRET, ok)
    clock.now += 5.0
    with pytest.raises(KefuError) as expired:
        setups.confirm(store, preview.setup_id, "op-1")
    assert expired.value.code == "KEFU_SETUP_EXPIRED" and list_accounts(store) == []


def test_the_same_robot_twice_or_an_unverified_identity_is_refused_before_anything_is_kept(store):
    setups = AccountSetups(ttl_ms=300_000)
    setups.confirm(store, setups.preview(store, SPEC, SECRET, ok).setup_id, "op-1")
    with pytest.raises(KefuError) as exists:
        setups.preview(store, SPEC.model_copy(update={"id": "ding-2"}), SECRET, ok)
    assert exists.value.code == "KEFU_ACCOUNT_EXISTS"

    def refused() -> None:
        raise KefuError("KEFU_ACCOUNT_IDENTITY_UNVERIFIED", "no token")

    other = AccountSpec(id="ding-3", platform="dingtalk", identity="robot-3")
    with pytest.raises(KefuError, match="KEFU_ACCOUNT_IDENTITY_UNVERIFIED"):
        setups.preview(store, other, SECRET, refused)
    assert [a.id for a in list_accounts(store)] == ["ding"]


def test_an_operation_id_of_another_kind_is_a_conflict(store, shop):
    from runtime.admission.routes import RouteSpec, create_route

    create_route(
        store, RouteSpec(id="r2", account_id=shop, conversation_type="group", trigger_mention=True), op_id="op-r"
    )
    with pytest.raises(KefuError, match="KEFU_OPERATION_CONFLICT"):
        replayed_account(store, "op-r", "r2")


def test_deleting_checks_the_revision_removes_routes_and_credentials_and_keeps_history(
    store, shop, transport, platform
):
    from runtime.accounts.registry import delete_account, listening_accounts, set_connection_intent
    from runtime.admission.routes import list_routes
    from runtime.inbound.ingest import ingest_page

    ingest_page(store, transport.page_of(shop, [platform.buyer_says(shop, "b1", "张三", "在吗")]))
    with store.write() as conn:
        from runtime.accounts.credentials import save_credentials

        save_credentials(conn, shop, {"secret": "x"})
    set_connection_intent(store, shop, "disconnected")  # revision 2
    with pytest.raises(KefuError, match="KEFU_REVISION_CONFLICT"):
        delete_account(store, shop, 1, "op-del")
    assert delete_account(store, shop, 2, "op-del") == 3
    assert delete_account(store, shop, 2, "op-del") == 3  # replayed
    assert list_accounts(store) == [] and list_routes(store, shop) == []
    with pytest.raises(KefuError, match="KEFU_CREDENTIALS_MISSING"):
        load_credentials(store, shop)
    with store.read() as conn:
        assert listening_accounts(conn) == []
        assert conn.execute("SELECT count(*) FROM inbound_message").scalar_one() == 1  # history stays
    with pytest.raises(KefuError, match="KEFU_ACCOUNT_UNKNOWN"):
        ingest_page(store, transport.page_of(shop, [platform.buyer_says(shop, "b1", "张三", "还在吗")]))
    with pytest.raises(KefuError, match="KEFU_ACCOUNT_UNKNOWN"):
        set_connection_intent(store, shop, "connected")
    # The same seller can be added again, under a new id.
    setups = AccountSetups(ttl_ms=300_000)
    again = AccountSpec(id="shop-2", platform="simulator", identity="seller-1")
    assert setups.confirm(store, setups.preview(store, again, {}, ok).setup_id, "op-again").identity == "seller-1"


def test_a_deleted_account_added_again_with_its_identity_is_restored_with_its_history(store, shop, transport, platform):
    from runtime.accounts.registry import delete_account, renew_account
    from runtime.inbound.ingest import ingest_page

    [first] = ingest_page(
        store, transport.page_of(shop, [platform.buyer_says(shop, "b1", "张三", "在吗")])
    ).customer_ids
    delete_account(store, shop, 1, "op-del")
    setups = AccountSetups(ttl_ms=300_000)
    other = AccountSpec(id=shop, platform="simulator", identity="seller-9")
    with pytest.raises(KefuError, match="KEFU_ACCOUNT_EXISTS"):  # the id's history is seller-1's
        setups.preview(store, other, {}, ok)
    same = AccountSpec(id=shop, platform="simulator", identity="seller-1")
    restored = setups.confirm(store, setups.preview(store, same, {}, ok).setup_id, "op-again")
    assert (restored.identity, restored.deleted_at, restored.revision) == ("seller-1", None, 3)
    [again] = ingest_page(
        store, transport.page_of(shop, [platform.buyer_says(shop, "b1", "张三", "还在吗")])
    ).customer_ids
    assert again == first  # the same conversation, its earlier line with it
    with store.read() as conn:
        assert conn.execute("SELECT count(*) FROM inbound_message").scalar_one() == 2
    assert renew_account(store, shop, 3, {"secret": "new"}, "op-renew") == 4
    assert renew_account(store, shop, 3, {"secret": "new"}, "op-renew") == 4  # replayed
    assert load_credentials(store, shop) == {"secret": "new"}
    with pytest.raises(KefuError, match="KEFU_REVISION_CONFLICT"):
        renew_account(store, shop, 3, {"secret": "newer"}, "op-renew-2")
