"""The `report_activity` table's statements: buyer messages per conversation and shop-zone hour
(runtime.operators.reports), and reads of the summaries V24's triggers keep from its rows
(`report_hour`, `report_day`, which have no statements of their own: nothing else writes them).
Bind `:sim` as account.of_source says; `:from` and `:to` are a period's bounds."""

from runtime.store.queries.account import of_source

# A conversation's messages in an hour, added to what that hour held (positional: customer,
# hour, account, day, messages).
ADD = (
    "INSERT INTO report_activity (customer_id, hour_at, account_id, day_at, messages) VALUES (?, ?, ?, ?, ?)"
    " ON CONFLICT (customer_id, hour_at) DO UPDATE SET messages = messages + excluded.messages"
)
# Another shop zone: everything again, from the messages (the summaries emptied wholesale, as
# report_state's row is gone for the rebuild: see migrations V24).
DELETE_ALL = ("DELETE FROM report_activity", "DELETE FROM report_hour", "DELETE FROM report_day")

# Each hour's buyer messages and conversations, in order.
HOURS = (
    "SELECT hour_at, sum(messages), sum(conversations) FROM report_hour"
    f" WHERE hour_at >= :from AND hour_at < :to AND {of_source('account_id')} GROUP BY hour_at ORDER BY hour_at"
)
# Each day's conversations; and the whole period's: each counted on its first day in the period,
# the one whose day before with a buyer message (since_day) is before the period.
DAYS = (
    "SELECT day_at, sum(conversations) FROM report_day"
    f" WHERE day_at >= :from AND day_at < :to AND {of_source('account_id')} GROUP BY day_at"
)
CONVERSATIONS = (
    "SELECT coalesce(sum(conversations), 0) FROM report_day"
    f" WHERE day_at >= :from AND day_at < :to AND since_day < :from AND {of_source('account_id')}"
)

DELETE_OF_CUSTOMER = "DELETE FROM report_activity WHERE customer_id = :c"
# Moves (runtime.placement.slices): facts derived from messages travel as those messages, and
# the target counts them again (they arrive as new rows); the source forgets them.
SLICE = "SELECT * FROM report_activity WHERE false"
DELETE_OF_ACCOUNT = "DELETE FROM report_activity WHERE account_id = :a"
