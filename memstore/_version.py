"""The package version (a leaf module: code inside memstore reads it from here, never
through the package, which imports nearly everything)."""

__version__ = "0.1.0"
