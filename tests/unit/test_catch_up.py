"""Catch-up from the committed cursor: an overdue page is received again, and one platform
that cannot answer (here: an account without credentials) does not stop the others."""

from __future__ import annotations

from runtime import pipeline
from runtime.accounts.registry import AccountSpec, create_account
from tests.log_capture import captured
from worker.celery_app import make_app
from worker.context import runtime_for
from worker.dispatch import dispatch


def test_an_overdue_page_is_published_even_when_another_platform_fails(settings, store, shop, platform):
    create_account(store, AccountSpec(id="ww-nocreds", platform="wangwang", identity="cntaobao某店"))
    platform.buyer_says(shop, "b1", "张三", "在吗")
    app = make_app(settings.model_copy(update={"reconcile": settings.reconcile.model_copy(update={"grace_s": 0})}))
    with captured("runtime.pipeline") as printed:
        step = pipeline.reconcile(runtime_for(app))
    assert [type(work) for work in step.follow_ups] == [pipeline.Ingest]
    dispatch(app, step.follow_ups)
    with store.read() as conn:  # received like a listener's page: recorded, then published
        recorded = conn.execute("SELECT account_id, ingested_at FROM received_page").all()
    assert recorded == [(shop, None)]
    assert len(list((settings.data_dir / "broker" / "queue").glob("*.msg"))) == 1
    assert printed == ["catch-up of ww-nocreds failed (KEFU_CREDENTIALS_MISSING)"]
