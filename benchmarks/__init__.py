"""memstore benchmarks: ``python -m benchmarks [--quick] [--databases sqlite,postgres]``."""
