"""Platform adapters: they turn provider traffic into runtime pages and runtime sends into
provider calls. They never touch the delivery store."""
