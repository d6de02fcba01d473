"""The environment variables cxlbench's C core reads, and the values each takes.

The C core compares them as exact strings and takes anything else for the default,
so a misspelt value ("Plain", "AVX2") measured the default path while the run (or an
A/B configuration's `env`) recorded the value asked for: an A/B of the two stores
would time one path twice. Each is checked here, in Python, before anything runs.
"""
from __future__ import annotations

from collections.abc import Mapping

#: name -> the values the C core acts on (cxlbench/_native/adamw.c), the first its default
SETTINGS = {
    "CXLBENCH_ADAMW_ISA": ("avx512", "avx2", "scalar"),     # the widest AdamW path, capped
    "CXLBENCH_ADAMW_STORES": ("streaming", "plain"),       # the bf16 copy's stores
}


def refused(environ: Mapping[str, str]) -> str | None:
    """The first setting in `environ` the C core would not act on, in one line."""
    for name, values in SETTINGS.items():
        value = environ.get(name)
        if value is not None and value != "" and value not in values:
            return f"{name}={value!r} is not one of {', '.join(values)} (the C core would ignore it)"
    return None
