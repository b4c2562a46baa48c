"""The `report_state` table's statements: how far runtime.operators.reports.facts has kept the
report facts."""

READ = "SELECT zone, message_id, sent_at FROM report_state WHERE id = 1"
# Nothing is kept: before a rebuild (migrations V24: the summaries' delete triggers rest).
FORGET = "DELETE FROM report_state"
SAVE = (
    "INSERT INTO report_state (id, zone, message_id, sent_at, updated_at) VALUES (1, :zone, :m, :s, :at)"
    " ON CONFLICT (id) DO UPDATE SET zone = excluded.zone, message_id = excluded.message_id,"
    " sent_at = excluded.sent_at, updated_at = excluded.updated_at"
)
