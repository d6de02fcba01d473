"""The fleet's own record: which job was sent to which node for which configuration,
and what the scheduler said became of it. It lies in the store beside the runs, as
<store>/_fleet/<fleet_id>.json, written by the one process that dispatched (the
nodes write only their runs), so the report can say what each node did long after
the scheduler has forgotten its jobs.
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from cxlbench.results import location
from cxlbench.results.store import FLEET_FOLDER, ResultsError, atomic_write, now_iso


@dataclass
class Job:
    """One node's job. state is the scheduler's (PENDING, RUNNING, COMPLETED, FAILED,
    CANCELLED, TIMEOUT, NODE_FAIL, ...; SUBMIT_FAILED when it was never accepted)."""
    node: str
    configuration: str
    job_id: str = ""
    state: str = "UNKNOWN"
    reason: str = ""            # the scheduler's reason, or sbatch's refusal
    exit_code: str = ""         # "0:0", "1:0", "0:9" (code:signal)
    started: str = ""           # when it started running ("" if it never did)
    ended: str = ""
    log: str = ""               # the job's output file


@dataclass
class FleetRecord:
    fleet_id: str
    engine: str                 # slurm / kubernetes
    store: str
    suite: str
    submitted: str = field(default_factory=now_iso)
    updated: str = ""
    jobs: list[Job] = field(default_factory=list)
    command: list[str] = field(default_factory=list)


def new_fleet_id() -> str:
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-" + os.urandom(2).hex()


def where(store: str, fleet_id: str) -> str:
    return location.join(store, FLEET_FOLDER, f"{fleet_id}.json") if location.is_url(store) \
        else str(Path(store) / FLEET_FOLDER / f"{fleet_id}.json")


def save(record: FleetRecord) -> str:
    record.updated = now_iso()
    data = json.dumps(asdict(record), indent=1).encode()
    path = where(record.store, record.fleet_id)
    if location.is_url(record.store):
        location.write_bytes(path, data)
    else:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        atomic_write(Path(path), data)
    return path


def _parse(data: bytes, path: str) -> FleetRecord:
    try:
        doc = json.loads(data)
        record = FleetRecord(**{**doc, "jobs": [Job(**j) for j in doc.get("jobs", [])]})
    except (ValueError, TypeError, AttributeError) as e:
        raise ResultsError(f"{path} is not a fleet record ({type(e).__name__})") from None
    # every field as the dataclass declares it: a number or a null where text belongs was a
    # traceback in fleet status and fleet report, far from the file that holds it
    wrong = [name for name, v in _fields(record) if not isinstance(v, str)]
    wrong += [f"jobs[{i}].{name}" for i, job in enumerate(record.jobs) for name, v in _fields(job)
              if not isinstance(v, str)]
    if not isinstance(record.command, list) or not all(isinstance(c, str) for c in record.command):
        wrong.append("command")
    if wrong:
        raise ResultsError(f"{path} is not a fleet record ({', '.join(wrong)} not text)")
    return record


def _fields(obj) -> list[tuple[str, object]]:
    """The text fields of a record or a job (its lists aside)."""
    return [(k, v) for k, v in obj.__dict__.items() if k not in ("jobs", "command")]


def load_all(store: str) -> list[FleetRecord]:
    """Every fleet record in the store, oldest first."""
    if location.is_url(store):
        urls = location.glob(store, f"{FLEET_FOLDER}/*.json")
        records = [_parse(location.read_bytes(u) or b"", u) for u in urls]
    else:
        records = [_parse(p.read_bytes(), str(p)) for p in sorted((Path(store) / FLEET_FOLDER).glob("*.json"))]
    return sorted(records, key=lambda r: (r.submitted, r.fleet_id))


def load(store: str, fleet_id: str | None = None) -> FleetRecord | None:
    """One record (the newest when no id is given); None when the store has none."""
    records = load_all(store)
    if fleet_id is None:
        return records[-1] if records else None
    found = [r for r in records if r.fleet_id == fleet_id]
    if not found:
        raise ResultsError(f"no fleet {fleet_id!r} in {store} (known: "
                           f"{', '.join(r.fleet_id for r in records) or 'none'})")
    return found[0]
