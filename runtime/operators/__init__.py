"""The people who watch: operator accounts and their audit, alerts and per-stage status."""
