"""DingTalk HTTP-callback robots: an alternative receiver to Stream mode.

`POST /dingtalk/<account id>` with DingTalk's signed body. A genuine, fresh callback becomes
the same page Stream mode produces, recorded in the delivery store and published before the
200 goes back (worker.dispatch); if it cannot be recorded the answer is 503, so DingTalk
retries. Nothing of a refused request is written or logged beyond its error code.
"""

from __future__ import annotations

import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from runtime.accounts import load_account
from runtime.credentials import CredentialsMissing, load_credentials
from runtime.errors import PageRejected
from runtime.store import DeliveryStore, now_ms
from transports.dingtalk import DingTalkCredentials
from transports.dingtalk.callback import CallbackRejected, verify_callback
from transports.dingtalk.robot import robot_page
from worker.dispatch import Publish

log = logging.getLogger(__name__)

MAX_BODY = 1024 * 1024
Answer = tuple[int, dict[str, str]]


def _handle_callback(store: DeliveryStore, publish: Publish, path: str, headers: dict[str, str], body: bytes) -> Answer:
    account_id = path.removeprefix("/dingtalk/")
    if not path.startswith("/dingtalk/") or not account_id:
        return 404, {"code": "KEFU_CALLBACK_UNKNOWN_PATH"}
    with store.read() as conn:
        account = load_account(conn, account_id)
    if account is None or account.platform != "dingtalk":
        return 404, {"code": "KEFU_ACCOUNT_UNKNOWN"}
    try:
        secret = DingTalkCredentials.model_validate(load_credentials(store, account_id)).client_secret
        message = verify_callback(headers, body, secret.get_secret_value(), now_ms())
    except CredentialsMissing as error:
        return 503, {"code": error.code}
    except CallbackRejected as error:
        log.warning("dingtalk callback for %s refused: %s", account_id, error.code)
        return 401 if error.code != "DINGTALK_CALLBACK_MALFORMED" else 400, {"code": error.code}
    except PageRejected as error:
        log.warning("dingtalk callback for %s rejected: %s", account_id, "; ".join(error.problems))
        return 400, {"code": "DINGTALK_CALLBACK_MALFORMED"}
    try:
        publish(robot_page(account_id, message))
    except Exception as error:  # not recorded: DingTalk retries a failed callback
        log.warning("dingtalk callback for %s not received (%s)", account_id, type(error).__name__)
        return 503, {"code": "KEFU_RECEIVE_FAILED"}
    return 200, {"msgtype": "empty"}


class CallbackServer:
    def __init__(self, store: DeliveryStore, publish: Publish, host: str, port: int) -> None:
        self._server = ThreadingHTTPServer((host, port), _handler(store, publish))

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    def start(self) -> CallbackServer:
        threading.Thread(target=self._server.serve_forever, name="kefu-dingtalk-callback", daemon=True).start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _handler(store: DeliveryStore, publish: Publish) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY:
                status, answer = 413, {"code": "DINGTALK_CALLBACK_TOO_LARGE"}
            else:
                body = self.rfile.read(length)
                status, answer = _handle_callback(store, publish, self.path, dict(self.headers.items()), body)
            data = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass  # request lines carry nothing useful and may carry more than they should

    return Handler
