"""What the fake HTTP platforms share."""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler
from typing import Any


def answer_json(handler: BaseHTTPRequestHandler, status: int, body: dict[str, Any]) -> None:
    data = json.dumps(body, ensure_ascii=False).encode()
    try:
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)
    except (BrokenPipeError, ConnectionResetError):
        pass  # the client gave up waiting (a stalled answer)
