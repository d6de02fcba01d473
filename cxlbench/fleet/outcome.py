"""What each node did: measured, failed, never started (or still running), and why.

The scheduler's word on each job (the fleet record) is joined with what the node
left in the store (its run, found by the job id the run recorded). A job the
scheduler ended badly is a failure whatever the run says, and the cases that node
finished before it died still count as kept; a job that ended well with no complete
run is a failure too. A node can never lose another node's figures: each writes
only under its own prefix.
"""
from __future__ import annotations

from dataclasses import dataclass

from cxlbench.fleet.record import FleetRecord, Job
from cxlbench.results.schema import COMPLETE
from cxlbench.results.store import Run, configuration_of, machine_of

MEASURED, FAILED, NEVER_STARTED, RUNNING = "measured", "failed", "never started", "running"
#: Slurm's states for a job that ran and ended badly (and Kubernetes' Failed).
BAD_ENDS = {"FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED",
            "BOOT_FAIL", "DEADLINE", "REVOKED"}


@dataclass
class NodeOutcome:
    node: str
    configuration: str
    status: str                 # measured / failed / never started / running
    reason: str
    job_id: str = ""
    run: str = ""               # where its run lies in the store
    cases_kept: int = 0         # cases measured and stored (failed and skipped not counted)


def _kept(run: Run | None) -> int:
    if run is None:
        return 0
    return sum(1 for c in run.meta.get("cases", []) if c.get("status") == "ok")


def _job_run(job: Job, runs: list[Run], fleet_id: str) -> Run | None:
    for run in runs:
        sched = run.meta.get("scheduler") or {}
        if job.job_id and sched.get("SLURM_JOB_ID") == job.job_id:
            return run
    for run in runs:            # no job id recorded: the fleet's run on that node and configuration
        sched = run.meta.get("scheduler") or {}
        if sched.get("CXLBENCH_FLEET_ID") == fleet_id and configuration_of(run.meta) == job.configuration \
                and job.node in (machine_of(run.meta), sched.get("SLURMD_NODENAME"), sched.get("NODE_NAME")):
            return run
    return None


def of_job(job: Job, run: Run | None) -> NodeOutcome:
    kept = _kept(run)
    where = str(run.path) if run is not None else ""
    said = ", ".join(x for x in (job.state, f"exit {job.exit_code}" if job.exit_code else "",
                                 job.reason if job.reason not in ("", "None") else "") if x)
    out = NodeOutcome(job.node, job.configuration, FAILED, "", job.job_id, where, kept)
    if job.state == "SUBMIT_FAILED":
        out.status, out.reason = NEVER_STARTED, f"not accepted by the scheduler: {job.reason}"
    elif job.state in ("PENDING", "CONFIGURING", "REQUEUED") or (job.state in BAD_ENDS and not job.started):
        out.status, out.reason = NEVER_STARTED, f"the job never started ({said})"
    elif job.state in ("RUNNING", "COMPLETING", "SUSPENDED"):
        out.status, out.reason = RUNNING, f"still {job.state.lower()}; {kept} case(s) stored so far"
    elif job.state in BAD_ENDS:
        out.reason = f"the job ended {said}; {kept} case(s) it finished are kept" if run is not None \
            else f"the job ended {said} before its run stored anything"
    elif job.state == "COMPLETED":
        if run is None:
            out.reason = f"the job completed but left no run in the store (see {job.log or 'its log'})"
        elif run.status != COMPLETE:
            out.reason = f"its run ended {run.status}; {kept} case(s) kept"
        else:
            out.status, out.reason = MEASURED, f"{kept} case(s) measured"
    else:
        out.reason = f"the scheduler no longer knows the job ({said or 'no state'})"
    return out


def of_run(run: Run) -> NodeOutcome:
    """A run that no fleet record names (a node started by hand, or by Kubernetes)."""
    sched = run.meta.get("scheduler") or {}
    node = sched.get("SLURMD_NODENAME") or sched.get("NODE_NAME") or machine_of(run.meta)
    job = sched.get("SLURM_JOB_ID") or sched.get("POD_NAME") or ""
    out = NodeOutcome(node, configuration_of(run.meta), MEASURED, f"{_kept(run)} case(s) measured",
                      job, str(run.path), _kept(run))
    if run.status != COMPLETE:
        out.status = FAILED if run.status != "running" else RUNNING
        out.reason = (f"its run is {run.status} and no scheduler record says more; "
                      f"{out.cases_kept} case(s) kept")
    return out


def outcomes(record: FleetRecord | None, runs: list[Run]) -> list[NodeOutcome]:
    """One outcome per job of the record; without a record, one per run."""
    if record is None:
        return [of_run(r) for r in runs]
    return [of_job(job, _job_run(job, runs, record.fleet_id)) for job in record.jobs]
