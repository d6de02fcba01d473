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

A type also says what a value of it may be: `Annotated[int, at_least(1)]` (an
`Allowed` among its extras), checked where the value is read, so `repetitions = 0`
or `threads = [0]` stops the run with the same one line as an unknown key — file,
table, key, value and what is allowed — instead of a division by zero in the plan
or a case that measures nothing. An axis is never empty (it would plan nothing and
say nothing) unless its type says `MAY_BE_EMPTY`; a float is never NaN or infinite.
Constraints that tie two keys together are a family's `ORDERED` pairs.
"""
from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass
import math
import re
from typing import Annotated, Any, Callable, Literal, Union

from cxlbench.units import format_size, parse_size

class SpecError(ValueError):
    """A suite table the family cannot honour; the message names the key."""


@dataclass(frozen=True)
class Allowed:
    """What a value of the right type may be: `test` says whether it is, `text` says
    what is allowed ("≥ 1"), in the error a suite author reads."""
    text: str
    test: Callable[[Any], bool]

    def check(self, value: Any) -> Any:
        if not self.test(value):
            raise NotAllowed(f"must be {self.text}")
        return value


class NotAllowed(ValueError):
    """A value of the right type outside what it may be: in a union of types, this
    is the arm the author meant, and its message is the one they need."""


def at_least(n: float) -> Allowed:
    return Allowed(f"≥ {n:g}", lambda v: v >= n)


def above(n: float) -> Allowed:
    return Allowed(f"> {n:g}", lambda v: v > n)


def within(lo: float, hi: float) -> Allowed:
    return Allowed(f"within {lo:g}..{hi:g}", lambda v: lo <= v <= hi)


def one_of_or(test: Callable[[Any], bool], text: str) -> Allowed:
    return Allowed(text, test)


#: An axis written as [] plans nothing; the few that mean something by it say so.
MAY_BE_EMPTY = "may be empty"

#: Linux's largest CONFIG_NR_CPUS (x86_64 MAXSMP): no machine has more CPUs to give
#: a thread, so a larger count is a typo, not a machine we have not met.
MAX_CPUS = 8192

#: Bytes, written as a number or a size such as "64KiB" or "1GiB"; never 0 or less.
Size = Annotated[int, "size", at_least(1)]
#: The most of anything a suite can ask to happen: a million repetitions of even a
#: tenth of a second is a day and more; beyond it a count is a typo.
MAX_COUNT = 10**6
#: A count of things that must happen at least once: repetitions, iterations, steps.
Count = Annotated[int, at_least(1), Allowed(f"≤ {MAX_COUNT:,} (more is a typo)", lambda v: v <= MAX_COUNT)]
#: A count that may be none: warm-up runs, extra repetitions (0: the default).
Count0 = Annotated[int, at_least(0), Allowed(f"≤ {MAX_COUNT:,} (more is a typo)", lambda v: v <= MAX_COUNT)]
#: Threads of one initiator: at least one, at most what Linux can have.
Threads = Annotated[int, at_least(1), Allowed(f"≤ {MAX_CPUS} (Linux's most CPUs)", lambda v: v <= MAX_CPUS)]
#: The longest a suite may ask anything to last: a week, as `run --timeout` allows.
MAX_SECONDS = 7 * 24 * 3600
#: Seconds that must pass: a timed run's length, a timeout.
Seconds = Annotated[float, above(0), Allowed(f"≤ {MAX_SECONDS:,} (a week; more is a typo)",
                                             lambda v: v <= MAX_SECONDS)]
#: A fraction of a whole, as a suite writes it (0.05 for 5%); 0 turns it off.
FractionOrOff = Annotated[float, Allowed("0 (off) or a fraction below 1, e.g. 0.05 for 5%",
                                         lambda v: 0 <= v < 1)]


def _mix(text: str) -> bool:
    """read, write, or R:W with whole R and W ≥ 0, not both 0 (loaded_latency.parse_mix)."""
    if text in ("read", "write"):
        return True
    r, sep, w = text.partition(":")
    return bool(sep) and r.isdigit() and w.isdigit() and int(r) + int(w) > 0


def _delay_text(text: str) -> bool:
    """"0,100,1000": whole numbers ≥ 0, comma-separated."""
    return all(x.strip().isdigit() for x in text.split(","))


#: A read/write mix of loaded latency's load threads: of every R+W lines, R read, W written.
Mix = Annotated[str, Allowed("read, write or R:W with whole R, W ≥ 0, not both 0 (e.g. 2:1)", _mix)]
#: Loaded latency's injection delays: MLC's list, the idle point alone, or the delays
#: (a list — [] is the idle point alone — or "0,100,1000").
Delays = (Annotated[tuple[Annotated[int, at_least(0)], ...], MAY_BE_EMPTY] | Literal["mlc", "idle"]
          | Annotated[str, Allowed('"mlc", "idle", or delays ≥ 0 (a list, or "0,100,1000")', _delay_text)])


@dataclass(kw_only=True)
class Spec:
    """What every [[benchmark]] table may set, beside its family's own axes. The
    suite's top level sets the same keys for all its tables."""
    name: str
    tiers: tuple[str, ...] = ("ddr", "cxl")          # tier kinds or names measured
    initiators: Literal["local", "all"] = "local"    # all: MLC's initiator x tier matrix
    repetitions: Count = 5           # independent trials per case (fresh buffer each)
    processes: Count = 1             # workers the repetitions are spread over, in passes
    warmup: Count0 = 1
    min_sample_s: Seconds = 0.2      # each timed native run lasts at least this long
    case_timeout_s: Seconds = 600
    time_budget_s: Annotated[float, at_least(0)] = 0   # 0: no budget
    # Adaptive repetitions: more processes until the confidence interval of each
    # median is within this fraction of it (0: off), at most max_repetitions
    # (0: four times `repetitions`) or until the time budget ends.
    precision: FractionOrOff = 0
    max_repetitions: Count0 = 0

    #: (smaller, larger) pairs of keys whose values must come in that order.
    ORDERED: typing.ClassVar[tuple[tuple[str, str], ...]] = ()

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
    spec = spec_type(**values)
    _check_order(spec, where)
    _check_tiers(spec, where)
    return spec


#: What a suite's `tiers` may name: a kind, a tier of that kind by name (ddr0, cxl2),
#: or the GPU families' "local" (the GPU's own node).
TIER_WORD = re.compile(r"^(ddr|cxl|hbm|nvme)\d*$|^local$")


def _check_tiers(spec: Spec, where: str) -> None:
    """A word that can name no tier on any machine would plan nothing, silently."""
    for word in getattr(spec, "tiers", ()):
        if not TIER_WORD.match(str(word)):
            raise SpecError(f"{where}: tiers = {list(spec.tiers)!r}: {word!r} is not a tier kind (ddr, cxl, "
                            f"hbm, nvme, local) nor a tier's name (ddr0, cxl2 ...)")


def _check_order(spec: Spec, where: str) -> None:
    """A family's ORDERED pairs: min_working_set = "1GiB" with max_working_set = "16KiB"
    would sweep nothing."""
    keys = {f.name: f.metadata.get("key", f.name) for f in dataclasses.fields(spec)}
    for small, large in type(spec).ORDERED:
        a, b = getattr(spec, small), getattr(spec, large)
        if all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (a, b)) and a > b:
            raise SpecError(f"{where}: {keys[small]} = {_show(a, True)} is larger than "
                            f"{keys[large]} = {_show(b, True)}; {keys[small]} must be ≤ {keys[large]}")


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
            try:
                value = parse_size(value)
            except OverflowError:            # "9999…9TiB": more bytes than a float holds
                raise NotAllowed("must be a size a machine can have") from None
        elif MAY_BE_EMPTY in args[1:] and value == []:
            return ()
        else:
            value = coerce(value, args[0])
        for extra in args[1:]:
            if isinstance(extra, Allowed):
                extra.check(value)
        return value
    if origin in (Union, types.UnionType):
        errors, meant = [], []
        for arm in args:
            if arm is type(None):        # a default, never written in a suite
                continue
            try:
                return coerce(value, arm)
            except NotAllowed as e:      # the right type, the wrong value: what to say
                meant.append(str(e))
            except (TypeError, ValueError) as e:
                errors.append(str(e))
        if meant:
            raise NotAllowed(" or ".join(dict.fromkeys(meant)))
        raise TypeError(" or ".join(dict.fromkeys(errors)))
    if origin is Literal:
        if value in args and type(value) is type(args[args.index(value)]):
            return value
        raise ValueError("expected " + " or ".join(repr(a) for a in args))
    if origin is tuple:
        items = value if isinstance(value, (list, tuple)) else [value]
        if not items:
            raise NotAllowed("must list at least one value (an empty list plans nothing)")
        out = []
        for v in items:
            try:
                out.append(coerce(v, args[0]))
            except NotAllowed as e:
                raise NotAllowed(f"each value {e} ({v!r} is not)") from None
        return tuple(out)
    if tp is Any:
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError("expected a number")
        if not math.isfinite(value):
            raise NotAllowed("must be a finite number")
        return value
    if tp in (int, str, bool, dict):
        if type(value) is not tp:
            raise TypeError(f"expected {_NAMES[tp]}")
        return value
    raise TypeError(f"unsupported setting type {tp!r}")


_NAMES = {int: "an integer", str: "a string", bool: "true or false", dict: "a table"}
