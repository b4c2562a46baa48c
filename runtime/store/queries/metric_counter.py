"""The `metric_counter` table's statements: counters that only grow (runtime.operators.counters).
Its triggers (migration V31) count buyer messages, outbox outcomes and reply latency."""

ALL = "SELECT name, labels, value FROM metric_counter"
# Add :v to the counter :n with label values :l (tab-separated).
ADD = (
    "INSERT INTO metric_counter (name, labels, value) VALUES (:n, :l, :v)"
    " ON CONFLICT (name, labels) DO UPDATE SET value = value + excluded.value"
)
