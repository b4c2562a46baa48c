"""What buyers send, from a transport's page to committed messages: the inbox, dedupe and
ingest, who sent what, the input pause, fetched images, and checkpoints of what is committed."""
