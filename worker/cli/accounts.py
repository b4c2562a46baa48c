"""Accounts and their listeners: add (preview, then confirm), list, pause, resume; `kefu listen`."""

from __future__ import annotations

import os
import signal
import threading
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any, Literal

import typer
from pydantic import SecretStr

from runtime.errors import KefuError
from worker.cli.common import (
    N_,
    _,
    ask_secret,
    celery_app,
    cli,
    confirm,
    console,
    current_settings,
    open_store,
    operator_errors,
    print_rows,
    serve_shard,
    use_shard,
)

if TYPE_CHECKING:
    from runtime.accounts.registry import AccountSpec
    from transports.dingtalk import DingTalkCredentials
    from transports.wangwang import WangwangCredentials

accounts = typer.Typer(no_args_is_help=True, help="Platform accounts.")
cli.add_typer(accounts, name="accounts")
add = typer.Typer(no_args_is_help=True, help="Add an account: its identity is verified first, then you confirm.")
accounts.add_typer(add, name="add")


@add.callback()
def _on_shard(
    shard: Annotated[str | None, typer.Option(help="the shard the account lives on (default: KEFU_SHARD)")] = None,
) -> None:
    if shard is not None:
        with operator_errors():
            use_shard(shard)


SecretEnv = Annotated[
    str, typer.Option(help="environment variable holding the secret (else you are asked; never a CLI argument)")
]
OpId = Annotated[str | None, typer.Option(help="operation id: replaying it returns the same account")]
Yes = Annotated[bool, typer.Option("--yes", help="confirm without asking")]
AccountId = Annotated[str, typer.Option("--id", help="kefu's name for the account")]


def _secret(env_name: str, what: str) -> SecretStr:
    """From `env_name`, else asked at the terminal (KEFU_SECRET_REQUIRED without one)."""
    instead = f"set {env_name} (or name another variable with --secret-env)"
    return SecretStr(os.environ.get(env_name) or ask_secret(what, instead))


@add.command("dingtalk")
def add_dingtalk(
    account: AccountId,
    client_id: Annotated[str, typer.Option(help="the DingTalk app's ClientID (AppKey)")],
    robot_code: Annotated[str, typer.Option(help="the robot's code")],
    secret_env: SecretEnv = "KEFU_SETUP_SECRET",
    workspace: str = "default",
    op_id: OpId = None,
    yes: Yes = False,
) -> None:
    """A DingTalk robot (Stream mode): DingTalk must issue a token for the app's credentials."""
    from runtime.accounts.registry import AccountSpec
    from transports.dingtalk import DingTalkCredentials

    with operator_errors():
        credentials = DingTalkCredentials(
            client_id=client_id, client_secret=_secret(secret_env, "ClientSecret"), robot_code=robot_code
        )
        spec = AccountSpec(id=account, platform="dingtalk", identity=robot_code, workspace=workspace)
        _preview_and_confirm(spec, credentials.storable(), lambda: _verify_dingtalk(credentials), op_id, yes)


@add.command("wangwang")
def add_wangwang(
    account: AccountId,
    gateway_url: Annotated[str, typer.Option(help="the shop's bridge (docs/wangwang-gateway.md)")],
    app_key: Annotated[str, typer.Option(help="the bridge's app key for kefu")],
    seller_id: Annotated[str, typer.Option(help="the shop's seller id (cntaobao…)")],
    sign_method: Annotated[str, typer.Option(help="hmac-sha256 or md5")] = "hmac-sha256",
    secret_env: SecretEnv = "KEFU_SETUP_SECRET",
    workspace: str = "default",
    op_id: OpId = None,
    yes: Yes = False,
) -> None:
    """A Wangwang shop behind its bridge: the bridge must accept the signature and serve the seller."""
    from runtime.accounts.registry import AccountSpec
    from transports.wangwang import WangwangCredentials

    with operator_errors():
        credentials = WangwangCredentials(
            gateway_url=gateway_url,
            app_key=app_key,
            app_secret=_secret(secret_env, N_("app secret")),
            seller_id=seller_id,
            sign_method=sign_method,  # type: ignore[arg-type]  # a str from Typer; pydantic checks it
        )
        spec = AccountSpec(id=account, platform="wangwang", identity=seller_id, workspace=workspace)
        _preview_and_confirm(spec, credentials.storable(), lambda: _verify_wangwang(credentials), op_id, yes)


def _verify_dingtalk(credentials: DingTalkCredentials) -> None:
    """DingTalk must issue a token for the app's credentials."""
    from runtime.ports import SendFailure
    from transports.dingtalk import DingTalkTransport

    try:
        DingTalkTransport(current_settings().dingtalk, lambda _: credentials).check_identity(credentials)
    except SendFailure as failure:
        raise _unverified("DingTalk", failure.code, "check the app's ClientID and ClientSecret") from None


def _verify_wangwang(credentials: WangwangCredentials) -> None:
    """The bridge must accept the signature and serve the seller."""
    from transports.wangwang import WangwangTransport
    from transports.wangwang.client import GatewayFailure, plain_http_refused

    settings = current_settings().wangwang
    plain_http_hosts = settings.plain_http_host_list
    if plain_http_refused(credentials.gateway_url, plain_http_hosts):
        raise KefuError(
            "KEFU_INVALID_INPUT",
            "--gateway-url: a bridge on another host is reached over https:// only; nothing was saved",
            "give the bridge an https:// URL, or list its host in KEFU_WANGWANG__PLAIN_HTTP_HOSTS",
        )
    transport = WangwangTransport(lambda _: credentials, settings.timeout_s, plain_http_hosts=plain_http_hosts)
    try:
        transport.check_identity(credentials)
    except GatewayFailure as failure:
        raise _unverified("the bridge", failure.kefu_code, "check the URL, app key, secret and seller id") from None
    finally:
        transport.close()


def _unverified(who: str, code: str, action: str) -> KefuError:
    return KefuError(
        "KEFU_ACCOUNT_IDENTITY_UNVERIFIED",
        f"{who} did not accept these credentials ({code}); nothing was saved",
        action,
    )


def _preview_and_confirm(
    spec: AccountSpec, credentials: dict[str, Any], verify: Callable[[], None], op_id: str | None, yes: bool
) -> None:
    from runtime.accounts.setup import AccountSetups, replayed_account
    from runtime.placement.moves import place_new_account
    from runtime.placement.shards import record_placement
    from worker.cli.common import ensure_store
    from worker.context import runtime_for

    store = ensure_store()
    op_id = op_id or f"account-add-{uuid.uuid4().hex[:12]}"
    replayed = replayed_account(store, op_id, spec.id)
    if replayed is not None:
        console.print(
            _("account {id} ({platform} {identity}) was saved by operation {op_id}").format(
                id=replayed.id, platform=replayed.platform, identity=replayed.identity, op_id=op_id
            )
        )
        return
    with operator_errors():  # the directory must not place it on another shard
        placement = place_new_account(runtime_for(celery_app()).coordination, spec.id, current_settings().shard)
    setups = AccountSetups(current_settings().account_setup_ttl_ms)
    preview = setups.preview(store, spec, credentials, verify)
    console.print(
        _("verified: {platform} {identity} as account {id} (workspace {workspace}); confirm within {seconds} s").format(
            platform=spec.platform,
            identity=spec.identity,
            id=spec.id,
            workspace=spec.workspace,
            seconds=f"{preview.expires_in_s:g}",
        ),
        soft_wrap=True,
    )
    if not yes:
        confirm(_("save this account?"))
    saved = setups.confirm(store, preview.setup_id, op_id)
    with store.write() as conn:
        record_placement(conn, placement)
    console.print(
        _("account {id} saved (revision {revision}, operation {op_id}); add a route so it listens").format(
            id=saved.id, revision=saved.revision, op_id=op_id
        )
    )


@accounts.command("list")
def list_command(as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """Every account with its connection intent, authorization and listener (never credentials)."""
    from runtime.accounts.registry import list_accounts

    columns = [
        N_("id"),
        N_("platform"),
        N_("identity"),
        N_("workspace"),
        N_("revision"),
        N_("connection_intent"),
        N_("listener_state"),
        N_("last_error"),
    ]
    print_rows(list_accounts(open_store()), as_json, _("accounts"), columns)


IntentOpId = Annotated[
    str | None, typer.Option(help="operation id: replaying it returns the stored result and changes nothing")
]


@accounts.command()
def pause(account: str, op_id: IntentOpId = None) -> None:
    """Disconnect the account: its listener closes within a supervision interval, nothing is sent."""
    _set_intent(account, "disconnected", op_id or f"account-pause-{uuid.uuid4().hex[:12]}")


@accounts.command()
def resume(account: str, op_id: IntentOpId = None) -> None:
    """Connect the account again: its listener starts from the committed cursor."""
    _set_intent(account, "connected", op_id or f"account-resume-{uuid.uuid4().hex[:12]}")


def _set_intent(account: str, intent: Literal["connected", "disconnected"], op_id: str) -> None:
    from runtime.accounts.registry import set_connection_intent

    with operator_errors():
        revision = set_connection_intent(open_store(), account, intent, op_id)
    console.print(
        _("account {account}: {intent} (revision {revision}); operation {op_id}").format(
            account=account, intent=intent, revision=revision, op_id=op_id
        ),
        soft_wrap=True,
    )


@cli.command()
def listen() -> None:
    """Run the platform listeners of every live account in the foreground, publishing to the
    broker, until Ctrl-C or SIGTERM (workers started with `--listen` do the same)."""
    from worker.listeners import build_supervisor

    serve_shard()
    open_store()
    supervisor = build_supervisor(celery_app(), observe=lambda change: console.print(change.describe(), soft_wrap=True))
    supervisor.start()
    console.print(_("listening; Ctrl-C stops"))
    _until_stopped()
    supervisor.stop()
    console.print(_("listeners stopped"))


@cli.command("dingtalk-callback")
def dingtalk_callback(
    host: Annotated[str, typer.Option(help="address to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="port (0: any free one)")] = 8080,
) -> None:
    """Receive DingTalk HTTP-callback robots at POST /dingtalk/<account id>, verified with the
    account's app secret, and publish them like Stream messages (until Ctrl-C or SIGTERM)."""
    from worker.callback_server import serve_callbacks
    from worker.dispatch import broker_publisher

    serve_shard()

    started: list[int] = []

    def listening(bound: int) -> None:
        started.append(bound)
        console.print(
            _("receiving DingTalk callbacks at {url}; Ctrl-C stops").format(
                url=f"http://{host}:{bound}/dingtalk/<account id>"
            )
        )

    store = open_store()
    with operator_errors():
        try:
            serve_callbacks(store, broker_publisher(celery_app()), host, port, listening)
        except OSError as error:
            if started:  # it was serving: not a port's problem
                raise
            raise KefuError(
                "KEFU_CALLBACK_PORT_UNAVAILABLE",
                f"cannot listen on {host}:{port} ({error.strerror or type(error).__name__})",
                "stop what uses the port or pass another --port (and --host an address of this machine)",
            ) from None
    console.print(_("callback receiver stopped"))


def _until_stopped() -> None:
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    while not stop.wait(0.5):
        pass


@accounts.command()
def delete(
    account: str,
    revision: Annotated[int | None, typer.Option(help="the revision you looked at (default: the current one)")] = None,
    op_id: OpId = None,
) -> None:
    """Delete an account: its listener stops, its routes and credentials go, its history stays."""
    from runtime.accounts.registry import delete_account, require_account

    store = open_store()
    with operator_errors():
        if revision is None:
            with store.read() as conn:
                revision = require_account(conn, account).revision
        delete_account(store, account, revision, op_id or f"account-delete-{uuid.uuid4().hex[:12]}")
    console.print(_("account {account} deleted; its history stays").format(account=account))


@accounts.command()
def renew(
    account: str,
    secret_env: SecretEnv = "KEFU_SETUP_SECRET",
    client_id: Annotated[str | None, typer.Option(help="DingTalk: a new ClientID (default: the stored one)")] = None,
    app_key: Annotated[str | None, typer.Option(help="Wangwang: a new app key (default: the stored one)")] = None,
    gateway_url: Annotated[
        str | None, typer.Option(help="Wangwang: a new bridge URL (default: the stored one)")
    ] = None,
    revision: Annotated[int | None, typer.Option(help="the revision you looked at (default: the current one)")] = None,
    op_id: OpId = None,
) -> None:
    """Rotate an account's credentials without deleting it: the new secret is verified with the
    platform for the account's own identity first; routes, history and cursors stay, and its
    listener restarts on the new credentials."""
    from runtime.accounts.credentials import load_credentials
    from runtime.accounts.registry import renew_account, require_account
    from transports.dingtalk import DingTalkCredentials
    from transports.wangwang import WangwangCredentials

    store = open_store()
    with operator_errors():
        with store.read() as conn:
            found = require_account(conn, account)
        stored = load_credentials(store, account) if found.platform != "simulator" else {}
        given = {"client_id": client_id, "app_key": app_key, "gateway_url": gateway_url}
        allowed = {"dingtalk": {"client_id"}, "wangwang": {"app_key", "gateway_url"}}.get(found.platform, set())
        if wrong := sorted(k for k, v in given.items() if v is not None and k not in allowed):
            raise KefuError(
                "KEFU_INVALID_INPUT", f"--{wrong[0].replace('_', '-')} is not an option of a {found.platform} account"
            )
        fresh = {**stored, **{k: v for k, v in given.items() if v is not None}}
        if found.platform == "dingtalk":
            fresh |= {"client_secret": _secret(secret_env, N_("new ClientSecret")), "robot_code": found.identity}
            dingtalk = DingTalkCredentials.model_validate(fresh)
            _verify_dingtalk(dingtalk)
            storable = dingtalk.storable()
        elif found.platform == "wangwang":
            fresh |= {"app_secret": _secret(secret_env, N_("new app secret")), "seller_id": found.identity}
            wangwang = WangwangCredentials.model_validate(fresh)
            _verify_wangwang(wangwang)
            storable = wangwang.storable()
        else:
            raise KefuError("KEFU_INVALID_INPUT", f"account {account!r} is simulated: it has no credentials to renew")
        op_id = op_id or f"account-renew-{uuid.uuid4().hex[:12]}"
        renewed = renew_account(store, account, found.revision if revision is None else revision, storable, op_id)
    console.print(
        _("account {account}: credentials renewed and verified (revision {revision}); its listener restarts").format(
            account=account, revision=renewed
        )
    )
