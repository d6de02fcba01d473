"""The one error the storage layer raises for what it cannot honour.

Its own module so that directory (what a directory is) and scratch (the test
files in it) both raise it without importing each other both ways.
"""
from cxlbench.memory import PlacementError


class StorageError(PlacementError):
    """A storage directory or file cannot be used as asked; the message says
    what is wrong and what to do. A family records the case as skipped with it."""
