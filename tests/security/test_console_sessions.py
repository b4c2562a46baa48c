"""The console's sessions end when their operator signs out, wherever a cookie was copied to;
every response tells the browser what the page may load; live streams are bounded (issue 38,
items 5, 6 and 10)."""

from __future__ import annotations

from starlette.testclient import TestClient

from runtime.inbound.ingest import ingest_page
from runtime.operators.accounts import Role, add_operator
from worker.console.headers import SECURITY_HEADERS
from worker.console.streams import StreamSlots


def app_for(settings):
    from worker.console import create_app
    from worker.context import WorkerRuntime

    return create_app(WorkerRuntime(settings))


def sign_in(client: TestClient, name: str = "olga", password: str = "operator-pass-1") -> str:
    token = client.get("/login").text.split('name="csrf" value="')[1].split('"')[0]
    client.post("/login", data={"csrf": token, "name": name, "password": password})
    return client.get("/").text.split('name="csrf" value="')[1].split('"')[0]


def test_a_cookie_copied_before_sign_out_no_longer_opens_the_console(settings, store, shop):
    add_operator(store, "olga", Role.OPERATOR, "operator-pass-1")
    app = app_for(settings)
    with TestClient(app) as browser, TestClient(app) as thief:
        csrf = sign_in(browser)
        thief.cookies.update(browser.cookies)  # the cookie, copied while the session is live
        assert thief.get("/", follow_redirects=False).status_code == 200
        browser.post("/logout", data={"csrf": csrf})
        assert thief.get("/", follow_redirects=False).status_code == 303  # to the sign-in page
        sign_in(browser)  # signing in again starts a new session
        assert browser.get("/", follow_redirects=False).status_code == 200


def test_every_response_says_what_the_page_may_load_and_the_cookie_can_be_https_only(settings, store, shop):
    add_operator(store, "olga", Role.OPERATOR, "operator-pass-1")
    with TestClient(app_for(settings)) as client:
        responses = [client.get("/login"), client.get("/healthz"), client.get("/static/console.css")]
    for response in responses:
        assert all(response.headers[name] == value for name, value in SECURITY_HEADERS.items())
    secure = settings.model_copy(update={"console": settings.console.model_copy(update={"secure_cookies": True})})
    with TestClient(app_for(secure), base_url="https://testserver") as client:
        token = client.get("/login").text.split('name="csrf" value="')[1].split('"')[0]
        signed = client.post(
            "/login", data={"csrf": token, "name": "olga", "password": "operator-pass-1"}, follow_redirects=False
        )
    assert "secure" in signed.headers["set-cookie"].lower()


def test_live_streams_past_their_bounds_are_refused_with_429(settings, store, shop, platform, transport, monkeypatch):
    slots = StreamSlots(per_session=2, in_all=3)
    held = [slots.take("a"), slots.take("a")]
    refused = []
    for session in ("a", "b", "b", "c"):
        try:
            held.append(slots.take(session))
        except Exception as error:  # noqa: BLE001 - the HTTPException the console answers with
            refused.append((session, getattr(error, "status_code", None)))
    assert refused == [("a", 429), ("b", 429), ("c", 429)]  # a: its own bound; then the bound in all
    slots.give_back(held[0])
    assert slots.take("c") is not None
    said = platform.buyer_says(shop, "b1", "张三", "在吗")
    [customer] = ingest_page(store, transport.page_of(shop, [said])).customer_ids
    add_operator(store, "olga", Role.OPERATOR, "operator-pass-1")
    monkeypatch.setattr("worker.console.app.StreamSlots", lambda: StreamSlots(per_session=1, in_all=1))
    with TestClient(app_for(settings)) as client:
        sign_in(client)
        with client.stream("GET", f"/c/{customer}/events") as first:
            assert first.status_code == 200 and first.headers["content-type"].startswith("text/event-stream")
            second = client.get(f"/c/{customer}/events")
            assert second.status_code == 429 and "KEFU_TOO_MANY_STREAMS" in second.text
            assert client.get("/healthz").status_code == 200
