"""The `canned_reply` table's statements: the shop's replies kept for reuse (runtime.operators.canned_replies)."""

_COLUMNS = "id, shortcut, body, updated_by, updated_at"

INSERT = (
    f"INSERT INTO canned_reply (shortcut, body, updated_by, updated_at) VALUES (:s, :b, :o, :at) RETURNING {_COLUMNS}"
)
UPDATE = (
    "UPDATE canned_reply SET shortcut = :s, body = :b, updated_by = :o, updated_at = :at WHERE id = :id"
    f" RETURNING {_COLUMNS}"
)
DELETE = f"DELETE FROM canned_reply WHERE id = :id RETURNING {_COLUMNS}"
BY_ID = f"SELECT {_COLUMNS} FROM canned_reply WHERE id = :id"
BY_SHORTCUT = f"SELECT {_COLUMNS} FROM canned_reply WHERE shortcut = :s"
ALL = f"SELECT {_COLUMNS} FROM canned_reply ORDER BY shortcut"
# What an operator typing `/:q` may mean: replies whose shortcut starts with it first, then those
# whose shortcut or body holds it (`:prefix` and `:within` are LIKE patterns escaped with `!`).
SEARCH = (
    f"SELECT {_COLUMNS} FROM canned_reply"
    " WHERE shortcut LIKE :within ESCAPE '!' OR body LIKE :within ESCAPE '!'"
    " ORDER BY shortcut NOT LIKE :prefix ESCAPE '!', shortcut NOT LIKE :within ESCAPE '!', shortcut LIMIT :n"
)
