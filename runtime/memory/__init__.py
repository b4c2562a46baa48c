"""The long-term memory engine (SPEC 5): archive old conversation into folders, score them,
recall them. Self-contained: no Celery, no network, no agent; usable as a library.

`folders` and `chunking` plan an archive, `store` keeps folders with their index entries and
postings, `judge` and `heuristic` score, `recall` matches and selects (FAIR-DRI), `time_window`
reads `memory_recall`'s time arguments, `report` counts and self-checks. The agent's side
(when to archive, the recall block, the tools) is `runtime.agent.memory*`; the `kefu.memory`
tasks and `kefu memory` commands are thin shells around both.
"""
