"""The long-term memory engine (SPEC 5): archive old conversation into folders, score them,
recall them. Self-contained: no Celery, no network; the worker's `kefu.memory` tasks and the
`kefu memory` CLI are to be thin shells around it.

Built so far: chunking and folder planning (`chunking`, `folders`), the tokenizer, the folder
store with all-or-none archive commits, `memory_judge` and the heuristic scorer, recall time windows, and recall
(lexical index and FAIR-DRI selection with a persisted state). Not yet wired into agent turns.
"""
