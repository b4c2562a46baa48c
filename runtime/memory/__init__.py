"""The long-term memory engine (SPEC 5): archive old conversation into folders, score them,
recall them. Self-contained: no Celery, no network; the worker's `kefu.memory` tasks and the
`kefu memory` CLI are thin shells around it. Built so far: chunking, titles, the tokenizer and
the folder store with transactional, idempotent archive commits."""
