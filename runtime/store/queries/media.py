"""The `media` table's statements."""

# runtime.outbox.media: a file to send, content-addressed (staging twice keeps one copy).
STAGE = (
    "INSERT OR IGNORE INTO media (sha256, kind, mime, file_name, size, data, created_at)"
    " VALUES (:h, :k, :m, :n, :s, :d, :at)"
)
LOAD = "SELECT sha256, kind, mime, file_name, size, data FROM media WHERE sha256 = :h"

DELETE = "DELETE FROM media WHERE sha256 = :s"
# Retention: stored copies older than `:cutoff` no reply refers to any more; `:n` at a time.
PRUNE = (
    "DELETE FROM media WHERE sha256 IN (SELECT sha256 FROM media m WHERE created_at < :cutoff AND NOT EXISTS"
    " (SELECT 1 FROM outbox_request r WHERE r.media_sha256 = m.sha256) LIMIT :n)"
)

# A stored image's copy, as SQL over an inbound_message row (its expression index serves it).
STORED_SHA256 = "json_extract(body, '$.sha256')"
# runtime.inbound.media: the bytes of the copies named in the JSON array :s.
DATA = "SELECT sha256, data FROM media WHERE sha256 IN (SELECT value FROM json_each(:s))"
# An image (:s) the customer's (:c) buyer sent, for an operator to look at.
BUYER_IMAGE = (
    "SELECT m.mime, m.data FROM media m WHERE m.sha256 = :s AND m.kind = 'image' AND EXISTS"
    f" (SELECT 1 FROM inbound_message WHERE customer_id = :c AND content_type = 'image'"
    f" AND {STORED_SHA256} = :s)"
)

# runtime.placement.slices: the media the account's (:a) messages use (files its replies sent,
# images its buyers sent), and their rows, which its slice carries.
ACCOUNT_MEDIA = (
    "SELECT media_sha256 FROM outbox_request WHERE account_id = :a"
    f" UNION SELECT {STORED_SHA256} FROM inbound_message WHERE account_id = :a AND content_type = 'image'"
)
SLICE = f"SELECT * FROM media WHERE sha256 IN ({ACCOUNT_MEDIA})"
# A medium (:s) of a removed account, unless a request or a buyer's image still refers to it
# (content-addressed, so shared).
DELETE_UNUSED = (
    "DELETE FROM media WHERE sha256 = :s AND NOT EXISTS (SELECT 1 FROM outbox_request WHERE media_sha256 = :s)"
    " AND NOT EXISTS (SELECT 1 FROM inbound_message WHERE content_type = 'image'"
    f" AND {STORED_SHA256} = :s)"
)
