"""Catch-up from the committed cursor: an overdue page is published again, and one platform
that cannot answer (here: an account without credentials) does not stop the others."""

from __future__ import annotations

from runtime.accounts import AccountSpec, create_account
from tests.log_capture import captured
from worker.context import WorkerRuntime
from worker.tasks.reconcile import catch_up


class Recorder:
    def __init__(self) -> None:
        self.published: list[dict] = []

    def delay(self, page: dict) -> None:
        self.published.append(page)


def test_an_overdue_page_is_published_even_when_another_platform_fails(settings, store, shop, platform):
    create_account(store, AccountSpec(id="ww-nocreds", platform="wangwang", identity="cntaobao某店"))
    platform.buyer_says(shop, "b1", "张三", "在吗")
    runtime = WorkerRuntime(
        settings.model_copy(update={"reconcile": settings.reconcile.model_copy(update={"grace_s": 0})})
    )
    ingest = Recorder()
    with captured("worker.tasks.reconcile") as printed:
        assert catch_up(runtime, {"kefu.ingest.page": ingest}) == 1
    assert [p["account_id"] for p in ingest.published] == [shop]
    assert printed == ["catch-up of ww-nocreds failed (KEFU_CREDENTIALS_MISSING)"]
