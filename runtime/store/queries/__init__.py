"""Every statement on the delivery store, named, one module per table: the only place a
delivery table's name appears in SQL (its DDL is in runtime.store.migrations). Stages run them
by name, `conn.execute(queries.received_page.RECORD, params)`, so a schema change touches one
module. A statement lives with the table it writes, or else the table whose rows it is about
(a table only triggers write and others' statements read, `customer_id_high`, has no module).

Statements are plain SQL text (`:name` or `?` parameters, as sqlite3 binds them); one whose
text depends on its arguments (an IN list's length) is a function returning the text.
tests/unit/test_layout.py holds every table's name to this package in kefu's code (config,
runtime, transports, worker); tests and benchmarks inspect stores with SQL of their own.
"""

from runtime.store.queries import (
    account,
    account_placement,
    admission_batch,
    agent_session,
    alert,
    buyer_read,
    checkpoint_state,
    credential,
    customer,
    damaged_session,
    erasure,
    group_receipt,
    held_page,
    inbound_message,
    input_pause,
    lease,
    media,
    operation,
    operator,
    operator_action,
    outbox_attempt,
    outbox_request,
    page_receipt,
    pending_question,
    placement_import,
    provider_cursor,
    read_check,
    reader_watermark,
    received_page,
    route,
    shard_fence,
    shard_grant,
)

__all__ = [
    "account",
    "account_placement",
    "admission_batch",
    "agent_session",
    "alert",
    "buyer_read",
    "checkpoint_state",
    "credential",
    "customer",
    "damaged_session",
    "erasure",
    "group_receipt",
    "held_page",
    "inbound_message",
    "input_pause",
    "lease",
    "media",
    "operation",
    "operator",
    "operator_action",
    "outbox_attempt",
    "outbox_request",
    "page_receipt",
    "pending_question",
    "placement_import",
    "provider_cursor",
    "read_check",
    "reader_watermark",
    "received_page",
    "route",
    "shard_fence",
    "shard_grant",
]
