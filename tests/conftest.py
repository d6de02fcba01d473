"""Tests never write into the work tree.

`cxlbench run` stores runs under ./results and `cxlbench report` writes
./reports/<run>.html by default; a test that lets either happen in the checkout
(a command run from the repository root without -o or --out, say) leaves files
there that look like measurements. Each test is checked: a new entry in reports/
or results/ (two levels deep, which is where a run or a report appears) fails it
at teardown, naming the files. They are left where they are: a benchmark run in
this same checkout at the same time would show up the same way, and its results
are not the tests' to delete.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
WATCHED = ("reports", "results")


def _entries(top: Path, depth: int = 2) -> set[str]:
    found: set[str] = set()
    try:
        with os.scandir(top) as it:
            for entry in it:
                found.add(os.path.relpath(entry.path, REPO))
                if depth > 1 and entry.is_dir(follow_symlinks=False):
                    found |= _entries(Path(entry.path), depth - 1)
    except (FileNotFoundError, NotADirectoryError):
        pass
    return found


def work_tree_outputs() -> set[str]:
    """What is in reports/ and results/ now, as paths from the repository root."""
    return set().union(*(_entries(REPO / d) for d in WATCHED))


@pytest.fixture(autouse=True)
def _writes_nothing_into_the_work_tree(request):
    before = work_tree_outputs()
    yield
    new = sorted(work_tree_outputs() - before)
    if new:
        pytest.fail(f"{request.node.nodeid} wrote into the work tree: {', '.join(new)} — write "
                    f"into tmp_path instead (run commands there, or give them -o / --out)",
                    pytrace=False)


@pytest.fixture(autouse=True)
def _cpus_as_they_were():
    """A family measured in this process pins it (latency to the initiator's first
    CPU): put back after each test, or every later test runs on one CPU and a run
    built here sees only that one allowed (topology.allowed_cpus)."""
    before = os.sched_getaffinity(0)
    yield
    if os.sched_getaffinity(0) != before:
        os.sched_setaffinity(0, before)


@pytest.fixture(autouse=True, scope="session")
def _own_measurement_lock(tmp_path_factory):
    """The tests' runs take the measurement lock (runner/lock.py) like any run, but
    their own: a test session never waits on a real measurement of this machine, nor
    holds one up. Subprocesses inherit it through the environment."""
    from cxlbench.runner.lock import ENV
    saved = os.environ.get(ENV)
    os.environ[ENV] = str(tmp_path_factory.mktemp("lock") / "measure.lock")
    yield
    if saved is None:
        os.environ.pop(ENV, None)
    else:
        os.environ[ENV] = saved


@pytest.fixture
def one_torch_thread():
    """Training tests run torch on one thread (two tests in one process would otherwise
    race for the cores), and put back the thread count and CPU affinity that measure()
    changes when it pins to the initiator's CPUs."""
    import torch
    before, cpus = torch.get_num_threads(), os.sched_getaffinity(0)
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
    os.sched_setaffinity(0, cpus)


@pytest.fixture
def unwritable(tmp_path):
    """A folder this process cannot write: a read-only mount as root (who may write
    any folder whatever its mode), a mode of 0555 otherwise."""
    import subprocess
    ro = tmp_path / "ro"
    ro.mkdir()
    if os.geteuid() != 0:
        ro.chmod(0o555)
        yield ro
        ro.chmod(0o755)
        return
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(ro)],
                      capture_output=True).returncode != 0:
        pytest.skip("root here cannot mount a read-only tmpfs, and may write any folder")
    yield ro
    subprocess.run(["umount", str(ro)], check=True)
