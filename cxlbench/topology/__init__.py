"""Recorded shape of machines, read from sysfs/procfs under a configurable root."""
