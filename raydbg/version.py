"""raydbg's own version: one constant, importable from any layer without loading the package face."""

__version__ = "0.1.0"
