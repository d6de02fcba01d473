"""One measurement at a time (runner/lock.py): a second run waits for the first and
says for whom, or exits 2 with --no-wait; a crashed holder frees the machine; --list
never waits. Two real processes, sequenced by what they print and write — never by
how long anything takes."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from cxlbench.cli.main import main
from cxlbench.runner import lock

REPO = Path(__file__).resolve().parent.parent
HOLDER = """
import sys
from cxlbench.runner import lock
with lock.measuring("cxlbench run --suite holder-a"):
    print("held", flush=True)
    sys.stdin.readline()                      # the test says when to let go
    open(sys.argv[1], "a").write("A done\\n")
"""
SECOND = """
import sys
from cxlbench.runner import lock
with lock.measuring("second"):
    open(sys.argv[1], "a").write("B measuring\\n")
"""


def _python(code: str, *args: str, **kw) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{REPO / 'tests'}"}
    return subprocess.Popen([sys.executable, "-c", code, *args], env=env, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw)


@pytest.fixture
def holder(tmp_path):
    """Another process that holds the measurement lock until told to let go."""
    log = tmp_path / "log"
    p = _python(HOLDER, str(log))
    assert p.stdout.readline().strip() == "held"
    yield p, log
    if p.poll() is None:
        p.kill()
        p.wait()


def _suite(tmp_path) -> str:
    suite = tmp_path / "tiny.toml"
    suite.write_text('repetitions = 2\n[[benchmark]]\nname = "fakes.family"\n')
    return str(suite)


def test_a_second_measurement_waits_for_the_first_and_says_for_whom(holder, tmp_path):
    a, log = holder
    b = _python(SECOND, str(log))
    waiting = b.stderr.readline()               # said before it blocks
    assert f"pid {a.pid}" in waiting and "cxlbench run --suite holder-a" in waiting and "since" in waiting
    a.stdin.write("go\n")
    a.stdin.flush()
    assert a.wait() == 0 and b.wait() == 0
    assert log.read_text().splitlines() == ["A done", "B measuring"]   # never both at once


def test_no_wait_exits_2_in_one_line_naming_the_holder_and_measures_nothing(holder, tmp_path, capsys):
    a, _ = holder
    out = tmp_path / "results"
    code = main(["run", "--suite", _suite(tmp_path), "--out", str(out), "--no-wait", "--no-report"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert f"pid {a.pid}" in err[0] and "--no-wait" in err[0]
    assert not out.exists()                     # no run directory was begun


def test_an_ab_session_holds_the_lock_too(holder, tmp_path, capsys):
    suite = _suite(tmp_path)
    ab = tmp_path / "ab.toml"
    ab.write_text(f'suite = "{suite}"\nrounds = 2\n[[config]]\nname = "a"\n[[config]]\nname = "b"\n')
    code = main(["ab", str(ab), "--out", str(tmp_path / "r"), "--no-wait"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and f"pid {holder[0].pid}" in err[0]


def test_a_crashed_holder_frees_the_machine(holder):
    a, _ = holder
    a.send_signal(signal.SIGKILL)               # no clean-up runs: the kernel closes its files
    a.wait()
    with lock.measuring("after the crash", wait=False):
        pass


def test_listing_a_plan_never_takes_the_lock(holder, tmp_path, capsys, monkeypatch):
    taken = []
    monkeypatch.setattr(lock, "measuring", lambda *a, **k: taken.append(a) or pytest.fail("took the lock"))
    assert main(["run", "--suite", _suite(tmp_path), "--list"]) == 0
    assert main(["topology"]) == 0
    assert not taken


def test_a_run_holds_the_lock_while_it_measures_and_lets_go_after(tmp_path, capsys, monkeypatch):
    seen = []
    real = lock.measuring

    def spy(command, wait=True, **kw):
        seen.append(command)
        return real(command, wait, **kw)
    monkeypatch.setattr(lock, "measuring", spy)
    assert main(["run", "--suite", _suite(tmp_path), "--out", str(tmp_path / "r"), "--no-report"]) == 0
    assert len(seen) == 1
    with lock.measuring("next", wait=False):        # free again
        pass


def test_nested_measurement_in_one_process_does_not_wait_on_itself():
    with lock.measuring("outer", wait=False):
        with lock.measuring("inner", wait=False):
            pass


def test_the_lock_file_says_who_holds_it_and_nobody_after(tmp_path, monkeypatch):
    monkeypatch.setenv(lock.ENV, str(tmp_path / "l"))
    with lock.measuring("cxlbench run --suite x"):
        fd = os.open(tmp_path / "l", os.O_RDONLY)
        assert f"pid {os.getpid()} (cxlbench run --suite x)" in lock.holder_text(fd)
        os.close(fd)
    assert (tmp_path / "l").read_text() == ""


def test_the_default_lock_is_machine_wide_under_run_lock(monkeypatch):
    monkeypatch.delenv(lock.ENV, raising=False)
    if not os.access("/run/lock", os.W_OK):
        pytest.skip("/run/lock is not writable here")
    assert lock.path() == Path("/run/lock/cxlbench.lock")


def test_the_holder_names_itself_as_the_command_a_person_typed():
    assert lock.command_text(["/venv/bin/cxlbench", "run", "--suite", "quick"], "x") == "cxlbench run --suite quick"
    assert lock.command_text(["/src/cxlbench/cli/main.py", "ab", "f.toml"], "x") == "cxlbench ab f.toml"
    assert lock.command_text([], "cxlbench run --suite quick") == "cxlbench run --suite quick"
