"""The shop's canned replies (issue 41): texts its operators keep for reuse, found in the reply
box by typing `/` and a shortcut, with the buyer's and the operator's name filled in.

They belong to the shop (this store), not to an account or a customer: a move leaves them, an
erasure never touches them. A reply names its variables as `{buyer}` and `{operator}` (or
`{买家}` and `{客服}`); a word in braces that is none of them is refused when the reply is saved,
so a typo never reaches a buyer as `{byuer}`. Braces around anything that is not one word
(`{^_^}`) are plain text. Each change is recorded in `operator_action` in its own transaction.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from pydantic import BaseModel

from runtime.customers.summaries import display_name, like_escaped
from runtime.errors import KefuError
from runtime.operators.accounts import record
from runtime.store import DeliveryStore, now_ms, queries
from runtime.store.connection import Connection
from runtime.store.tables import CannedReply

SHORTCUT_MAX = 32
BODY_MAX = 4000  # a message's limit: a rendered reply is sent as one
SEARCH_LIMIT = 10  # what the reply box lists at once
UNNAMED_BUYER = "顾客"  # `{buyer}` of a conversation whose buyer gave no name

# Each variable under its names; the value comes from the conversation and the signed-in operator.
VARIABLES: Mapping[str, str] = {"buyer": "buyer", "买家": "buyer", "operator": "operator", "客服": "operator"}
_VARIABLE = re.compile(r"\{(\w+)\}")  # \w: CJK letters too

Which = int | str  # a reply by id (the console's forms) or by shortcut (the CLI's)


class RenderedReply(BaseModel):
    """A reply as the reply box inserts it into one conversation."""

    id: int
    shortcut: str
    text: str


def _invalid(message: str, hint: str) -> KefuError:
    return KefuError("KEFU_CANNED_REPLY_INVALID", message, hint)


def _unknown(which: Which) -> KefuError:
    named = f"#{which}" if isinstance(which, int) else repr(which[:SHORTCUT_MAX])
    return KefuError("KEFU_CANNED_REPLY_UNKNOWN", f"no canned reply {named}", "list them with `kefu canned list`")


def _shortcut(value: str) -> str:
    """The shortcut as stored: what follows the `/` an operator types (a leading one is dropped)."""
    shortcut = value.strip().removeprefix("/")
    if not 1 <= len(shortcut) <= SHORTCUT_MAX or any(c.isspace() or not c.isprintable() for c in shortcut):
        raise _invalid(
            f"a shortcut is 1-{SHORTCUT_MAX} characters without spaces, not {value[:40]!r}",
            "choose a short word such as 问候 or ship",
        )
    return shortcut


def _body(value: str) -> str:
    body = value.strip()
    if not 1 <= len(body) <= BODY_MAX:
        raise _invalid(f"a reply is 1-{BODY_MAX} characters, not {len(body)}", "shorten it or split it in two")
    unknown = sorted({name for name in _VARIABLE.findall(body) if name not in VARIABLES})
    if unknown:
        raise _invalid(
            "unknown variable " + ", ".join("{" + name + "}" for name in unknown),
            "use {buyer} (or {买家}) and {operator} (or {客服})",
        )
    return body


def _row(conn: Connection, statement: str, params: Mapping[str, object]) -> CannedReply | None:
    found = conn.execute(statement, params).mappings().first()
    return CannedReply.model_validate(found) if found else None


def _taken(conn: Connection, shortcut: str, other_than: int | None) -> None:
    taken = _row(conn, queries.canned_reply.BY_SHORTCUT, {"s": shortcut})
    if taken is not None and taken.id != other_than:
        raise KefuError(
            "KEFU_CANNED_REPLY_EXISTS",
            f"a canned reply /{shortcut} exists already",
            f"edit it (`kefu canned edit {shortcut} ...`) or choose another shortcut",
        )


def _find(conn: Connection, which: Which) -> CannedReply:
    found = (
        _row(conn, queries.canned_reply.BY_ID, {"id": which})
        if isinstance(which, int)
        else _row(conn, queries.canned_reply.BY_SHORTCUT, {"s": which.strip().removeprefix("/")})
    )
    if found is None:
        raise _unknown(which)
    return found


def add_reply(store: DeliveryStore, operator: str, shortcut: str, body: str) -> CannedReply:
    shortcut, body = _shortcut(shortcut), _body(body)
    with store.write() as conn:
        _taken(conn, shortcut, None)
        added = _row(conn, queries.canned_reply.INSERT, {"s": shortcut, "b": body, "o": operator, "at": now_ms()})
        assert added is not None
        record(conn, operator, "canned-add", detail=shortcut)
    return added


def edit_reply(
    store: DeliveryStore, operator: str, which: Which, body: str, shortcut: str | None = None
) -> CannedReply:
    """A new body and, if given, a new shortcut for the reply."""
    body = _body(body)
    renamed = _shortcut(shortcut) if shortcut is not None else None
    with store.write() as conn:
        reply = _find(conn, which)
        new_shortcut = renamed or reply.shortcut
        _taken(conn, new_shortcut, reply.id)
        params = {"id": reply.id, "s": new_shortcut, "b": body, "o": operator, "at": now_ms()}
        edited = _row(conn, queries.canned_reply.UPDATE, params)
        assert edited is not None
        record(conn, operator, "canned-edit", detail=new_shortcut)
    return edited


def delete_reply(store: DeliveryStore, operator: str, which: Which) -> CannedReply:
    with store.write() as conn:
        reply = _find(conn, which)
        conn.execute(queries.canned_reply.DELETE, {"id": reply.id})
        record(conn, operator, "canned-delete", detail=reply.shortcut)
    return reply


def list_replies(store: DeliveryStore) -> list[CannedReply]:
    """Every reply of the shop, by shortcut (a shop keeps tens of them, not thousands)."""
    with store.read() as conn:
        return [CannedReply.model_validate(r) for r in conn.execute(queries.canned_reply.ALL).mappings()]


def search_replies(store: DeliveryStore, query: str, limit: int = SEARCH_LIMIT) -> list[CannedReply]:
    """Replies whose shortcut starts with `query` first, then those whose shortcut or body holds it."""
    text = like_escaped(query.strip().removeprefix("/"))
    params = {"prefix": f"{text}%", "within": f"%{text}%", "n": limit}
    with store.read() as conn:
        return [CannedReply.model_validate(r) for r in conn.execute(queries.canned_reply.SEARCH, params).mappings()]


def render(body: str, buyer: str, operator: str) -> str:
    """The body with its variables filled in, in one pass: a buyer named `{operator}` stays so."""
    values = {"buyer": buyer, "operator": operator}
    return _VARIABLE.sub(lambda m: values[VARIABLES[m[1]]] if m[1] in VARIABLES else m[0], body)


def replies_for(
    store: DeliveryStore, customer_id: int, operator: str, query: str, limit: int = SEARCH_LIMIT
) -> list[RenderedReply]:
    """What the reply box offers for `/query` in this conversation, ready to insert."""
    buyer = display_name(store, customer_id) or UNNAMED_BUYER
    return [
        RenderedReply(id=r.id or 0, shortcut=r.shortcut, text=render(r.body, buyer, operator))
        for r in search_replies(store, query, limit)
    ]
