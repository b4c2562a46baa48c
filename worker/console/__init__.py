"""The operator console (`kefu console`): a small web app over one shard's stores, where
operators watch conversations live, take over and hand back, send, and settle sends whose
outcome is unknown. Starlette and Jinja2, served by uvicorn; it reads and writes through the
same runtime functions as the CLI."""

from worker.console.app import create_app

__all__ = ["create_app"]
