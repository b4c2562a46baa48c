"""`kefu console` (the operator web console) and `kefu operators` (who may use it)."""

from __future__ import annotations

import socket
import sys
from typing import Annotated

import typer

from runtime.errors import KefuError
from runtime.operators.roles import Role
from worker.cli.common import (
    N_,
    _,
    ask_secret,
    celery_app,
    cli,
    console,
    enqueue,
    ensure_store,
    operator_errors,
    print_rows,
)

DEFAULT_PORT = 8470
operators_cli = typer.Typer(help="Console operators: add one (or change their role or password), list them.")
cli.add_typer(operators_cli, name="operators")


@operators_cli.command("add")
def operators_add(
    name: str,
    role: Annotated[Role, typer.Option(help="viewer reads; operator also acts; admin manages")] = Role.OPERATOR,
    password_stdin: Annotated[bool, typer.Option("--password-stdin", help="read the password from stdin")] = False,
) -> None:
    """Add an operator (asks for the password; it is stored only as a salted scrypt hash)."""
    add_operator_prompted(name, role, sys.stdin.readline().rstrip("\n") if password_stdin else None)


def add_operator_prompted(name: str, role: Role = Role.OPERATOR, password: str | None = None) -> None:
    """The name is checked before the password is asked for: a bad name costs no typing."""
    from runtime.operators.accounts import add_operator, check_operator_name

    with operator_errors():
        check_operator_name(name)
    if password is None:
        password = ask_secret(N_("password"), "pass --password-stdin and give the password on stdin", confirm=True)
    with operator_errors():
        operator = add_operator(ensure_store(), name, role, password)
    console.print(_("operator {name}: {role}").format(name=operator.name, role=operator.role))


@operators_cli.command("disable")
def operators_disable(name: str) -> None:
    """The operator can no longer sign in; their open console sessions end at once."""
    from runtime.operators.accounts import disable_operator

    if not disable_operator(ensure_store(), name):
        console.print(f"[red]KEFU_OPERATOR_UNKNOWN: no enabled operator {name!r}[/red]")
        raise typer.Exit(2)
    console.print(_("operator {name}: disabled").format(name=name))


@operators_cli.command("list")
def operators_list(as_json: Annotated[bool, typer.Option("--json", help="JSON for scripts")] = False) -> None:
    """The operators who may sign in."""
    from runtime.operators.accounts import list_operators

    print_rows(list_operators(ensure_store()), as_json, _("operators"), [N_("name"), N_("role")])


@cli.command("console")
def console_command(
    host: Annotated[str, typer.Option(help="the address to listen on (default: this machine only)")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="the port to listen on")] = DEFAULT_PORT,
) -> None:
    """Serve the operator console for this shard (sign in as an operator from `kefu operators add`)."""
    serve_console(host, port)


def serve_console(host: str, port: int) -> None:
    import uvicorn

    from runtime.operators.accounts import list_operators
    from worker.broker import wait_for_broker
    from worker.console import create_app
    from worker.context import runtime_for

    with operator_errors():
        listening = _bound(host, port)  # first: a port in use is said at once
        wait_for_broker(celery_app().kefu_settings)  # the console's actions are tasks: no broker, no start
        runtime = runtime_for(celery_app())
        if not list_operators(runtime.store):
            console.print(_("no operator can sign in yet: add one with `kefu operators add NAME`"))
        web = create_app(runtime, dispatch=enqueue)
    console.print(
        _("console on {url} for shard {shard}").format(url=f"http://{host}:{port}/", shard=runtime.settings.shard),
        soft_wrap=True,
    )
    trusted = runtime.settings.console.trusted_proxies.strip()
    config = uvicorn.Config(
        web,
        host=host,
        port=port,
        log_level="warning",
        timeout_graceful_shutdown=2,
        proxy_headers=bool(trusted),  # else uvicorn trusts X-Forwarded-For from 127.0.0.1
        forwarded_allow_ips=trusted or None,
    )
    uvicorn.Server(config).run(sockets=[listening])


def _bound(host: str, port: int) -> socket.socket:
    """The console's listening socket, bound here rather than by uvicorn, whose bind failure is
    a logged traceback or exit 3: a port in use, or an address not on this machine, is
    KEFU_CONSOLE_PORT_UNAVAILABLE naming it."""
    try:
        family, kind, proto, _name, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        listening = socket.socket(family, kind, proto)
    except OSError as error:
        raise _unavailable(host, port, error) from None
    try:
        listening.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does: a restart rebinds at once
        listening.bind(address)
    except OSError as error:
        listening.close()
        raise _unavailable(host, port, error) from None
    listening.set_inheritable(True)
    return listening


def _unavailable(host: str, port: int, error: OSError) -> KefuError:
    return KefuError(
        "KEFU_CONSOLE_PORT_UNAVAILABLE",
        f"cannot listen on {host}:{port} ({error.strerror or type(error).__name__})",
        "stop what uses the port or pass another --port (and --host an address of this machine)",
    )
