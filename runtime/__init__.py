"""kefu's functional core: domain rules and SQLite persistence. No Celery, no network."""
