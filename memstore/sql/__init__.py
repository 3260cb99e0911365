"""SQL backend: the schema (owned by Alembic migrations) and the statements over it."""
