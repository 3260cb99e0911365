"""A fault soak (issue 32, item 4): worker processes write, stream, read, reload, prune and
purge on PostgreSQL or MariaDB with a private Redis while a controller injects faults; a
checker then verifies, from what each call was told and from the database, that nothing
acknowledged was lost or stored twice, that no window was served stale past the bound, that
no purged data was served and that no process was left behind. See docs/guarantees.md,
"Fault soak"."""
