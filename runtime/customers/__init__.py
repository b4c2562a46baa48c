"""A customer as operators see one: summaries, the transcript, erasure, retention and where its files live."""
