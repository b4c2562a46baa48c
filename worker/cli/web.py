"""`kefu console` (the operator web console) and `kefu operators` (who may use it)."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from runtime.operators.roles import Role
from worker.cli.common import N_, _, celery_app, cli, console, enqueue, ensure_store, operator_errors, print_rows

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
    from runtime.operators.accounts import add_operator

    if password is None:
        password = typer.prompt(_("password"), hide_input=True, confirmation_prompt=True)
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
    port: Annotated[int, typer.Option(help="the port to listen on")] = DEFAULT_PORT,
) -> None:
    """Serve the operator console for this shard (sign in as an operator from `kefu operators add`)."""
    serve_console(host, port)


def serve_console(host: str, port: int) -> None:
    import uvicorn

    from runtime.operators.accounts import list_operators
    from worker.console import create_app
    from worker.context import runtime_for

    with operator_errors():
        runtime = runtime_for(celery_app())
        if not list_operators(runtime.store):
            console.print(_("no operator can sign in yet: add one with `kefu operators add NAME`"))
        web = create_app(runtime, dispatch=enqueue)
    console.print(
        _("console on {url} for shard {shard}").format(url=f"http://{host}:{port}/", shard=runtime.settings.shard),
        soft_wrap=True,
    )
    trusted = runtime.settings.console.trusted_proxies.strip()
    uvicorn.run(
        web,
        host=host,
        port=port,
        log_level="warning",
        timeout_graceful_shutdown=2,
        proxy_headers=bool(trusted),  # else uvicorn trusts X-Forwarded-For from 127.0.0.1
        forwarded_allow_ips=trusted or None,
    )
