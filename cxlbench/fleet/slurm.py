"""Send the ordinary single-machine run to many nodes through Slurm, and watch it.

One batch job per node (`sbatch --nodelist NODE --exclusive --time LIMIT`), each
running `cxlbench run --out STORE --config NAME` as it would run by hand: Slurm
does the placing, queueing, time limits and killing; cxlbench writes no scheduler
of its own. Jobs are watched with `scontrol show job` while Slurm remembers them,
then `sacct` where accounting is kept; what Slurm said is kept in the fleet record.
"""
from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from cxlbench.fleet.record import FleetRecord, Job, save
from cxlbench.results import location

ENDED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED",
         "BOOT_FAIL", "DEADLINE", "REVOKED", "SUBMIT_FAILED", "UNKNOWN"}


class FleetError(Exception):
    """A fleet that cannot be sent as asked; the message is the one line the user sees."""


@dataclass
class Target:
    node: str
    configuration: str


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise FleetError(f"{name} is not on PATH: fleet run sends jobs through Slurm "
                         f"(run it where sbatch works, e.g. a login node)")
    return path


def _call(args: list[str], timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout)


def expand(nodelist: str) -> list[str]:
    """A Slurm host list (`node[01-03],gpu7`) as node names, as Slurm expands it."""
    done = _call([_tool("scontrol"), "show", "hostnames", nodelist])
    if done.returncode != 0:
        raise FleetError(f"scontrol cannot read the node list {nodelist!r}: "
                         f"{(done.stderr or done.stdout).strip().splitlines()[-1:] or ['no output']}")
    return [n for n in done.stdout.split() if n]


def partition_nodes(partition: str) -> list[str]:
    done = _call([_tool("sinfo"), "-h", "-N", "-p", partition, "-o", "%N"])
    nodes = list(dict.fromkeys(done.stdout.split()))
    if done.returncode != 0 or not nodes:
        raise FleetError(f"partition {partition!r} has no nodes Slurm will name "
                         f"({done.stderr.strip() or 'sinfo printed none'})")
    return nodes


def targets(configs: list[str], nodes: str | None, partition: str | None) -> list[Target]:
    """--config NAME=NODELIST (repeatable), else --nodes (each node names its own
    configuration: auto), else every node of --partition."""
    out: list[Target] = []
    for item in configs:
        name, sep, hosts = item.partition("=")
        if not sep or not name or not hosts:
            raise FleetError(f"--config {item!r} is not NAME=NODELIST (e.g. cxl-a=node[01-04])")
        out += [Target(n, name) for n in expand(hosts)]
    if nodes:
        out += [Target(n, "auto") for n in expand(nodes)]
    if not out and partition:
        out = [Target(n, "auto") for n in partition_nodes(partition)]
    if not out:
        raise FleetError("name the nodes: --config NAME=NODELIST, --nodes NODELIST or --partition NAME")
    return out


def run_command(suite: str, store: str, configuration: str, fleet_id: str, python: str | None = None,
                extra: list[str] = ()) -> list[str]:
    """The single-machine run each node makes: the same cxlbench as the dispatcher's
    (its interpreter, on a shared file system as clusters have), into the store."""
    base = shlex.split(python) if python else [sys.executable, "-m", "cxlbench.cli.main"]
    return [*base, "run", *location.option_args(), "--suite", suite, "--out", store,
            "--config", configuration, "--label", f"fleet-{fleet_id}", "--no-report", *extra]


def sbatch_args(target: Target, command: list[str], fleet_id: str, time_limit: str,
                partition: str | None, log_dir: Path, account: str | None = None) -> list[str]:
    args = [_tool("sbatch"), "--parsable", "--job-name", f"cxlbench-{target.configuration}-{target.node}",
            "--nodes", "1", "--nodelist", target.node, "--exclusive", "--time", time_limit,
            "--chdir", os.getcwd(), "--output", str(log_dir / "%x-%j.out"),
            "--export", f"ALL,CXLBENCH_FLEET_ID={fleet_id}"]
    if partition:
        args += ["--partition", partition]
    if account:
        args += ["--account", account]
    return args + ["--wrap", shlex.join(command)]


def submit(record: FleetRecord, chosen: list[Target], command_for: Callable[[Target], list[str]],
           time_limit: str, partition: str | None, log_dir: Path, account: str | None = None) -> FleetRecord:
    """One job per node; a refusal is that node's outcome (never started), not the fleet's end."""
    log_dir.mkdir(parents=True, exist_ok=True)
    for t in chosen:
        done = _call(sbatch_args(t, command_for(t), record.fleet_id, time_limit, partition, log_dir, account))
        job = Job(t.node, t.configuration)
        if done.returncode == 0 and done.stdout.strip():
            job.job_id = done.stdout.strip().split(";")[0]
            job.state = "PENDING"
            job.log = str(log_dir / f"cxlbench-{t.configuration}-{t.node}-{job.job_id}.out")
        else:
            job.state = "SUBMIT_FAILED"
            job.reason = (done.stderr or done.stdout).strip().splitlines()[-1] if (done.stderr or done.stdout) \
                else f"sbatch exited {done.returncode}"
        record.jobs.append(job)
    save(record)
    return record


_FIELD = re.compile(r"(\w+)=(\S*)")


def _scontrol(job_id: str) -> dict[str, str] | None:
    done = _call([_tool("scontrol"), "show", "job", "-o", job_id])
    if done.returncode != 0 or "JobState=" not in done.stdout:
        return None
    f = dict(_FIELD.findall(done.stdout))
    started = f.get("BatchHost") not in (None, "", "(null)") and f.get("StartTime") not in ("Unknown", "None")
    return {"state": f.get("JobState", "UNKNOWN"), "reason": f.get("Reason", ""),
            "exit_code": f.get("ExitCode", ""), "started": f.get("StartTime", "") if started else "",
            "ended": f.get("EndTime", "") if f.get("JobState") in ENDED else ""}


def _sacct(job_id: str) -> dict[str, str] | None:
    if shutil.which("sacct") is None:
        return None
    done = _call(["sacct", "-n", "-P", "-X", "-j", job_id, "-o", "State,ExitCode,Start,End,Reason"])
    line = done.stdout.strip().splitlines()[:1]
    if done.returncode != 0 or not line:
        return None
    state, code, start, end, reason = (line[0].split("|") + [""] * 5)[:5]
    return {"state": state.split()[0], "exit_code": code, "reason": reason,
            "started": "" if start in ("Unknown", "None", "") else start,
            "ended": "" if end in ("Unknown", "None", "") else end}


def refresh(record: FleetRecord) -> FleetRecord:
    """Each unfinished job's state as Slurm says it now (a job it has forgotten keeps
    what was last seen)."""
    for job in record.jobs:
        if not job.job_id or job.state in ENDED - {"UNKNOWN"}:
            continue
        seen = _scontrol(job.job_id) or _sacct(job.job_id)
        if seen is None:
            continue
        job.state, job.reason, job.exit_code = seen["state"], seen["reason"], seen["exit_code"]
        job.started = seen["started"] or job.started
        job.ended = seen["ended"]
    save(record)
    return record


def wait(record: FleetRecord, timeout: float | None, poll_s: float = 5.0,
         said: Callable[[Job], None] = lambda job: None) -> FleetRecord:
    """Until every job has ended (or the timeout: what is still pending then never
    started, as far as this fleet is concerned). `said` hears each change of state."""
    start = time.monotonic()
    last = {j.job_id: j.state for j in record.jobs}
    while True:
        refresh(record)
        for j in record.jobs:
            if last.get(j.job_id) != j.state:
                last[j.job_id] = j.state
                said(j)
        if all(j.state in ENDED for j in record.jobs):
            return record
        if timeout is not None and time.monotonic() - start > timeout:
            return record
        time.sleep(poll_s)
