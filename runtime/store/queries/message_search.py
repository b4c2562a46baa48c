"""The search index's statements (V32: `message_search`, a trigram full-text index of what
each message said, and `search_state`, how far it holds the messages): its catch-up
(runtime.customers.search_index) and a search's messages (queries.customer.LIST_PAGE*)."""

# What a search reads of a message `m`: text, a file's name, what a voice message was heard to
# say; never the JSON kefu keeps about media (a digest, a platform reference). V32's triggers
# hold a frozen copy.
SAID = (
    "CASE WHEN m.content_type IN ('text', 'markdown') THEN m.body"
    " WHEN NOT json_valid(m.body) THEN (CASE WHEN m.content_type = 'file' THEN m.body END)"
    " WHEN m.content_type = 'file' THEN json_extract(m.body, '$.name')"
    " WHEN m.content_type = 'voice' THEN json_extract(m.body, '$.recognition') END"
)

INDEXED_THROUGH = "SELECT message_id FROM search_state WHERE id = 1"
BEHIND = f"SELECT EXISTS (SELECT 1 FROM inbound_message WHERE id > ({INDEXED_THROUGH}))"
# The last of the next :n messages after the mark; those through it into the index, and the
# mark moved to it (one transaction).
LAST_AFTER = "SELECT max(id) FROM (SELECT id FROM inbound_message WHERE id > :after ORDER BY id LIMIT :n)"
INDEX_AFTER = (
    f"INSERT INTO message_search (rowid, name, said) SELECT m.id, m.sender_name, {SAID}"
    " FROM inbound_message m WHERE m.id > :after AND m.id <= :through"
)
MOVE_MARK = "UPDATE search_state SET message_id = :m WHERE id = 1"

# A search's messages: a phrase of three characters or more (:phrase, see
# runtime.customers.search_index) is found in the trigram index; a shorter search (:q, a LIKE
# pattern) scans the index's own rows, far fewer bytes than the messages'.
MATCHED = "SELECT rowid FROM message_search WHERE message_search MATCH :phrase"
SCANNED = "SELECT rowid FROM message_search WHERE name LIKE :q ESCAPE '!' OR said LIKE :q ESCAPE '!'"

# A deleted message leaves its trigrams in the index's older segments until they are merged:
# an erasure merges them all at once (under a second for 10^6 messages), so none is left.
MERGE = "INSERT INTO message_search (message_search) VALUES ('optimize')"
