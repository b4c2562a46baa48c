"""Whether the agent answers (SPEC 3.2, 3.5, 3.6): routes, handling by a human, and the batches admitted to a turn."""
