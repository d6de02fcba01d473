"""`cxlbench fleet ...`: many machines through an existing engine, one store.

    fleet run        one Slurm job per node, each the ordinary `cxlbench run` into the store
    fleet status     what each node of a fleet did, as the scheduler says now
    fleet report     the store's machines by configuration: matrix, spread, outliers, A vs B
    fleet manifests  Kubernetes Indexed Jobs, one per configuration, validated offline

Each body is a function with explicit parameters (tests call them); bad input is
one line and exit 2 through cli.main's known errors.
"""
from __future__ import annotations

import argparse
import re
from pathlib import Path

from cxlbench.cli.argtypes import fraction, out_file, seconds, slurm_time, whole
from cxlbench.cli.commands import UserError, write_out
from cxlbench.version import __version__


def store_options(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("--store-option", action="append", default=[], metavar="KEY=VALUE",
                    help="an option of the store's filesystem, e.g. endpoint_url=http://host:9000 "
                         "(S3: also CXLBENCH_S3_ENDPOINT)")


def add_parser(sub) -> None:
    f = sub.add_parser("fleet", help="many machines through Slurm or Kubernetes, into one store")
    fsub = f.add_subparsers(dest="fleet_command", required=True, metavar="FLEET_COMMAND")

    r = fsub.add_parser("run", help="one Slurm job per node: the ordinary run, into the store")
    r.add_argument("--store", required=True, help="results store every node writes to (a shared path or s3://...)")
    r.add_argument("--suite", default="quick")
    r.add_argument("--config", action="append", default=[], metavar="NAME=NODELIST",
                   help="a configuration and its nodes (repeatable), e.g. cxl-a=node[01-04]")
    r.add_argument("--nodes", help="nodes whose configuration each derives from its machine")
    r.add_argument("--partition", help="Slurm partition (without --config/--nodes: every node of it)")
    r.add_argument("--time", default="01:00:00", type=slurm_time, help="each job's time limit (Slurm's format)")
    r.add_argument("--account")
    r.add_argument("--log-dir", default="reports/fleet-logs", help="where the jobs' output goes (shared)")
    r.add_argument("--python", help="the command that runs cxlbench on the nodes "
                                    "(default: this interpreter -m cxlbench.cli.main)")
    r.add_argument("--no-wait", action="store_true", help="submit and return (fleet status tells later)")
    r.add_argument("--wait-timeout", type=seconds, help="stop waiting after this many seconds")
    r.add_argument("--poll", type=seconds, default=5.0, help="seconds between looks at the queue")
    store_options(r)
    r.set_defaults(func=lambda a: fleet_run(a.store, a.suite, a.config, a.nodes, a.partition, a.time,
                                            a.account, a.log_dir, a.python, not a.no_wait, a.wait_timeout,
                                            a.poll))

    s = fsub.add_parser("status", help="what each node of a fleet did (asks the scheduler again)")
    s.add_argument("store")
    s.add_argument("--fleet", help="the fleet's id (default: the newest in the store)")
    store_options(s)
    s.set_defaults(func=lambda a: fleet_status(a.store, a.fleet))

    p = fsub.add_parser("report", help="machines by configuration: matrix, spread, outliers, A vs B")
    p.add_argument("store")
    p.add_argument("--fleet", help="whose node outcomes to show (default: the newest fleet)")
    p.add_argument("--threshold", default="10%", type=fraction, help="outlier: off the configuration's median by more (10%%)")
    p.add_argument("--compare", nargs=2, metavar=("A", "B"), help="configuration B against A")
    p.add_argument("--compare-threshold", default="5%", type=fraction, help="smallest change that matters (5%%)")
    p.add_argument("-o", "--out", type=out_file, help="the HTML page (default: reports/fleet-<id>.html)")
    store_options(p)
    p.set_defaults(func=lambda a: fleet_report(a.store, a.fleet, a.threshold, a.compare, a.compare_threshold,
                                               a.out))

    m = fsub.add_parser("manifests", help="Kubernetes Indexed Jobs, one per configuration (validated offline)")
    m.add_argument("--store", required=True)
    m.add_argument("--image", default=f"cxlbench:{__version__}",
                   help="the image the pods run (default: cxlbench:VERSION, what scripts/build-image.sh builds; "
                        "push it to a registry the nodes reach and name that)")
    m.add_argument("--suite", default="quick")
    m.add_argument("--config", action="append", required=True, metavar="NAME=NODES",
                   help="a configuration and how many nodes carry its label (repeatable)")
    m.add_argument("--label-key", default="cxlbench.io/config",
                   help="the node label whose value names the configuration")
    m.add_argument("--namespace", default="default")
    m.add_argument("--time", type=whole(1), default=3600, help="seconds each Job may run")
    m.add_argument("--hugepages", action="append", default=[], metavar="SIZE=AMOUNT",
                   help="opt in to huge pages per pod, e.g. 2Mi=2Gi or 1Gi=4Gi")
    m.add_argument("--memory", default="16Gi",
                   help="each pod's memory limit (default 16Gi): a triad holds three arrays of 4x the last-level "
                        "cache, 6 GiB beside a 480 MiB L3; a case sized past the limit is skipped, saying so")
    m.add_argument("--privileged", action="store_true", help="opt in to privileged pods (MSRs, drop_caches)")
    m.add_argument("--secret", help="a Secret with the store's credentials (envFrom)")
    m.add_argument("--endpoint", help="the S3 endpoint the pods use (CXLBENCH_S3_ENDPOINT)")
    m.add_argument("--kube-version", help="the API version to validate against (default: the newest known)")
    m.add_argument("-o", "--out", type=out_file, help="write here (default: stdout)")
    m.set_defaults(func=lambda a: fleet_manifests(a.store, a.image, a.suite, a.config, a.label_key, a.namespace,
                                                  a.time, a.hugepages, a.memory, a.privileged, a.secret,
                                                  a.endpoint, a.kube_version, a.out))


def _fraction(text: str, what: str) -> float:
    from cxlbench.units import parse_fraction
    try:
        return parse_fraction(text, what)
    except ValueError as e:
        raise UserError(str(e)) from None


def _say(job) -> None:
    print(f"  {job.node:<20} {job.configuration:<16} job {job.job_id or '-':<8} {job.state}"
          + (f" ({job.reason})" if job.reason not in ("", "None") else ""), flush=True)


def _show(store: str, record) -> int:
    from cxlbench.fleet.outcome import MEASURED, outcomes
    from cxlbench.results.store import ResultsError, find_runs, load_run
    try:
        runs = [load_run(p) for p in find_runs(store)]
    except ResultsError:
        runs = []
    nodes = outcomes(record, runs)
    for n in nodes:
        print(f"{n.node:<20} {n.configuration:<16} {n.status:<14} {n.reason}")
    counts = {s: sum(n.status == s for n in nodes) for s in dict.fromkeys(n.status for n in nodes)}
    print("fleet " + record.fleet_id + ": " + ", ".join(f"{v} {k}" for k, v in counts.items()))
    return 0 if nodes and all(n.status == MEASURED for n in nodes) else 1


def fleet_run(store: str, suite: str, configs: list[str], nodes: str | None, partition: str | None,
              time_limit: str, account: str | None, log_dir: str, python: str | None, wait: bool = True,
              wait_timeout: float | None = None, poll_s: float = 5.0) -> int:
    """Submit one job per node, then (unless told not to) wait and say what each did.
    Exit 0 when every node measured, 1 when any failed or never started."""
    from cxlbench.fleet import slurm
    from cxlbench.fleet.record import FleetRecord, new_fleet_id, where
    from cxlbench.results import location
    from cxlbench.runner.suite import load_suite
    load_suite(suite)                                # a bad suite stops here, not on every node
    if location.is_url(store):
        location.check_reachable(store)
    else:
        store = str(Path(store).resolve())           # the nodes start elsewhere
    try:
        chosen = slurm.targets(configs, nodes, partition)
        fleet_id = new_fleet_id()
        record = FleetRecord(fleet_id, "slurm", store, suite)
        print(f"fleet {fleet_id}: {len(chosen)} job(s) into {store}", flush=True)
        slurm.submit(record, chosen, lambda t: slurm.run_command(suite, store, t.configuration, fleet_id, python),
                     time_limit, partition, Path(log_dir).resolve(), account)
    except slurm.FleetError as e:
        raise UserError(str(e)) from None
    for job in record.jobs:
        _say(job)
    print(f"record: {where(store, fleet_id)}", flush=True)
    if not wait:
        return 0
    slurm.wait(record, wait_timeout, poll_s, _say)
    return _show(store, record)


def fleet_status(store: str, fleet_id: str | None = None) -> int:
    from cxlbench.fleet import record as records, slurm
    record = records.load(store, fleet_id)
    if record is None:
        raise UserError(f"no fleet record in {store} (fleet run writes one)")
    if record.engine == "slurm":
        try:
            slurm.refresh(record)
        except slurm.FleetError as e:
            print(f"(the scheduler was not asked: {e})")
    return _show(store, record)


def fleet_report(store: str, fleet_id: str | None = None, threshold: str = "10%",
                 compare: list[str] | None = None, compare_threshold: str = "5%", out: str | None = None) -> int:
    from cxlbench.fleet import page
    rep = page.build(store, fleet_id, _fraction(threshold, "--threshold"), tuple(compare) if compare else None,
                     _fraction(compare_threshold, "--compare-threshold"))
    print(page.text(rep))
    print(f"report: {page.render(rep, out)}")
    return 0


#: A Kubernetes resource quantity (2Gi, 512Mi, 1.5G, 100m): what the API server takes;
#: the offline schema leaves it unchecked.
#: Nodes one configuration's Job may span: past it, a count is a typo (each is a pod)
MAX_NODES = 10_000
#: A Secret's name: a DNS-1123 subdomain
SECRET = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
QUANTITY = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+|Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E)?$")
#: A namespace is a DNS-1123 label.
NAMESPACE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def _amount(text: str) -> bool:
    """A Kubernetes quantity that is more than nothing (a pod asks for memory, not less)."""
    if not QUANTITY.match(text) or text.startswith("-"):
        return False
    number = re.match(r"[\d.]+(?:[eE][+-]?\d+)?", text.lstrip("+"))
    return bool(number) and float(number.group()) > 0


def _check_job_fields(store: str, image: str, namespace: str, memory: str | None,
                      kube_version: str | None, secret: str | None = None, endpoint: str | None = None) -> None:
    """What the schema validation does not catch, refused before any manifest is written."""
    for flag, value in (("--store", store), ("--image", image)):
        if not value.strip():
            raise UserError(f"{flag} is empty")
    from cxlbench.results import location
    if not location.is_url(store):
        raise UserError(f"--store {store!r} is a path inside each pod, lost when the pod ends: give the store's "
                        "URL (s3://bucket/prefix), which every pod writes to")
    if not re.match(r"^[a-z][a-z0-9+.-]*://[^/\s]+", store):
        raise UserError(f"--store {store!r} names no bucket: give s3://bucket/prefix")
    if re.search(r"\s", image):
        raise UserError(f"--image {image!r} is not an image reference (it holds a space)")
    if not NAMESPACE.match(namespace):
        raise UserError(f"--namespace {namespace!r} is not a Kubernetes namespace (lower-case letters, digits "
                        f"and '-', at most 63)")
    if memory is not None and not _amount(memory):
        raise UserError(f"--memory {memory!r} is not a positive Kubernetes quantity (e.g. 64Gi)")
    if secret is not None and not SECRET.match(secret):
        raise UserError(f"--secret {secret!r} is not a Kubernetes Secret's name (lower-case letters, digits, "
                        "'-' and '.', at most 253)")
    if endpoint is not None and not re.match(r"^https?://[^/\s]+(/\S*)?$", endpoint):
        raise UserError(f"--endpoint {endpoint!r} is not an http(s) URL (e.g. http://minio.storage:9000)")
    if kube_version is not None:
        from kubernetes_validate.utils import all_versions
        known = sorted(set(all_versions()), key=lambda v: tuple(int(x) for x in v.split(".")))
        if kube_version not in known and f"{kube_version}.0" not in known:
            raise UserError(f"--kube-version {kube_version!r}: the schemas here know {known[0]} to {known[-1]}")


def fleet_manifests(store: str, image: str, suite: str, configs: list[str], label_key: str, namespace: str,
                    time_s: int, hugepages: list[str], memory: str, privileged: bool, secret: str | None,
                    endpoint: str | None, kube_version: str | None, out: str | None) -> int:
    from cxlbench.fleet.kubernetes import HUGEPAGE_SIZES, JobSpec, manifests, validate
    from cxlbench.fleet.record import new_fleet_id
    from cxlbench.runner.suite import load_suite
    load_suite(suite)                                # a bad suite stops here, not in every pod
    _check_job_fields(store, image, namespace, memory, kube_version, secret, endpoint)
    pages = {}
    for item in hugepages:
        size, sep, amount = item.partition("=")
        if not sep or size not in HUGEPAGE_SIZES or not _amount(amount):
            raise UserError(f"--hugepages {item!r} is not SIZE=AMOUNT with SIZE one of {', '.join(HUGEPAGE_SIZES)} "
                            f"and AMOUNT a positive Kubernetes quantity (e.g. 2Gi)")
        pages[size] = amount
    fleet_id, specs, names = new_fleet_id(), [], set()
    for item in configs:
        name, sep, count = item.partition("=")
        if not sep or not name or not count.isdigit() or not 1 <= int(count) <= MAX_NODES:
            raise UserError(f"--config {item!r} is not NAME=NODES (a configuration and how many nodes carry it, "
                            f"1 to {MAX_NODES:,})")
        if name in names:
            raise UserError(f"--config {name!r} is given twice: each configuration is one Job, named for it")
        names.add(name)
        specs.append(JobSpec(name, int(count), image, store, suite, fleet_id, label_key=label_key,
                             namespace=namespace, time_limit_s=time_s, hugepages=pages, memory=memory,
                             privileged=privileged, secret=secret, endpoint=endpoint))
    text = manifests(specs)
    problems = validate(text, kube_version)
    if problems:
        raise UserError("the manifests do not validate against the Kubernetes API schema: " + problems[0])
    if out and out != "-":            # "-": standard output, as export takes it (... -o - | kubectl apply -f -)
        write_out(out, text)
        print(f"wrote {out}: {len(specs)} Indexed Job(s), valid against the Kubernetes API schema")
    else:
        print(text, end="")
    return 0
