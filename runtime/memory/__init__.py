"""The long-term memory engine (SPEC 5): archive old conversation into folders, score them,
recall them.

The engine proper needs no agent, no Celery and no network, and is usable as a library:
`folders` and `chunking` plan an archive, `store` keeps folders with their index entries and
postings, `tokenize` and `time_expressions` read text and dates, `judge` and `heuristic` score,
`recall` matches and selects (FAIR-DRI), `time_window` reads `memory_recall`'s time arguments,
`report`, `audit` and `selfcheck` look after the store.

The agent's side lives here too, so that memory is found in one place: `engine` (when a session
archives, the recall block a turn sees), `tools` (`memory_recall`, `memory_judge`,
`memory_image`) and `jobs` (the work the `kefu.memory` tasks run outside a turn).
"""
