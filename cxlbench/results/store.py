"""Runs on disk: results/<machine>/<run_id>/{run.json, samples.parquet}, or, with a
named hardware configuration, results/<configuration>/<machine>/<run_id>/.

Beside them, histograms.parquet: the side table of latency distributions (one
row per histogram bucket: the case, repetition, kind "chase" or "floor", the
curve's point, k loads a block, the clock's cost a block, lower_ns, width_ns,
count), from what a family leaves in its info under "histograms"; run.json does
not keep them. `load_histograms` reads it.

Written incrementally and atomically: each finished case lands as its own
parquet part (write to a temporary name, then rename) and run.json is
rewritten the same way, so a crash or Ctrl-C at any moment leaves a run that
loads, marked partial. `finish` merges the parts into samples.parquet.

A store may also be a URL (`s3://bucket/prefix`, see location.py): the run is
written locally exactly as above into a staging folder, and each file is put to
the store as soon as it is written, under the node's own prefix
<configuration>/<machine>/<run_id>/. A node that dies mid-run leaves in the store
every case it finished; no node ever writes under another's prefix.
"""
from __future__ import annotations

import errno
import io
import json
import os
import pwd
import re
import stat
import tempfile
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable

import pandas as pd

from cxlbench.results import location
from cxlbench.results.location import ResultsError  # noqa: F401  (its home for callers)

from cxlbench.results.schema import (COMPLETE, CORE_COLUMNS, MOST_VALUE, PARTIAL, RUNNING, SCHEMA_VERSION,
                                     CaseResult, failed_cases, sample_rows)

RUN_JSON, SAMPLES, PARTS = "run.json", "samples.parquet", "parts"
#: What a store keeps beside its runs, none of it measurable again: an A/B session's
#: pairing and order (in its folder), a machine's accepted changes, a fleet's records
AB_JSON, MARKERS, FLEET_FOLDER = "ab.json", "accepted.jsonl", "_fleet"
HISTOGRAMS, HIST_PARTS = "histograms.parquet", "histogram-parts"
HIST_KEY = "histograms"        # where a family's info holds them (benchmarks.tails.HISTOGRAMS)
HIST_COLUMNS = ["run_id", "case_id", "benchmark", "initiator", "target", "tier_kind", "repetition",
                "kind", "point", "k", "overhead_ns", "lower_ns", "width_ns", "count"]



def now_iso(timespec: str = "seconds") -> str:
    return datetime.now(timezone.utc).isoformat(timespec=timespec)


def safe_name(text: str) -> str:
    """A name usable as one path component whatever a hostname or label holds."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("._") or "machine"


def new_run_id(label: str | None = None) -> str:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    suffix = os.urandom(2).hex()
    return f"{stamp}-{safe_name(label)}-{suffix}" if label else f"{stamp}-{suffix}"


def atomic_write(path: Path, data: bytes) -> None:
    """`data` as the whole of `path`, which a reader sees complete or not at all: written
    to a temporary file beside it and renamed over it when whole, with the mode the
    replaced file had (a new one: what the umask leaves of 0666, as open() gives;
    mkstemp's 0600 would hide a published page from the server that serves it). Through
    a symlink to what it names. A device, a FIFO or a stream the shell opened
    (-o /dev/stdout, `>> log`) is written in place, appended to: there is no file to
    replace, and reopening it to write from the start would cut what is already there."""
    try:
        _replace_whole(Path(path), data)
    except OSError as e:
        # write() and fsync() name no file (a full disk said only so), and mkstemp names its
        # temporary file, which the user never asked for: either way, the path asked for
        if e.filename is None or Path(str(e.filename)).name.startswith(f".{Path(path).name}."):
            raise OSError(e.errno, e.strerror, str(path)) from None
        raise


def _replace_whole(path: Path, data: bytes) -> None:
    try:
        st = os.stat(path)                     # follows a link
    except FileNotFoundError:
        st = None
    if (st is not None and not stat.S_ISREG(st.st_mode)) or _a_stream(path):
        with open(path, "ab") as f:
            f.write(data)
        return
    path = Path(os.path.realpath(path))
    mode = stat.S_IMODE(st.st_mode) if st is not None else 0o666 & ~_umask()
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _write_parquet(path: Path, frame: pd.DataFrame) -> None:
    buf = io.BytesIO()
    frame.to_parquet(buf, index=False)
    atomic_write(path, buf.getvalue())


def unwritable(path: Path | str) -> str | None:
    """Why atomic_write could not write `path` here, in a few words (None where it
    could): a stream or device is written in place, so it must take writes; a file is
    replaced through a new one beside it, so the nearest folder there must take one.
    access() also answers EROFS for a read-only mount, where root may write anything
    else, and the owner of a folder another user holds is named."""
    path = Path(path)
    if _a_stream(path) or (path.exists() and not path.is_file()):
        return None if os.access(path, os.W_OK) else f"{path} is not writable here"
    there = path.parent
    while not there.exists() and there.parent != there:
        there = there.parent
    if os.access(there, os.W_OK | os.X_OK):
        return None
    if os.statvfs(there).f_flag & os.ST_RDONLY:
        return f"{there} is on a read-only file system"
    try:
        owner = f" (it belongs to {pwd.getpwuid(there.stat().st_uid).pw_name})"
    except (KeyError, OSError):
        owner = ""
    return f"{there} is not writable by this user{owner}"


def _a_stream(path: Path) -> bool:
    """/dev/stdout and its kin name a stream the shell opened (`>> log`): written in
    place, never replaced, though the file behind them is a regular one."""
    return os.path.abspath(path).startswith(("/dev/", "/proc/"))


def _umask() -> int:
    """The process's umask, read without setting it (os.umask would, for every thread)."""
    try:
        for line in Path("/proc/self/status").read_text(encoding="utf-8").splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _json_default(obj: Any):
    if hasattr(obj, "__dataclass_fields__"):
        return asdict(obj)
    if isinstance(obj, (set, tuple)):
        return list(obj)
    if hasattr(obj, "item"):          # numpy scalars
        return obj.item()
    return str(obj)


def machine_folder(out_dir: str | Path, machine_name: str, configuration: str | None = None) -> Path:
    """Where a machine's runs go under `out_dir`: results/[<configuration>/]<machine>."""
    root = Path(out_dir) / safe_name(configuration) if configuration else Path(out_dir)
    return root / safe_name(machine_name)


class RunWriter:
    """Owns one run directory while the run is being made."""

    def __init__(self, out_dir: str | Path, machine_name: str, meta: dict[str, Any],
                 configuration: str | None = None):
        """`configuration`: the hardware configuration's name, a folder above the
        machine's (none: results/<machine>/<run_id>, as always)."""
        root = Path(out_dir)
        if root.exists() and not root.is_dir():
            raise ResultsError(f"{root} is not a directory; pass --out a results directory")
        self.run_id = meta.get("run_id") or new_run_id(meta.get("label"))
        self.path = machine_folder(root, machine_name, configuration) / self.run_id
        (self.path / PARTS).mkdir(parents=True, exist_ok=False)
        self._hist_parts = 0
        self.meta = {"schema_version": SCHEMA_VERSION, **meta, "run_id": self.run_id,
                     "status": RUNNING, "started": now_iso(), "ended": None,
                     "pid": os.getpid(), "cases": []}
        self._parts = 0
        self._save_meta()

    def _save_meta(self) -> None:
        text = json.dumps(self.meta, indent=1, default=_json_default, sort_keys=False)
        atomic_write(self.path / RUN_JSON, text.encode())
        self._publish(RUN_JSON)

    def _publish(self, name: str) -> None:
        """A file of the run was written (a local store has nothing more to do)."""

    def _withdraw(self, name: str) -> None:
        """A file of the run was removed."""

    def add(self, result: CaseResult, part: CaseResult | None = None) -> None:
        """Store a case. When a case is measured by several processes, `part` is the
        latest one's result (its samples are written) and `result` the case so far
        (it replaces the case's entry in run.json)."""
        measured = part or result
        rows = sample_rows(self.run_id, measured, self.metrics(result.case.benchmark)) \
            if measured.samples else []
        if rows:
            self._parts += 1
            name = f"{PARTS}/{self._parts:06d}.parquet"
            _write_parquet(self.path / name, _tidy(pd.DataFrame(rows)))
            self._publish(name)
        self._add_histograms(measured)
        self.record(result)

    def _add_histograms(self, measured: CaseResult) -> None:
        """The histograms the measuring process left in its info, as a part of the
        side table (taken out of the info: run.json does not keep them)."""
        hists = measured.info.pop(HIST_KEY, None)
        if not hists:
            return
        rows = histogram_rows(self.run_id, measured, hists)
        (self.path / HIST_PARTS).mkdir(exist_ok=True)
        self._hist_parts += 1
        name = f"{HIST_PARTS}/{self._hist_parts:06d}.parquet"
        _write_parquet(self.path / name, pd.DataFrame(rows))
        self._publish(name)

    def record(self, result: CaseResult) -> None:
        """The case's entry in run.json (its status, reason, findings), no samples."""
        c = result.case
        entry = {
            "case_id": c.case_id, "benchmark": c.benchmark, "initiator": c.initiator,
            "target": c.target, "tier_kind": c.tier_kind, "params": c.params,
            "status": result.status, "reason": result.reason, "seconds": round(result.seconds, 3),
            "samples": len(result.samples),
            "info": {k: v for k, v in result.info.items() if k != HIST_KEY},
        }
        cases = self.meta["cases"]
        at = next((i for i, e in enumerate(cases) if e["case_id"] == c.case_id), None)
        if at is None:
            cases.append(entry)
        else:
            cases[at] = entry
        self._save_meta()

    def metrics(self, benchmark: str) -> dict[str, dict[str, str]]:
        """The family's declared metrics, from the self-description the run records."""
        try:
            return self.meta["families"][benchmark]["metrics"]
        except KeyError:
            raise ResultsError(f"run.json describes no family {benchmark!r}: record the family's "
                               f"description (benchmarks.base.describe) before its cases") from None

    def note(self, key: str, value: Any) -> None:
        self.meta[key] = value
        self._save_meta()

    def finish(self, status: str = COMPLETE) -> Path:
        """Merge the parts into samples.parquet, then mark the run ended."""
        self._merge_parts(PARTS, SAMPLES, _read_parts(self.path))
        hists = _run_histograms(self.path)         # its parts, merged file not yet written
        if hists is not None:
            self._merge_parts(HIST_PARTS, HISTOGRAMS, hists)
        self.meta.update(status=status, ended=now_iso())
        self._save_meta()
        return self.path

    def _merge_parts(self, folder: str, target: str, frame: pd.DataFrame) -> None:
        """`frame` (the parts of `folder` read together) written as `target`, then the
        parts withdrawn: the merged file exists before any part goes."""
        _write_parquet(self.path / target, frame)
        self._publish(target)
        for part in sorted((self.path / folder).glob("*.parquet")):
            part.unlink()
            self._withdraw(f"{folder}/{part.name}")
        (self.path / folder).rmdir()


def histogram_rows(run_id: str, result: CaseResult, hists: list[dict]) -> list[dict[str, Any]]:
    """One row per bucket, repetitions as the records carry them (numbered across the
    run's processes by runner.processes.renumber), the case's parameters as columns
    as in the samples."""
    case = result.case
    rows = []
    for h in hists:
        head = {"run_id": run_id, "case_id": case.case_id, "benchmark": case.benchmark,
                "initiator": case.initiator, "target": case.target, "tier_kind": case.tier_kind,
                "repetition": h["repetition"], "kind": h["kind"], "point": h.get("point", ""),
                "k": h["k"], "overhead_ns": h["overhead_ns"]}
        for lo, w, c in zip(h["lower_ns"], h["width_ns"], h["count"]):
            rows.append({**head, "lower_ns": lo, "width_ns": w, "count": c, **case.params})
    return rows


#: the local folder a run for a store URL is written in first (tempfile.mkdtemp's prefix)
STAGING_PREFIX = "cxlbench-staging-"


class StoreWriter(RunWriter):
    """A run whose store is a URL: written in a local staging folder as any run,
    each file put to <url>/<configuration>/<machine>/<run_id>/ as it is written.
    `path` is the staging folder (the run as this node sees it), `url` the run in
    the store. A run that cannot reach its store is refused before it measures."""

    def __init__(self, url: str, machine_name: str, meta: dict[str, Any], configuration: str,
                 staging: str | Path | None = None):
        location.check_reachable(url)
        self.url_root = url.rstrip("/")
        staging = Path(staging) if staging else Path(tempfile.mkdtemp(prefix=STAGING_PREFIX))
        self.url = ""
        super().__init__(staging, machine_name, meta, configuration)

    def _save_meta(self) -> None:
        if not self.url:
            rel = self.path.relative_to(self.path.parents[2])
            self.url = location.join(self.url_root, *rel.parts)
        super()._save_meta()

    def _publish(self, name: str) -> None:
        try:
            location.write_bytes(location.join(self.url, name), (self.path / name).read_bytes())
        except Exception as e:     # botocore and aiohttp raise many types for a store gone away
            why = f"{type(e).__name__}: {e}".splitlines()[0]
            raise ResultsError(f"the store could not take {name} ({why}); what was measured is kept in "
                               f"{self.path}") from None

    def _withdraw(self, name: str) -> None:
        location.delete(location.join(self.url, name))


def _tidy(frame: pd.DataFrame) -> pd.DataFrame:
    core = [c for c in CORE_COLUMNS if c in frame.columns]
    return frame[core + sorted(c for c in frame.columns if c not in core)]


def _empty() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype="float64" if c == "value" else "object")
                         for c in CORE_COLUMNS})


def _read_table(path: Path | str, kind: str, columns: list[str], source: Any = None) -> pd.DataFrame:
    """A `kind` file (samples, histograms) with at least `columns`, refused in one line
    where it is unreadable or is no such file; `source` (bytes read from a store) stands
    in for the path's file."""
    if source is None and Path(path).is_dir():     # pyarrow would read a folder as a dataset
        raise ResultsError(f"{path} is a folder, not a {kind} file")
    try:
        frame = pd.read_parquet(path if source is None else io.BytesIO(source))
    except Exception as e:     # pyarrow raises several types for a damaged file
        condition = _not_the_file(e)
        if condition:
            raise ResultsError(f"{path} could not be read here ({condition}); the file is not judged "
                               "damaged") from None
        raise ResultsError(f"{path} is not a readable {kind} file ({type(e).__name__}); "
                           f"re-run the case or remove the file") from None
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise ResultsError(f"{path} is not a cxlbench {kind} file (missing columns: "
                           f"{', '.join(missing)})")
    return frame


def _not_the_file(e: Exception) -> str | None:
    """What kept a file from being read when it was this process, not the file: told
    apart, as removing a good run's samples on the advice would lose them."""
    if isinstance(e, MemoryError) or type(e).__name__ == "ArrowMemoryError":
        return "out of memory: try again where the process has room"
    if "launch worker thread" in str(e):
        return ("pyarrow could not start a thread: raise the limit on processes (ulimit -u) or address "
                "space (ulimit -v)")
    if isinstance(e, OSError) and e.errno in (errno.EMFILE, errno.ENFILE):
        return f"{e.strerror}: raise the limit on open files (ulimit -n)"
    if isinstance(e, OSError) and e.errno in (errno.ENOMEM, errno.EAGAIN):
        return f"{e.strerror}: try again where the process has room"
    if isinstance(e, OSError) and e.errno in (errno.EACCES, errno.EPERM):
        return f"{e.strerror}: this user may not read it"
    if isinstance(e, UnicodeError):       # pyarrow takes paths as UTF-8 text
        return "its path is not UTF-8 text (a folder name in another encoding): rename the folder"
    return None


def _read_parquet(path: Path | str, source: Any = None) -> pd.DataFrame:
    """A samples file; `source` (bytes read from a store) stands in for the path's file."""
    frame = _read_table(path, "samples", CORE_COLUMNS, source)
    if not pd.api.types.is_numeric_dtype(frame["value"]):
        raise ResultsError(f"{path} is damaged: its values are {frame['value'].dtype}, not numbers")
    unnamed = int(frame["case_id"].isna().sum())
    if unnamed:
        raise ResultsError(f"{path} is damaged: {unnamed} of its samples name no case")
    wild = frame["value"].abs() > MOST_VALUE
    if wild.any():
        raise ResultsError(f"{path} is damaged: {int(wild.sum())} of its values are past {MOST_VALUE:g} "
                           f"(the first {frame['value'][wild].iloc[0]:g}), which no figure reaches")
    return frame


def _read_parts(run_dir: Path) -> pd.DataFrame:
    parts = sorted((run_dir / PARTS).glob("*.parquet"))
    frames = [_read_parquet(p) for p in parts]
    return _tidy(pd.concat(frames, ignore_index=True)) if frames else _empty()


def measured_whole(samples: pd.DataFrame, meta: dict[str, Any]) -> pd.DataFrame:
    """The samples of the cases measured whole: those of a case that failed part-way
    stay in the run but are left out here (schema.failed_cases)."""
    failed = failed_cases(meta)
    if not failed or samples.empty:
        return samples
    return samples[~samples["case_id"].isin(list(failed))]


@dataclass
class Run:
    path: Path | str          # a folder, or a URL in a store
    meta: dict[str, Any]
    samples: pd.DataFrame

    @property
    def status(self) -> str:
        return self.meta["status"]

    @property
    def run_id(self) -> str:
        return self.meta["run_id"]

    def cases(self) -> pd.DataFrame:
        """Every planned case with its status and reason (skipped and failed included)."""
        cols = ["case_id", "benchmark", "initiator", "target", "tier_kind", "status", "reason", "seconds"]
        return pd.DataFrame(self.meta.get("cases", []), columns=cols + ["params", "info", "samples"])


def _read_meta(run_dir: Path) -> dict[str, Any]:
    if not run_dir.exists():
        raise ResultsError(f"{run_dir} does not exist")
    try:
        text = (run_dir / RUN_JSON).read_bytes()
    except FileNotFoundError:
        raise ResultsError(f"{run_dir} is not a cxlbench run (no {RUN_JSON})") from None
    return _parse_meta(text, run_dir / RUN_JSON, run_dir)


#: The run record's parts every reader walks into, and their shapes: a record whose
#: parts have other shapes is damaged, said in one line, not a traceback in a reader.
_META_SHAPES = [("machine", "dict", "a machine record"), ("versions", "dict", "a table of versions"),
                ("suite", "dict", "the suite's settings"), ("tiers", "tiers", "a list of tiers with names"),
                ("environment", "dict", "a table"), ("families", "tables", "a table of the families' tables"),
                ("configuration", "dict", "a table"), ("sentinels", "dict", "a table"), ("ecc", "dict", "a table"),
                ("warnings", "list", "a list"), ("command", "list", "a list"), ("label", "str", "text"),
                ("machine_name", "str", "text"), ("hostname", "str", "text"), ("status", "str", "text"),
                ("started", "str", "a time"), ("ended", "str", "a time")]
#: the machine record's parts, the same way
_MACHINE_SHAPES = [("cpu", "dict", "a table"), ("nodes", "dict", "a table"), ("environment", "dict", "a table"),
                   ("memory_tiers", "dict", "a table"), ("hugepages", "dict", "a table"),
                   ("cxl_memdevs", "list", "a list"), ("cxl_regions", "list", "a list"), ("edac", "list", "a list"),
                   ("gpus", "records", "a list of records"), ("block_devices", "records", "a list of records"),
                   ("hostname", "str", "text"), ("root", "str", "text")]
#: each case record's parts
_CASE_SHAPES = [(key, "str", "text") for key in ("case_id", "benchmark", "initiator", "target", "tier_kind",
                                                 "status", "reason")] + \
    [("params", "dict", "a table"), ("info", "dict", "a table")]


def _shaped(value: Any, kind: str) -> bool:
    if kind in ("dict", "list", "str"):
        return isinstance(value, {"dict": dict, "list": list, "str": str}[kind])
    if kind == "tables":
        return isinstance(value, dict) and all(isinstance(t, dict) for t in value.values())
    if kind == "records":
        return isinstance(value, list) and all(isinstance(t, dict) for t in value)
    return isinstance(value, list) and all(isinstance(t, dict) and isinstance(t.get("name"), str) for t in value)


def _misshapen(record: dict, shapes) -> tuple[str, str] | None:
    """(the first part of `record` that is there but not of its shape, what it should be)."""
    return next(((key, what) for key, kind, what in shapes
                 if record.get(key) is not None and not _shaped(record[key], kind)), None)


def _parse_meta(text: bytes, where: Any, run_dir: Any) -> dict[str, Any]:
    try:
        meta = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise ResultsError(f"{where} is damaged (not JSON)") from None
    if not isinstance(meta, dict) or "run_id" not in meta or "schema_version" not in meta:
        raise ResultsError(f"{run_dir / RUN_JSON} is not a cxlbench run record")
    if type(meta["schema_version"]) is not int:
        raise ResultsError(f"{where} is damaged: schema_version is {meta['schema_version']!r}, not a number")
    cases = meta.get("cases", [])
    if not isinstance(cases, list) or not all(isinstance(c, dict) for c in cases):
        raise ResultsError(f"{where} is damaged: cases is not a list of case records")
    bad = _misshapen(meta, _META_SHAPES)
    if bad:
        raise ResultsError(f"{where} is damaged: its {bad[0]} is not {bad[1]}")
    bad = _misshapen(meta.get("machine") or {}, _MACHINE_SHAPES)
    if bad:
        raise ResultsError(f"{where} is damaged: its machine record's {bad[0]} is not {bad[1]}")
    for i, case in enumerate(cases):
        bad = _misshapen(case, _CASE_SHAPES)
        if bad:
            raise ResultsError(f"{where} is damaged: case {i + 1}'s {bad[0]} is {case[bad[0]]!r}, not {bad[1]}")
    if meta["schema_version"] > SCHEMA_VERSION:
        raise ResultsError(f"{run_dir} was written by a newer cxlbench (schema "
                           f"{meta['schema_version']}); upgrade to read it")
    return meta


def load_run(path: str | Path) -> Run:
    """One run. A run that never finished (crash, kill) loads from its parts as partial."""
    if location.is_url(path):
        return _load_stored_run(path)
    run_dir = Path(path)
    meta = _read_meta(run_dir)
    if (run_dir / SAMPLES).exists():
        samples = _read_parquet(run_dir / SAMPLES)
    elif meta.get("ended") and not (run_dir / PARTS).is_dir():
        raise ResultsError(_missing_samples(run_dir / SAMPLES))
    else:
        samples = _read_parts(run_dir)
    if meta.get("status") == RUNNING and not _alive(meta.get("pid")):
        meta = {**meta, "status": PARTIAL, "interrupted": True}
    return Run(run_dir, meta, samples)


def _alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def _load_stored_run(url: str) -> Run:
    """A run in a store at a URL. Its writer's pid means nothing here (another
    node): a run left 'running' stays so, and a fleet's record says what became of it."""
    url = url.rstrip("/")
    try:
        text = location.read_bytes(location.join(url, RUN_JSON))
    except location.StoreURLError:
        raise
    except Exception as e:           # the store's client raises its own types
        raise ResultsError(f"{url}: cannot read the store ({type(e).__name__}: {e})".splitlines()[0]) from None
    if text is None:
        raise ResultsError(f"{url} is not a cxlbench run (no {RUN_JSON})")
    meta = _parse_meta(text, location.join(url, RUN_JSON), url)
    for _ in range(3):      # a part withdrawn while read: the writer merged them, read again
        samples = _stored_samples(url, ended=bool(meta.get("ended")))
        if samples is not None:
            return Run(url, meta, samples)
    raise ResultsError(f"{url}: its samples changed three times while being read; try again")


def _stored_samples(url: str, ended: bool = False) -> pd.DataFrame | None:
    samples_url = location.join(url, SAMPLES)
    data = location.read_bytes(samples_url)
    if data is not None:
        return _read_parquet(samples_url, data)
    frames = []
    for part in location.glob(url, f"{PARTS}/*.parquet"):
        data = location.read_bytes(part)
        if data is None:
            return None
        frames.append(_read_parquet(part, data))
    if ended and not frames:
        raise ResultsError(_missing_samples(samples_url))
    return _tidy(pd.concat(frames, ignore_index=True)) if frames else _empty()


def _missing_samples(where: Any) -> str:
    # finish() merges the parts into samples.parquet before it marks the run ended
    return f"{where} is missing, though the run ended; restore it or remove the run"


def find_runs(path: str | Path) -> list[Path] | list[str]:
    """Run directories at or below a path (a run, a machine folder, a configuration's
    folder, or results/); URLs of the runs at or below a store's URL."""
    if location.is_url(path):
        return _find_stored_runs(path)
    p = Path(path)
    if not p.exists():
        raise ResultsError(f"{p} does not exist")
    if (p / RUN_JSON).exists():
        return [p]
    if not p.is_dir():
        raise ResultsError(f"{p} is neither a run directory nor a folder of runs")
    runs = sorted(r.parent for r in p.glob(f"*/{RUN_JSON}")) or \
        sorted({r.parent for depth in ("*/*", "*/*/*") for r in p.glob(f"{depth}/{RUN_JSON}")})
    if not runs:
        raise ResultsError(f"no cxlbench runs under {p}")
    return runs


def _find_stored_runs(url: str) -> list[str]:
    url = url.rstrip("/")
    try:
        found = [u for depth in ("", "*", "*/*", "*/*/*")
                 for u in location.glob(url, f"{depth}/{RUN_JSON}".lstrip("/"))]
    except location.StoreURLError:
        raise
    except Exception as e:
        raise ResultsError(f"{url}: cannot list the store ({type(e).__name__}: {e})".splitlines()[0]) from None
    runs = sorted({u.rsplit("/", 1)[0] for u in found})
    if location.join(url, RUN_JSON) in found:
        return [url]
    if not runs:
        raise ResultsError(f"no cxlbench runs under {url}")
    return runs


#: The drift sentinels' family: reference probes the runner visits between cases. Their
#: samples carry the same metrics and keys as cases (a 256 MiB DRAM chase beside a 256
#: MiB latency case), so a groupby written for cases would fold them in.
SENTINEL = "sentinel"


def load(paths: str | Path | Iterable[str | Path], sentinels: bool = False) -> pd.DataFrame:
    """Samples of every run at or below the given paths (folders or store URLs), as
    one tidy DataFrame; each row also says its machine and hardware configuration,
    so a fleet's store reads as one table. The drift sentinels' samples are left out
    unless `sentinels` asks for them (benchmark == "sentinel")."""
    if isinstance(paths, (str, Path)):
        paths = [paths]
    frames = [_tagged(load_run(r)) for p in paths for r in find_runs(p)]
    df = pd.concat(frames, ignore_index=True) if frames else _empty()
    return df if sentinels else df[df["benchmark"] != SENTINEL].reset_index(drop=True)


def machine_of(meta: dict[str, Any]) -> str:
    return str(meta.get("machine_name") or meta.get("hostname") or "?")


def configuration_of(meta: dict[str, Any]) -> str:
    """The run's hardware configuration's name ('' for a run that recorded none)."""
    conf = meta.get("configuration")
    return str(conf.get("name") or "") if isinstance(conf, dict) else str(conf or "")


def _tagged(run: Run) -> pd.DataFrame:
    return run.samples.assign(machine=machine_of(run.meta), configuration=configuration_of(run.meta))


def load_histograms(paths: str | Path | Iterable[str | Path]) -> pd.DataFrame:
    """The latency histograms of every run at or below the given folders, one row per
    bucket (HIST_COLUMNS, then the case's parameters), with machine and configuration
    as `load` adds them. A bucket holds the blocks of k loads that took [lower_ns,
    lower_ns + width_ns) ns; ns per load = (ns - overhead_ns) / k. Runs without
    distributions add no rows."""
    if isinstance(paths, (str, Path)):
        paths = [paths]
    frames = []
    for p in paths:
        for r in find_runs(p):
            if location.is_url(r):
                raise ResultsError(f"{r}: histograms are read from a local copy of the run")
            frame = _run_histograms(Path(r))
            if frame is not None:
                meta = _read_meta(Path(r))
                frames.append(frame.assign(machine=machine_of(meta),
                                           configuration=configuration_of(meta)))
    if not frames:
        return pd.DataFrame({c: pd.Series(dtype="object") for c in HIST_COLUMNS})
    return pd.concat(frames, ignore_index=True)


def _run_histograms(run_dir: Path) -> pd.DataFrame | None:
    if (run_dir / HISTOGRAMS).exists():
        return _read_table(run_dir / HISTOGRAMS, "histograms", HIST_COLUMNS)
    parts = sorted((run_dir / HIST_PARTS).glob("*.parquet"))      # a run still going, or cut short
    frames = [_read_table(p, "histograms", HIST_COLUMNS) for p in parts]
    return pd.concat(frames, ignore_index=True) if parts else None
