"""The `history_import` table's statements (runtime.inbound.history_import): an imported file's
progress, by its checksum."""

BY_CHECKSUM = "SELECT * FROM history_import WHERE checksum = :k"
START = (
    "INSERT INTO history_import (checksum, name, rows, batch_size, batches, started_at)"
    " VALUES (:k, :name, :rows, :size, :batches, :at) ON CONFLICT (checksum) DO NOTHING"
)
# A batch's rows are stored: in their transaction. Only the next batch moves it (a second import
# of the same file at once stores nothing twice and counts nothing twice).
BATCH_DONE = (
    "UPDATE history_import SET batches_done = :n, imported = imported + :i, present = present + :p,"
    " skipped = skipped + :s WHERE checksum = :k AND batches_done = :n - 1"
)
REMEMBERED = "UPDATE history_import SET remembered = :n WHERE checksum = :k AND remembered < :n"
FINISH = "UPDATE history_import SET finished_at = :at WHERE checksum = :k AND finished_at IS NULL"
