"""Window caches: Redis (shared, survives this process) or in-process (the embedded default)."""
