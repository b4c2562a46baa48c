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

# Inbound messages whose body (kefu's JSON, runtime.inbound.media) may name a stored copy: buyers'
# images, files, voice and video. A file's body is JSON except on the console's mirror of a file
# the shop sent (its name), so json_valid comes before any json_extract of it (SQLite tests these
# terms in order). V27's partial indexes are on exactly these terms: a query that repeats them
# reads the media messages only.
INBOUND_MEDIA = "content_type IN ('image', 'file', 'voice', 'video') AND json_valid(body)"
# A stored copy, as SQL over such a row (V27's expression index serves it).
STORED_SHA256 = "json_extract(body, '$.sha256')"
# runtime.inbound.media: the bytes of the copies named in the JSON array :s.
DATA = "SELECT sha256, data FROM media WHERE sha256 IN (SELECT value FROM json_each(:s))"
# An image (:s) the customer's (:c) buyer sent, for an operator to look at.
BUYER_IMAGE = (
    "SELECT m.mime, m.data FROM media m WHERE m.sha256 = :s AND m.kind = 'image' AND EXISTS"
    f" (SELECT 1 FROM inbound_message WHERE customer_id = :c AND {INBOUND_MEDIA} AND content_type = 'image'"
    f" AND {STORED_SHA256} = :s)"
)
# A file, voice or video message of the customer (:c) whose stored copy is :s, and the copy's
# length (NULL: pruned or erased since), for an operator to download or play.
BUYER_MEDIA = (
    "SELECT content_type, id, body, (SELECT size FROM media WHERE sha256 = :s) FROM inbound_message"
    f" WHERE customer_id = :c AND {INBOUND_MEDIA} AND content_type IN ('file', 'voice', 'video')"
    f" AND {STORED_SHA256} = :s ORDER BY id DESC LIMIT 1"
)
# Bytes :n of a copy (:s) from byte :at (1-based, as SQLite's substr counts): a range of a video
# read without loading the whole copy.
COPY_RANGE = "SELECT substr(data, :at, :n) FROM media WHERE sha256 = :s"
# Which of the copies named in the JSON array :s are still kept (retention prunes old ones).
KEPT = "SELECT sha256 FROM media WHERE sha256 IN (SELECT value FROM json_each(:s))"

# runtime.placement.slices: the media the account's (:a) messages use (files its replies sent,
# what its buyers sent), and their rows, which its slice carries.
ACCOUNT_MEDIA = (
    "SELECT media_sha256 FROM outbox_request WHERE account_id = :a"
    f" UNION SELECT {STORED_SHA256} FROM inbound_message WHERE account_id = :a AND {INBOUND_MEDIA}"
)
SLICE = f"SELECT * FROM media WHERE sha256 IN ({ACCOUNT_MEDIA})"
# A medium (:s) of a removed account, unless a request or a buyer's message still refers to it
# (content-addressed, so shared).
DELETE_UNUSED = (
    "DELETE FROM media WHERE sha256 = :s AND NOT EXISTS (SELECT 1 FROM outbox_request WHERE media_sha256 = :s)"
    f" AND NOT EXISTS (SELECT 1 FROM inbound_message WHERE {INBOUND_MEDIA} AND {STORED_SHA256} = :s)"
)
