"""ECC counts around a run: a snapshot when it starts, another when it ends; both
go into run.json ("ecc"), and every count that moved is a warning on the run.

The runner calls, around measuring:

    before = ecc.start(config.root)
    ...                                  # measure the cases
    ecc.finish(writer, before, config.root)
"""
from __future__ import annotations

from typing import Any

from cxlbench.topology import ecc as _state


def start(root: str = "/") -> dict:
    """The snapshot a run starts from (EDAC counts, CXL memdev health)."""
    return _state.snapshot(root)


def finish(writer: Any, before: dict, root: str = "/", after: dict | None = None) -> list[str]:
    """Record the run's ECC state in run.json and add a warning per moved count.
    `writer` is the run's RunWriter (anything with .meta and .note). Returns the
    warnings added."""
    after = after if after is not None else _state.snapshot(root)
    moved = [f"ECC during the run: {m}" for m in _state.changes(before, after)]
    writer.note("ecc", {"before": before, "after": after, "changes": moved,
                        "state": _state.describe(after)})
    if moved:
        writer.note("warnings", list(writer.meta.get("warnings") or []) + moved)
    return moved
