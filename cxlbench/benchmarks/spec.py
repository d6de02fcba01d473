"""A family's settings as a typed dataclass, read from a suite's [[benchmark]] table.

Each family declares `Spec`, a dataclass derived from `Spec` below: one field per
key a suite may write, with its type and default. `parse` checks a table against
it, so a typo (`pages = ["4k"]`) or a wrong type stops the run before anything is
measured, naming the key and the keys the family knows, instead of measuring the
default in its place. Values are normalised on the way in: an axis written as one
value becomes a one-element tuple, sizes written "1GiB" become bytes.

Types a field may have: bool, int, float, str, `Size` (bytes, written 4096 or
"1GiB"), `Literal[...]` (one of the listed values), `tuple[T, ...]` (an axis:
a value or a list of values), and unions of these (`Size | Literal["auto"]`).
"""
from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Union

from cxlbench.units import format_size, parse_size

#: Bytes, written as a number or a size such as "64KiB" or "1GiB".
Size = Annotated[int, "size"]


class SpecError(ValueError):
    """A suite table the family cannot honour; the message names the key."""


@dataclass(kw_only=True)
class Spec:
    """What every [[benchmark]] table may set, beside its family's own axes. The
    suite's top level sets the same keys for all its tables."""
    name: str
    tiers: tuple[str, ...] = ("ddr", "cxl")          # tier kinds or names measured
    initiators: Literal["local", "all"] = "local"    # all: MLC's initiator x tier matrix
    repetitions: int = 5             # independent trials per case (fresh buffer each)
    processes: int = 1               # workers the repetitions are spread over, in passes
    warmup: int = 1
    min_sample_s: float = 0.2        # each timed native run lasts at least this long
    case_timeout_s: float = 600
    time_budget_s: float = 0         # 0: no budget
    # Adaptive repetitions: more processes until the confidence interval of each
    # median is within this fraction of it (0: off), at most max_repetitions
    # (0: four times `repetitions`) or until the time budget ends.
    precision: float = 0
    max_repetitions: int = 0

    def settings(self) -> dict[str, Any]:
        """The resolved settings by suite key."""
        return {f.metadata.get("key", f.name): getattr(self, f.name) for f in dataclasses.fields(self)}

    def text(self) -> str:
        """The resolved settings as `run --list` prints them: page=4k,thp max_working_set=1GiB."""
        hints = typing.get_type_hints(type(self), include_extras=True)
        sizes = {f.metadata.get("key", f.name) for f in dataclasses.fields(self) if _holds_sizes(hints[f.name])}
        return " ".join(f"{k}={_show(v, k in sizes)}" for k, v in self.settings().items() if k != "name")


#: Suite-level keys that are not a table's settings.
SUITE_ONLY = ("name", "description", "benchmark", "path", "sentinels")


def _keys(spec_type: type[Spec]) -> dict[str, str]:
    """Suite key -> field name. A key that is no Python name (`with`) is the field's
    metadata: `with_: tuple[str, ...] = field(default=("cxl",), metadata={"key": "with"})`."""
    return {f.metadata.get("key", f.name): f.name for f in dataclasses.fields(spec_type)}


def known_keys(spec_type: type[Spec]) -> list[str]:
    return sorted(_keys(spec_type))


def parse(spec_type: type[Spec], table: dict[str, Any], where: str) -> Spec:
    """The table as spec_type; SpecError names `where`, the key and the known keys."""
    fields = _keys(spec_type)
    hints = typing.get_type_hints(spec_type, include_extras=True)
    values = {}
    for k, value in table.items():
        if k not in fields:
            raise SpecError(f"{where}: unknown key {k!r}; known: {', '.join(known_keys(spec_type))}")
        try:
            values[fields[k]] = coerce(value, hints[fields[k]])
        except (TypeError, ValueError) as e:
            raise SpecError(f"{where}: {k} = {value!r}: {e}") from None
    return spec_type(**values)


def of(module: Any, table: dict[str, Any] | None = None, **keys: Any) -> Spec:
    """A family's settings from a table (and keys), as a suite would give them; for
    code and tests that plan a family directly."""
    return parse(module.Spec, {"name": module.NAME, **(table or {}), **keys}, module.NAME)


def _holds_sizes(tp: Any) -> bool:
    if typing.get_origin(tp) is Annotated:
        return "size" in typing.get_args(tp)[1:]
    return any(_holds_sizes(arm) for arm in typing.get_args(tp))


def _show(value: Any, size: bool) -> str:
    if isinstance(value, tuple):
        return ",".join(_show(v, size) for v in value) or "()"
    if size and isinstance(value, int) and not isinstance(value, bool):
        return format_size(value)
    return str(value).lower() if isinstance(value, bool) else str(value)


def coerce(value: Any, tp: Any) -> Any:
    """value as type tp, or TypeError/ValueError saying what was expected."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is Annotated:
        if "size" in args[1:]:
            if isinstance(value, bool) or not isinstance(value, (int, str)):
                raise TypeError("expected a size such as 4096, \"64KiB\" or \"1GiB\"")
            return parse_size(value)
        return coerce(value, args[0])
    if origin in (Union, types.UnionType):
        errors = []
        for arm in args:
            if arm is type(None):        # a default, never written in a suite
                continue
            try:
                return coerce(value, arm)
            except (TypeError, ValueError) as e:
                errors.append(str(e))
        raise TypeError(" or ".join(dict.fromkeys(errors)))
    if origin is Literal:
        if value in args and type(value) is type(args[args.index(value)]):
            return value
        raise ValueError("expected " + " or ".join(repr(a) for a in args))
    if origin is tuple:
        items = value if isinstance(value, (list, tuple)) else [value]
        return tuple(coerce(v, args[0]) for v in items)
    if tp is Any:
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError("expected a number")
        return value
    if tp in (int, str, bool, dict):
        if type(value) is not tp:
            raise TypeError(f"expected {_NAMES[tp]}")
        return value
    raise TypeError(f"unsupported setting type {tp!r}")


_NAMES = {int: "an integer", str: "a string", bool: "true or false", dict: "a table"}
