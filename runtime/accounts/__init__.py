"""Platform accounts: the records, their setup in two steps, their credentials and a listener's reconnect budget."""
