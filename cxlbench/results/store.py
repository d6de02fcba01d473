"""Runs on disk: results/<machine>/<run_id>/{run.json, samples.parquet}.

Written incrementally and atomically: each finished case lands as its own
parquet part (write to a temporary name, then rename) and run.json is
rewritten the same way, so a crash or Ctrl-C at any moment leaves a run that
loads, marked partial. `finish` merges the parts into samples.parquet.
"""
from __future__ import annotations

import json
import os
import re
import tempfile
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable

import pandas as pd

from cxlbench.results.schema import (COMPLETE, CORE_COLUMNS, PARTIAL, RUNNING, SCHEMA_VERSION,
                                     CaseResult, sample_rows)

RUN_JSON, SAMPLES, PARTS = "run.json", "samples.parquet", "parts"


class ResultsError(Exception):
    """A path that is not a readable cxlbench run; the message says what to do."""


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def safe_name(text: str) -> str:
    """A name usable as one path component whatever a hostname or label holds."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("._") or "machine"


def new_run_id(label: str | None = None) -> str:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    suffix = os.urandom(2).hex()
    return f"{stamp}-{safe_name(label)}-{suffix}" if label else f"{stamp}-{suffix}"


def atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _write_parquet(path: Path, frame: pd.DataFrame) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        frame.to_parquet(tmp, index=False)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _json_default(obj: Any):
    if hasattr(obj, "__dataclass_fields__"):
        return asdict(obj)
    if isinstance(obj, (set, tuple)):
        return list(obj)
    if hasattr(obj, "item"):          # numpy scalars
        return obj.item()
    return str(obj)


class RunWriter:
    """Owns one run directory while the run is being made."""

    def __init__(self, out_dir: str | Path, machine_name: str, meta: dict[str, Any]):
        root = Path(out_dir)
        if root.exists() and not root.is_dir():
            raise ResultsError(f"{root} is not a directory; pass --out a results directory")
        self.run_id = meta.get("run_id") or new_run_id(meta.get("label"))
        self.path = root / safe_name(machine_name) / self.run_id
        (self.path / PARTS).mkdir(parents=True, exist_ok=False)
        self.meta = {"schema_version": SCHEMA_VERSION, **meta, "run_id": self.run_id,
                     "status": RUNNING, "started": now_iso(), "ended": None,
                     "pid": os.getpid(), "cases": []}
        self._parts = 0
        self._save_meta()

    def _save_meta(self) -> None:
        text = json.dumps(self.meta, indent=1, default=_json_default, sort_keys=False)
        atomic_write(self.path / RUN_JSON, text.encode())

    def add(self, result: CaseResult, part: CaseResult | None = None) -> None:
        """Store a case. When a case is measured by several processes, `part` is the
        latest one's result (its samples are written) and `result` the case so far
        (it replaces the case's entry in run.json)."""
        measured = part or result
        rows = sample_rows(self.run_id, measured, self.metrics(result.case.benchmark)) \
            if measured.samples else []
        if rows:
            self._parts += 1
            _write_parquet(self.path / PARTS / f"{self._parts:06d}.parquet", _tidy(pd.DataFrame(rows)))
        self.record(result)

    def record(self, result: CaseResult) -> None:
        """The case's entry in run.json (its status, reason, findings), no samples."""
        c = result.case
        entry = {
            "case_id": c.case_id, "benchmark": c.benchmark, "initiator": c.initiator,
            "target": c.target, "tier_kind": c.tier_kind, "params": c.params,
            "status": result.status, "reason": result.reason, "seconds": round(result.seconds, 3),
            "samples": len(result.samples), "info": result.info,
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
        frame = _read_parts(self.path)
        _write_parquet(self.path / SAMPLES, frame)
        for part in (self.path / PARTS).glob("*.parquet"):
            part.unlink()
        (self.path / PARTS).rmdir()
        self.meta.update(status=status, ended=now_iso())
        self._save_meta()
        return self.path


def _tidy(frame: pd.DataFrame) -> pd.DataFrame:
    core = [c for c in CORE_COLUMNS if c in frame.columns]
    return frame[core + sorted(c for c in frame.columns if c not in core)]


def _empty() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype="float64" if c == "value" else "object")
                         for c in CORE_COLUMNS})


def _read_parquet(path: Path) -> pd.DataFrame:
    try:
        frame = pd.read_parquet(path)
    except Exception as e:     # pyarrow raises several types for a damaged file
        raise ResultsError(f"{path} is not a readable samples file ({type(e).__name__}); "
                           f"re-run the case or remove the file") from None
    missing = [c for c in CORE_COLUMNS if c not in frame.columns]
    if missing:
        raise ResultsError(f"{path} is not a cxlbench samples file (missing columns: "
                           f"{', '.join(missing)})")
    return frame


def _read_parts(run_dir: Path) -> pd.DataFrame:
    parts = sorted((run_dir / PARTS).glob("*.parquet"))
    frames = [_read_parquet(p) for p in parts]
    return _tidy(pd.concat(frames, ignore_index=True)) if frames else _empty()


@dataclass
class Run:
    path: Path
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
        meta = json.loads((run_dir / RUN_JSON).read_text())
    except FileNotFoundError:
        raise ResultsError(f"{run_dir} is not a cxlbench run (no {RUN_JSON})") from None
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise ResultsError(f"{run_dir / RUN_JSON} is damaged (not JSON)") from None
    if not isinstance(meta, dict) or "run_id" not in meta or "schema_version" not in meta:
        raise ResultsError(f"{run_dir / RUN_JSON} is not a cxlbench run record")
    if meta["schema_version"] > SCHEMA_VERSION:
        raise ResultsError(f"{run_dir} was written by a newer cxlbench (schema "
                           f"{meta['schema_version']}); upgrade to read it")
    return meta


def load_run(path: str | Path) -> Run:
    """One run. A run that never finished (crash, kill) loads from its parts as partial."""
    run_dir = Path(path)
    meta = _read_meta(run_dir)
    if (run_dir / SAMPLES).exists():
        samples = _read_parquet(run_dir / SAMPLES)
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


def find_runs(path: str | Path) -> list[Path]:
    """Run directories at or below a path (a run, a machine folder, or results/)."""
    p = Path(path)
    if not p.exists():
        raise ResultsError(f"{p} does not exist")
    if (p / RUN_JSON).exists():
        return [p]
    if not p.is_dir():
        raise ResultsError(f"{p} is neither a run directory nor a folder of runs")
    runs = sorted(r.parent for r in p.glob(f"*/{RUN_JSON}")) or \
        sorted(r.parent for r in p.glob(f"*/*/{RUN_JSON}"))
    if not runs:
        raise ResultsError(f"no cxlbench runs under {p}")
    return runs


def load(paths: str | Path | Iterable[str | Path]) -> pd.DataFrame:
    """Samples of every run at or below the given paths, as one tidy DataFrame."""
    if isinstance(paths, (str, Path)):
        paths = [paths]
    frames = [load_run(r).samples for p in paths for r in find_runs(p)]
    return pd.concat(frames, ignore_index=True) if frames else _empty()
