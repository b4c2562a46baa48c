"""The `report_event` table's statements: when the agent handed a conversation to a human and
when an operator resolved one (migration V24's triggers write them with the change;
runtime.operators.reports reads them). Bind `:sim` as account.of_source says."""

from runtime.store.queries.account import of_source

# The handoffs in a period of the conversations with a buyer message in it (customer, time),
# in time order: its nearest hour with one before or after it is in the period.
HANDOFFS = (
    "SELECT e.customer_id, e.at FROM report_event e"
    f" WHERE e.kind = 'handoff' AND e.at >= :from AND e.at < :to AND {of_source('e.account_id')}"
    " AND (e.wrote_before >= :from OR e.wrote_after < :to) ORDER BY e.at"
)
# The resolves in a period (operator, customer, time), in time order.
RESOLVES = (
    "SELECT e.operator, e.customer_id, e.at FROM report_event e"
    f" WHERE e.kind = 'resolve' AND e.at >= :from AND e.at < :to AND {of_source('e.account_id')} ORDER BY e.at"
)

# Another shop zone: the handoffs' hours are found again as the messages are counted again.
FORGET_HOURS = "UPDATE report_event SET wrote_before = NULL, wrote_after = NULL WHERE kind = 'handoff'"

DELETE_OF_CUSTOMER = "DELETE FROM report_event WHERE customer_id = :c"
# Moves (runtime.placement.slices): nothing else on the new shard records them, so they move.
SLICE = "SELECT * FROM report_event WHERE account_id = :a"
DELETE_OF_ACCOUNT = "DELETE FROM report_event WHERE account_id = :a"
