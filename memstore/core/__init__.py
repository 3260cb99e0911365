"""The pure core: decisions over plain data, no I/O. Sync and async stores share all of it."""
