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


def test_a_run_that_could_not_write_its_folder_is_refused_before_waiting(holder, tmp_path, capsys, unwritable):
    """In a checkout where root ran first, a user's `make bench` waited out another
    run, then failed on 'results/vm: Permission denied'."""
    code = main(["run", "--suite", _suite(tmp_path), "--out", str(unwritable / "results"), "--no-report"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert f"the run's folder cannot be made: {unwritable} is " in err[0] and "--out" in err[0]
    assert "waiting" not in err[0]


def test_a_run_whose_report_cannot_be_written_is_refused_before_it_measures(tmp_path, capsys, monkeypatch):
    """With a file named `reports` where the run starts, the run had measured every case
    and then ended 'reports: File exists', exit 2."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "reports").write_text("not a folder")
    out = tmp_path / "results"
    code = main(["run", "--suite", _suite(tmp_path), "--out", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "reports is a file here" in err[0] and "--no-report" in err[0]
    assert not out.exists()                     # refused before anything was measured


def test_an_ab_session_that_could_not_write_its_folder_is_refused_before_waiting(holder, tmp_path, capsys,
                                                                                  unwritable):
    suite = _suite(tmp_path)
    ab = tmp_path / "ab.toml"
    ab.write_text(f'suite = "{suite}"\nrounds = 2\n[[config]]\nname = "a"\n[[config]]\nname = "b"\n')
    code = main(["ab", str(ab), "--out", str(unwritable / "r")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and f"the run's folder cannot be made: {unwritable} is " in err[0], err


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


def test_the_default_lock_is_machine_wide_under_run_lock_dev_shm_and_tmp(monkeypatch):
    monkeypatch.delenv(lock.ENV, raising=False)
    if not all(os.access(d, os.W_OK) for d in lock.DIRS):
        pytest.skip(f"one of {lock.DIRS} is not writable here")
    assert lock.paths() == [Path("/run/lock/cxlbench.lock"), Path("/dev/shm/cxlbench.lock"),
                            Path("/tmp/cxlbench.lock")]


AS = """
import sys
from cxlbench.runner import lock
lock.DIRS = (sys.argv[2], sys.argv[3])
with lock.measuring(sys.argv[4]):
    print("held", flush=True)
    open(sys.argv[1], "a").write(sys.argv[4] + " measuring\\n")
    sys.stdin.readline()
    open(sys.argv[1], "a").write(sys.argv[4] + " done\\n")
"""


def _as(who: str, log: Path, dirs: tuple[Path, Path]) -> subprocess.Popen:
    """A measurement as root, or as a user who cannot make files in the first folder
    (systemd's /run/lock, 0755 root's): that folder read-only in its own mount namespace."""
    env = {k: v for k, v in os.environ.items() if k != lock.ENV}
    env["PYTHONPATH"] = f"{REPO}{os.pathsep}{REPO / 'tests'}"
    python = [sys.executable, "-c", AS, str(log), *map(str, dirs), who]
    if who == "user":
        first = dirs[0]
        python = ["unshare", "-m", "sh", "-c", f"mount --bind {first} {first} && "
                  f"mount -o remount,bind,ro {first} && exec \"$@\"", "sh", *python]
    return subprocess.Popen(python, env=env, text=True, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _first_line(p: subprocess.Popen) -> tuple[str, str]:
    """Which stream says something first, and what: a measurement that does not wait
    prints "held" and blocks on its stdin (a minute's guard, never a timing)."""
    import selectors
    with selectors.DefaultSelector() as sel:
        sel.register(p.stdout, selectors.EVENT_READ, "stdout")
        sel.register(p.stderr, selectors.EVENT_READ, "stderr")
        ready = sel.select(timeout=60)
    if not ready:
        p.kill()
        return "", "nothing within a minute"
    key = ready[0][0]
    return key.data, key.fileobj.readline()


@pytest.mark.parametrize("first", ["user", "root"])
def test_root_and_a_user_who_cannot_write_run_lock_still_measure_one_at_a_time(tmp_path, first):
    """Where /run/lock is root's alone, a user's lock went to /tmp and root's to
    /run/lock: the two measured at once, each half a CPU, and neither said so."""
    if os.geteuid() != 0 or subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode:
        pytest.skip("needs root and mount namespaces (unshare -m) to stand in for a user")
    dirs = (tmp_path / "run-lock", tmp_path / "tmp")
    for d in dirs:
        d.mkdir()
    log = tmp_path / "log"
    second = "root" if first == "user" else "user"
    a = _as(first, log, dirs)
    assert a.stdout.readline().strip() == "held", a.stderr.read()
    b = _as(second, log, dirs)
    said = _first_line(b)                          # "waiting ..." is said before it blocks
    assert said[0] == "stderr" and "waiting for" in said[1], f"{second} did not wait: {said}"
    a.stdin.write("go\n")
    a.stdin.flush()
    assert a.wait() == 0
    b.stdin.write("go\n")
    b.stdin.flush()
    assert b.wait() == 0, b.stderr.read()
    assert log.read_text().splitlines() == [f"{first} measuring", f"{first} done",
                                            f"{second} measuring", f"{second} done"]


@pytest.mark.parametrize("named, says", [("rel.lock", "is not an absolute path"),
                                         ("/nonexistent-dir/x.lock", "no measurement lock file could be opened"),
                                         ("{tmp}", "no measurement lock file could be opened")])
def test_a_lock_file_that_cannot_be_shared_is_refused_in_one_line(tmp_path, capsys, monkeypatch, named, says):
    """A relative CXLBENCH_LOCK is a different file from each folder: runs started from
    two folders measured at once."""
    monkeypatch.setenv(lock.ENV, named.format(tmp=tmp_path))
    code = main(["run", "--suite", _suite(tmp_path), "--out", str(tmp_path / "r"), "--no-report"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and says in err[0] and lock.ENV in err[0]


def test_the_holder_names_itself_as_the_command_a_person_typed():
    assert lock.command_text(["/venv/bin/cxlbench", "run", "--suite", "quick"], "x") == "cxlbench run --suite quick"
    assert lock.command_text(["/src/cxlbench/cli/main.py", "ab", "f.toml"], "x") == "cxlbench ab f.toml"
    assert lock.command_text([], "cxlbench run --suite quick") == "cxlbench run --suite quick"
