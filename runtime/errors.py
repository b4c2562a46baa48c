"""Stable error codes. Every error says what happened and what to do next."""

from __future__ import annotations

from pydantic import ValidationError


class KefuError(Exception):
    """An error an operator can meet: a stable code, what happened, and what to do."""

    def __init__(self, code: str, message: str, action: str = "") -> None:
        self.code = code
        self.message = message
        self.action = action
        super().__init__(f"{code}: {message}" + (f" ({action})" if action else ""))


class AccountUnknown(KefuError):
    def __init__(self, account_id: str) -> None:
        super().__init__("KEFU_ACCOUNT_UNKNOWN", f"no account {account_id!r}", "check the account id")


class CustomerUnknown(KefuError):
    def __init__(self, customer_id: int) -> None:
        super().__init__("KEFU_CUSTOMER_UNKNOWN", f"no customer {customer_id}", "list them with `kefu customers`")


class RequestUnknown(KefuError):
    def __init__(self, request_id: str) -> None:
        super().__init__("KEFU_REQUEST_UNKNOWN", f"no outbox request {request_id!r}", "list them with `kefu outbox`")


class PageRejected(KefuError):
    """A page failed validation; nothing of it was written."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__(
            "KEFU_PAGE_INVALID",
            "inbound page rejected: " + "; ".join(problems),
            "fix the transport that produced it; the provider cursor was not advanced",
        )


def validation_problems(error: ValidationError, whole: str) -> list[str]:
    """Each failed field as "where: what is wrong", never its value: a value may be a message
    body, a cursor or a secret. `whole` names a failure of the object itself."""
    return [
        f"{'.'.join(map(str, item['loc'])) or whole}: {item['msg'].removeprefix('Value error, ')}"
        for item in error.errors(include_input=False, include_url=False)
    ]


def invalid_fields(error: ValidationError, whole: str) -> str:
    """The failed fields' names alone, for a log line: "invalid a, b.c"."""
    fields = sorted({".".join(map(str, item["loc"])) or whole for item in error.errors(include_input=False)})
    return "invalid " + ", ".join(fields)
