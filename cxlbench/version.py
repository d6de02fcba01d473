"""The package's version, where every layer can read it (the package's own
__init__ is the public API at the top, and imports analysis)."""
__version__ = "0.1.0"
