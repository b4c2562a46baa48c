"""The `report_reply_time` table's statements: answered waits counted by the day they began, the
reply's origin and the reply time as counted (runtime.operators.reports). V24's triggers keep it
from reply_wait's rows, so it has no writes here. Bind `:sim` as account.of_source says."""

from runtime.store.queries.account import of_source

# Each day's and origin's counts as three JSON arrays in reply-time order (the table's): reply
# times, waits, of them first waits of the day. A month's are some 10^4 counts: as rows they
# would cost Python more than the rest of a report.
BY_DAY = (
    "SELECT day_at, origin, json_group_array(seconds), json_group_array(waits), json_group_array(firsts)"
    f" FROM report_reply_time WHERE day_at >= :from AND day_at < :to AND {of_source('account_id')}"
    " GROUP BY day_at, origin"
)
