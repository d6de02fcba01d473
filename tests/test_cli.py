"""The commands as a user calls them: exit codes, one-line errors, files written."""
import json
from pathlib import Path

import numpy as np
import pytest

from cxlbench.cli.main import main
from cxlbench.settings import SETTINGS

from fakes import synthetic

FIXTURES = Path(__file__).parent / "fixtures"


def run_cli(capsys, *args):
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_topology_json_on_the_two_socket_cxl_fixture(capsys):
    code, out, _ = run_cli(capsys, "--root", str(FIXTURES / "two_socket_cxl"), "topology", "--json")
    assert code == 0
    doc = json.loads(out)
    assert {t["name"]: t["kind"] for t in doc["tiers"]} == {"ddr0": "ddr", "ddr1": "ddr", "cxl2": "cxl"}
    assert {i["name"] for i in doc["initiators"]} >= {"cpu:node0", "cpu:node1"}


def test_topology_declaration_is_recorded(capsys):
    code, out, _ = run_cli(capsys, "--root", str(FIXTURES / "two_socket_cxl"), "topology", "--json",
                           "--tier", "cxl=node:1")
    tiers = {t["name"]: t for t in json.loads(out)["tiers"]}
    assert code == 0 and tiers["cxl1"]["declared"] == "cxl=node:1"


def test_doctor_exit_code_follows_the_worst_verdict(capsys):
    code, out, _ = run_cli(capsys, "--root", str(FIXTURES / "two_socket_cxl"), "doctor")
    assert code in (1, 2) and out.strip()


def test_plan_on_the_fixture_lists_hugetlb_skips_with_reasons(capsys, tmp_path):
    suite = tmp_path / "s.toml"
    suite.write_text('[[benchmark]]\nname = "latency"\ninitiators = "all"\n'
                     'page = ["hugetlb-1g"]\nworking_set = ["64GiB"]\n')
    code, out, _ = run_cli(capsys, "--root", str(FIXTURES / "two_socket_cxl"), "run", "--suite",
                           str(suite), "--list")
    assert code == 0
    lines = [line for line in out.strip().splitlines()               # not the settings, not the sentinels
             if not line.startswith(("# ", "sentinels:"))]
    assert len(lines) == 6                    # 2 CPU nodes × 3 memory tiers
    assert all(line.startswith("skip") and "hugetlb-1g" in line for line in lines)


def _pair(tmp_path, worse=0.0):
    rng = np.random.default_rng(7)
    base = synthetic.write_run(tmp_path / "r", synthetic.suite_results(rng, noise=0.01))
    slower = (lambda case, metric: 1 + worse if metric == "latency_ns" else 1 / (1 + worse))
    cur = synthetic.write_run(tmp_path / "r", synthetic.suite_results(rng, noise=0.01, factor=slower))
    return str(base), str(cur)


def test_the_gates_warnings_are_printed_with_its_verdict_not_only_written_to_its_files(capsys, tmp_path):
    """A setting that differs (THP, a governor) reached --json and --markdown only; the
    terminal, where a CI log is read, said 'pass'."""
    rng = np.random.default_rng(7)
    base = synthetic.write_run(tmp_path / "r", synthetic.suite_results(rng, noise=0.01))
    m, tiers = synthetic.machine(thp="always")
    cur = synthetic.write_run(tmp_path / "r", synthetic.suite_results(rng, noise=0.01), m=m, tiers=tiers)
    code, out, _ = run_cli(capsys, "gate", "--baseline", str(base), "--current", str(cur))
    assert code == 0 and out.splitlines()[0].startswith("cxlbench gate: ")
    assert any(line.startswith("warning: setting differs: thp_enabled") for line in out.splitlines()[1:])


def test_gate_passes_aa_and_fails_a_regression_writing_its_reports(capsys, tmp_path):
    base, same = _pair(tmp_path)
    assert run_cli(capsys, "gate", "--baseline", base, "--current", same)[0] == 0
    _, worse = _pair(tmp_path, worse=0.3)
    md, js, xml = tmp_path / "g.md", tmp_path / "g.json", tmp_path / "g.xml"
    code, out, _ = run_cli(capsys, "gate", "--baseline", base, "--current", worse, "--markdown", str(md),
                           "--json", str(js), "--junit", str(xml))
    assert code == 1
    assert json.loads(js.read_text()) and md.read_text() and xml.read_text().startswith("<?xml")


def test_gate_on_unreadable_input_exits_2(capsys, tmp_path):
    base, _ = _pair(tmp_path)
    code, _, _ = run_cli(capsys, "gate", "--baseline", base, "--current", str(tmp_path / "missing"))
    assert code == 2


def test_report_and_compare_write_html(capsys, tmp_path):
    base, cur = _pair(tmp_path)
    code, out, _ = run_cli(capsys, "report", base, "-o", str(tmp_path / "a.html"))
    assert code == 0 and (tmp_path / "a.html").read_text().startswith("<!DOCTYPE html>")
    code, out, _ = run_cli(capsys, "compare", base, cur, "-o", str(tmp_path / "c.html"))
    assert code == 0 and "latency" in out and (tmp_path / "c.html").exists()


def test_no_output_goes_through_a_link_into_a_run_nor_over_a_stores_records(capsys, tmp_path):
    """A link named out.html pointing at a run's samples.parquet passed the guard (it
    looked at the link's folder) and the report overwrote the samples; ab.json,
    accepted.jsonl and _fleet/ records were not guarded at all, and none can be
    measured again."""
    base, cur = _pair(tmp_path)
    samples = Path(cur) / "samples.parquet"
    before = samples.read_bytes()
    (tmp_path / "out.html").symlink_to(samples)
    store = Path(cur).parent
    (store / "accepted.jsonl").write_text("")
    (store / "ab-x").mkdir()
    (store / "ab-x" / "ab.json").write_text("{}")
    (tmp_path / "_fleet").mkdir()
    (tmp_path / "_fleet" / "f1.json").write_text("{}")
    for out, says in ((tmp_path / "out.html", "inside the run"),
                      (store / "accepted.jsonl", "accepted changes"),
                      (store / "ab-x" / "ab.json", "A/B session"),
                      (tmp_path / "_fleet" / "f1.json", "fleet's record")):
        with pytest.raises(SystemExit) as stop:
            main(["report", base, "-o", str(out)])
        err = capsys.readouterr().err
        assert stop.value.code == 2 and says in err and len(err.strip().splitlines()) == 1, out
    assert samples.read_bytes() == before
    assert main(["report", base, "-o", str(tmp_path / "new" / "ab.json")]) == 0      # a user's own file name


def test_no_output_is_ever_written_into_a_run_and_no_run_into_another(capsys, tmp_path):
    """A report, a comparison, a gate's files, an export or a thresholds file aimed at a
    run's folder is refused before anything is written: the run keeps what it measured."""
    base, cur = _pair(tmp_path)
    before = {p.name: p.read_bytes() for p in Path(cur).iterdir() if p.is_file()}
    for args in (["report", base, "-o", f"{cur}/samples.parquet"],
                 ["compare", base, cur, "-o", f"{cur}/run.json"],
                 ["gate", "--baseline", base, "--current", cur, "--json", f"{cur}/run.json"],
                 ["export", base, "-o", f"{cur}/run.json"],
                 ["calibrate", base, cur, "--write-thresholds", f"{cur}/new/t.toml"],
                 ["run", "--suite", "quick", "--out", cur]):
        with pytest.raises(SystemExit) as stop:          # refused by the parser, before the command
            main(args)
        err = capsys.readouterr().err
        assert stop.value.code == 2 and "inside the run" in err and len(err.strip().splitlines()) == 1, args
    assert {p.name: p.read_bytes() for p in Path(cur).iterdir() if p.is_file()} == before
    assert not (Path(cur) / "new").exists()


def test_standard_output_is_no_file_in_the_run_one_stands_in(capsys, tmp_path, monkeypatch):
    base, _ = _pair(tmp_path)
    monkeypatch.chdir(base)
    assert main(["export", ".", "-o", "-"]) == 0 and capsys.readouterr().out.startswith("{")


@pytest.mark.parametrize("args, message", [
    (["compare", "only-one"], "at least two runs"),
    (["report", "/nonexistent/run"], "does not exist"),
    (["export", "/nonexistent/run", "-o", "x.json"], "does not exist"),
])
def test_bad_input_is_one_line_and_exit_2(capsys, args, message):
    code, out, err = run_cli(capsys, *args)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1


def test_every_commands_parser_loads_without_the_report_layers_libraries():
    """The test bed's guest (and a minimal node) has no jinja2 or matplotlib: building
    the parser must not import them, or every command fails, `topology` included."""
    import subprocess
    import sys
    code = ("import sys\nfrom cxlbench.cli.main import parser\nparser()\n"
            "print(sorted(m for m in ('jinja2', 'matplotlib') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stdout + out.stderr


@pytest.mark.parametrize("file, text, words", [
    ("sys/devices/system/node/node0/cpulist", "zz\n", "node0/cpulist holds 'zz', not a kernel CPU or node list"),
    ("sys/devices/system/node/node0/distance", "10 x\n", "node0/distance holds '10 x', not distances"),
    ("sys/devices/system/node/node0/cpulist", "0-99999999\n", "numbers below 8192"),   # not a 10^8 CPU list
])
def test_a_fixture_tree_with_a_malformed_file_is_one_line_naming_it(capsys, tmp_path, file, text, words):
    import shutil
    root = tmp_path / "root"
    shutil.copytree(FIXTURES / "two_socket_cxl", root, symlinks=True)
    (root / file).write_text(text)
    for command in ("topology", "doctor"):
        code, _, err = run_cli(capsys, "--root", str(root), command)
        assert code == 2 and words in err and len(err.strip().splitlines()) == 1


def test_a_name_with_a_nul_byte_in_a_sysfs_file_is_no_such_device_not_a_traceback(capsys, tmp_path):
    import shutil
    root = tmp_path / "root"
    shutil.copytree(FIXTURES / "two_socket_cxl", root, symlinks=True)
    target = next(root.glob("sys/devices/platform/*/root0/decoder0.0/region0/target0"))
    target.write_bytes(b"decoder2.0\0\n")
    for command in ("topology", "doctor"):
        code, _, err = run_cli(capsys, "--root", str(root), command)
        assert code in (0, 1, 2) and "Traceback" not in err and "null byte" not in err


def test_a_root_without_sysfs_is_refused_not_read_as_an_empty_machine(capsys, tmp_path):
    for root in ("/nonexistent", str(tmp_path)):
        with pytest.raises(SystemExit) as end:         # argparse's own exit, before any command
            main(["--root", root, "topology"])
        out, err = capsys.readouterr()
        assert end.value.code == 2 and "holds no sys/ tree" in err and not out


# ---- where the output goes ---------------------------------------------------------------

def _cli_process(args: list[str], stdout, env_extra: dict | None = None):
    import os
    import subprocess
    import sys
    env = {**os.environ, **(env_extra or {})}
    return subprocess.run([sys.executable, "-m", "cxlbench.cli.main", *args], stdout=stdout,
                          stderr=subprocess.PIPE, text=True, timeout=300, env=env)


def test_a_reader_that_leaves_costs_neither_the_files_asked_for_nor_the_verdict(tmp_path):
    """`cxlbench gate ... --json F | head -1`: once the pipe's reader has gone, what is
    printed is dropped, but the gate still writes F and exits with its verdict (1 for a
    regression), as it does with its output read to the end."""
    import os
    base, worse = _pair(tmp_path, worse=0.3)
    read, write = os.pipe()
    os.close(read)                                      # the reader is gone before a word is written
    with os.fdopen(write, "w") as gone:
        out = _cli_process(["gate", "--baseline", base, "--current", worse, "--json", str(tmp_path / "g.json")],
                           gone)
    assert out.returncode == 1 and out.stderr == ""
    assert json.loads((tmp_path / "g.json").read_text())


def test_a_full_disk_under_stdout_is_named_as_stdout_not_left_to_read_as_the_results_disk():
    with open("/dev/full", "w") as full:
        out = _cli_process(["advise", "--model", "8b", "--gpu", "h200", "--host", "h100-8gpu-cxl"], full)
    assert out.returncode == 2
    assert out.stderr == "cxlbench: error: standard output: No space left on device\n"


@pytest.mark.parametrize("option", ["--current", "--baseline"])
def test_an_empty_run_name_is_refused_not_read_as_the_newest_run(capsys, option):
    """`gate --history H --current "$SUSPECT"` with SUSPECT unset (python, not python3,
    on a Debian runner) judged the newest run, a confirmation, and exited 3 for 1."""
    args = ["gate", "--history", "results", "--current", ""] if option == "--current" else \
        ["gate", "--baseline", "", "--current", "x"]
    with pytest.raises(SystemExit) as end:
        main(args)
    assert end.value.code == 2
    assert f"argument {option}: is empty (an unset shell variable?)" in capsys.readouterr().err


@pytest.mark.parametrize("args, says", [
    (["run", "--suite", "ci", "--label", "x\udcff"], "is not UTF-8 text"),     # argv's undecodable byte
    (["run", "--suite", "ci", "--label", "a\x01b"], "holds a control character"),    # a tab or a line end may
    (["history", "results", "--accept", "latest", "--reason", "r\udcff"], "is not UTF-8 text"),
    (["run", "--suite", "ci", "--label", "two\nlines"], "holds a control character"),
    (["run", "--suite", "ci", "--label", "x" * 200_000], "is 200,000 characters: a label names a run"),
    (["ab", "f.toml", "--label", "x" * 201], "is 201 characters"),
])
def test_text_a_run_or_marker_keeps_is_refused_unless_it_is_utf8_without_control_characters(capsys, args, says):
    """Stored as a lone surrogate, a label broke every report, page and JSON written from
    the run afterwards (UnicodeEncodeError), and a reason broke every page of the machine."""
    with pytest.raises(SystemExit) as end:
        main(args)
    err = capsys.readouterr().err
    assert end.value.code == 2 and says in err and len(err.strip().splitlines()) == 1
    assert len(err) < 500                    # the text is quoted cut short, the line one a reader sees


def test_a_terminal_without_unicode_gets_question_marks_not_a_traceback(tmp_path):
    out = _cli_process(["advise", "--model", "8b", "--gpu", "h200", "--host", "h100-8gpu-cxl"], -1,
                       {"PYTHONIOENCODING": "ascii", "LC_ALL": "C", "PYTHONUTF8": "0"})
    assert out.returncode == 0 and out.stderr == "" and "8 ? h200" in out.stdout


def test_a_gates_files_go_into_a_folder_it_makes(capsys, tmp_path):
    base, worse = _pair(tmp_path, worse=0.3)
    code, _, err = run_cli(capsys, "gate", "--baseline", base, "--current", worse,
                           "--json", str(tmp_path / "new" / "deeper" / "g.json"))
    assert code == 1 and err == "" and json.loads((tmp_path / "new" / "deeper" / "g.json").read_text())


def test_calibrate_refuses_a_run_that_is_not_whole_and_export_says_what_it_holds(capsys, tmp_path):
    """A run still being measured calibrated half the cases; the rest kept the default
    threshold without a word. An export of it said nothing either."""
    import json as js
    base, same = _pair(tmp_path)
    meta = js.loads((Path(same) / "run.json").read_text())
    (Path(same) / "run.json").write_text(js.dumps({**meta, "status": "partial"}))
    code, out, err = run_cli(capsys, "calibrate", base, same)
    assert code == 2 and "is partial, not complete: an A/A pair is two whole runs" in err
    code, out, err = run_cli(capsys, "export", same, "-o", str(tmp_path / "x.json"))
    assert code == 0 and "is partial: the export holds the cases it finished" in err


def test_calibrate_leaves_a_thresholds_file_that_exists_as_it_was(capsys, tmp_path):
    base, same = _pair(tmp_path)
    mine = tmp_path / "thresholds.toml"
    mine.write_text('default = "7%"\n')
    code, out, err = run_cli(capsys, "calibrate", base, same, "--write-thresholds", str(mine))
    assert code == 2 and "the file exists" in err and len(err.strip().splitlines()) == 1
    assert mine.read_text() == 'default = "7%"\n'


@pytest.mark.parametrize("args, words", [
    (["gate", "--history", "{r}", "--thresholds", "t.toml"], "--thresholds applies to gate --baseline, not --history"),
    (["gate", "--history", "{r}", "--exit-undecided"], "--exit-undecided applies to gate --baseline"),
    (["gate", "--baseline", "{base}", "--current", "{cur}", "--window", "12"],
     "--window applies to gate --history, not --baseline"),
    (["history", "{r}", "--reason", "new firmware"], "--reason goes with --accept RUN"),
    (["history", "{r}", "--normalize", "sentinel"], "has drift sentinels to normalise by"),
    (["report", "{base}", "--store-option", "endpoint_url=http://x:9000"], "names none: it would be ignored"),
])
def test_an_option_the_command_would_ignore_is_one_line_and_exit_2(capsys, tmp_path, args, words):
    base, cur = _pair(tmp_path)
    code, out, err = run_cli(capsys, *(a.format(r=tmp_path / "r", base=base, cur=cur) for a in args))
    assert code == 2 and words in err and len(err.strip().splitlines()) == 1, err


def test_a_closed_stdout_and_a_deleted_current_directory_are_one_line_or_nothing(tmp_path):
    """`cxlbench topology >&-` (a job with no stdout) runs; a shell whose directory was
    deleted under it gets one line, not a traceback from resolving a relative path."""
    import os
    import subprocess
    import sys
    cli = f"{sys.executable} -m cxlbench.cli.main"
    paths = [str(Path(__file__).parent.parent), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}    # no empty entry: that is the cwd
    closed = subprocess.run(["sh", "-c", f"{cli} --root {FIXTURES / 'two_socket_cxl'} topology >&-"],
                            capture_output=True, text=True, env=env, timeout=120)
    assert closed.returncode == 0 and closed.stderr == ""
    (tmp_path / "gone").mkdir()
    gone = subprocess.run(["sh", "-c", f"cd {tmp_path / 'gone'} && rmdir {tmp_path / 'gone'} && "
                                       f"{cli} run --list --suite quick"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert gone.returncode == 2 and "Traceback" not in gone.stderr
    assert "the current directory no longer exists" in gone.stderr.splitlines()[-1]


def test_an_interpreter_without_the_dependencies_gets_one_line_naming_them():
    """`python3 -m cxlbench.cli.main` from a bare interpreter (no `make setup`) failed with
    a traceback from an import deep in the results store."""
    import os
    import subprocess
    import sys
    hide = "import sys; sys.modules['pandas'] = sys.modules['scipy'] = None; " \
           "from cxlbench.cli.main import main; sys.exit(main(['run', '--list', '--suite', 'quick']))"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)}
    bare = subprocess.run([sys.executable, "-c", hide], capture_output=True, text=True, env=env, timeout=120)
    assert bare.returncode == 2 and "Traceback" not in bare.stderr, bare.stderr
    line, = bare.stderr.strip().splitlines()
    assert "pandas, scipy are not installed" in line and "make setup" in line


def test_an_output_that_cannot_be_written_is_refused_before_the_work(capsys, unwritable):
    """`gate --json` into a read-only folder printed the verdict, then ended with exit 2
    for the file: a CI job read a regression's exit 1 as a bad argument."""
    base, cur = _pair(unwritable.parent)
    with pytest.raises(SystemExit) as ended:
        main(["gate", "--baseline", str(base), "--current", str(cur), "--json", str(unwritable / "v" / "g.json")])
    err = capsys.readouterr()
    assert ended.value.code == 2 and err.out == ""
    assert f"cannot be written: {unwritable} is " in err.err and len(err.err.strip().splitlines()) == 1


def test_a_process_that_cannot_start_threads_is_told_so_before_anything_runs():
    """At a low limit on processes pyarrow hung reading a run while the run held the
    machine's lock, and OpenBLAS raised SIGINT into scipy's import: the command said
    'interrupted'. Root is exempt from ulimit -u, so the probe runs as nobody."""
    import os
    import subprocess
    import sys
    if os.geteuid() != 0:
        pytest.skip("needs root to become nobody, whose process count the limit can hold")
    probe = ("import os, resource, sys; from cxlbench.cli import preflight; "
             "os.setgid(65534); os.setuid(65534); resource.setrlimit(resource.RLIMIT_NPROC, (6, 6)); "
             "print(preflight.too_few_threads()); print(preflight.too_few_threads() is None)")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)}
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=120)
    said, passed = r.stdout.strip().splitlines()
    assert r.returncode == 0 and passed == "False", r.stderr
    assert said.startswith("this process cannot start 16 threads (") and "ulimit -u" in said


def test_an_import_that_never_ends_under_an_address_space_limit_is_one_line_not_a_hang(tmp_path, monkeypatch):
    """At ulimit -v 380000 scipy's OpenBLAS retried a buffer it could not map forever,
    deaf to SIGTERM. The probe imports in a child it kills past its time; here a module
    that sleeps stands in for OpenBLAS, and a finite limit is reported."""
    import resource
    import sys
    from cxlbench.cli import preflight
    (tmp_path / "never_loads.py").write_text("import time\ntime.sleep(30)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(preflight, "REQUIRED", ("never_loads",))
    monkeypatch.setattr(preflight, "IMPORT_S", 0.5)
    assert preflight.imports_hang() is None or resource.getrlimit(resource.RLIMIT_AS)[0] != resource.RLIM_INFINITY
    monkeypatch.setattr(resource, "getrlimit", lambda what: (380000 << 10, resource.RLIM_INFINITY))
    said = preflight.imports_hang()
    assert said.startswith("importing numpy, pandas, pyarrow and scipy did not finish within 0.5 s")
    assert "ulimit -v 380000 KiB" in said and "never_loads" not in sys.modules


def test_the_thread_probe_leaves_the_command_s_address_space_as_it_was():
    """Sixteen threads' malloc arenas outlive them: probed in this process, they took it
    from 13 MiB to 1 GiB of address space, enough to fail a command under ulimit -v."""
    from cxlbench.cli import preflight

    def vm_kib() -> int:
        return int(next(line for line in open("/proc/self/status") if line.startswith("VmSize:")).split()[1])
    before = vm_kib()
    assert preflight.too_few_threads() is None
    assert vm_kib() - before < 16 << 10


@pytest.mark.parametrize("name, value", [("CXLBENCH_ADAMW_ISA", "AVX2"), ("CXLBENCH_ADAMW_ISA", " scalar"),
                                         ("CXLBENCH_ADAMW_STORES", "Plain")])
def test_a_setting_the_c_core_would_ignore_is_refused_before_anything(capsys, monkeypatch, tmp_path, name,
                                                                      value):
    """The C core takes any value it does not know for the default: 'Plain' measured
    the streaming stores, 'AVX2' the widest path, while the run recorded the value.
    Only what runs the C core refuses it: a report or a gate never reads it."""
    monkeypatch.setenv(name, value)
    suite = tmp_path / "tiny.toml"
    suite.write_text('repetitions = 2\n[[benchmark]]\nname = "fakes.family"\n')
    code, out, err = run_cli(capsys, "run", "--suite", str(suite), "--out", str(tmp_path / "r"), "--no-report")
    assert not (tmp_path / "r").exists()
    assert code == 2 and err.strip() == f"cxlbench: error: {name}={value!r} is not one of " \
        f"{', '.join(SETTINGS[name])} (the C core would ignore it)"
    assert run_cli(capsys, "run", "--list", "--suite", str(suite))[0] == 0


def test_commands_run_with_docstrings_stripped():
    """PYTHONOPTIMIZE=2 (python -OO) strips __doc__, which the parser's description was
    cut from: every command failed with an AttributeError."""
    import os
    import subprocess
    import sys
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)}
    r = subprocess.run([sys.executable, "-OO", "-m", "cxlbench.cli.main", "run", "--list", "--suite", "quick"],
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0 and "latency" in r.stdout, r.stderr


def _unmappable():
    """What pandas raised at ulimit -v 600000: numpy's failed load, re-raised."""
    try:
        raise ImportError("libscipy_openblas.so: failed to map segment from shared object")
    except ImportError as e:
        raise ImportError("Unable to import required dependency numpy") from e


@pytest.mark.parametrize("exhausted", [MemoryError, _unmappable])
def test_running_out_of_memory_is_one_line_saying_so(capsys, monkeypatch, exhausted):
    from cxlbench.cli import commands

    def topology(*args, **kwargs):
        if exhausted is MemoryError:
            raise MemoryError()
        _unmappable()
    monkeypatch.setattr(commands, "topology", topology)
    code, out, err = run_cli(capsys, "topology")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "out of memory (" in err


def test_a_second_ending_signal_while_the_first_is_handled_is_only_noted():
    """systemd's TERM then HUP: the first is raised as Ctrl-C; the second must not land
    in the middle of keeping what finished."""
    import os
    import signal
    from cxlbench.cli.streams import standing
    with standing() as stop:
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGTERM)          # the handler runs before kill returns
        os.kill(os.getpid(), signal.SIGHUP)             # handled: nothing raised
    assert stop.signal == signal.SIGTERM


@pytest.mark.parametrize("error, dropped", [(OSError(28, "No space left on device"), True),
                                            (BlockingIOError(11, "Resource temporarily unavailable"), False)])
def test_stderr_is_dropped_for_a_full_disk_but_not_for_a_busy_pipe(error, dropped):
    from cxlbench.cli.streams import ReaderMayLeave

    class Failing:
        def write(self, text):
            raise error

        def fileno(self):
            raise OSError("no descriptor")
    notes = ReaderMayLeave(Failing(), notes_only=True)
    if dropped:
        assert notes.write("x") == 1 and notes.gone
    else:
        with pytest.raises(BlockingIOError):
            notes.write("x")


def test_dev_stdout_appended_by_the_shell_is_written_in_place_not_replaced(tmp_path):
    """`cxlbench gate ... --json /dev/stdout >> log`: /dev/stdout resolves to log itself, a
    regular file, which a rename would replace with the JSON alone."""
    import subprocess
    import sys
    log = tmp_path / "log.txt"
    log.write_text("earlier line\n")
    code = "from pathlib import Path\nfrom cxlbench.results.store import atomic_write\n" \
           "atomic_write(Path('/dev/stdout'), b'{\"json\": 1}\\n')\n"
    with open(log, "a") as out:
        subprocess.run([sys.executable, "-c", code], stdout=out, check=True, timeout=60)
    assert log.read_text() == 'earlier line\n{"json": 1}\n'


def test_the_summary_takes_no_figure_from_a_case_that_failed_part_way():
    """With the workers' interpreter gone mid-run, a case's two good repetitions were
    printed as its figure, unmarked, above '1 case(s) failed'."""
    from dataclasses import replace
    from cxlbench.cli.tier_table import tier_summary
    results = synthetic.suite_results(np.random.default_rng(3), tiers=("ddr0",), working_sets=[1 << 30],
                                      threads=(1,), kernels=("read",), pages=("4k",), loaded=False, extras=False)
    whole = synthetic.make_run(results)
    cut = synthetic.make_run([replace(r, status="failed", reason="worker exited with code 255")
                              if r.case.benchmark == "latency" else r for r in results])
    assert " ns [" in tier_summary(whole.samples, whole.meta)
    assert " ns [" not in tier_summary(cut.samples, cut.meta) and "GB/s [" in tier_summary(cut.samples, cut.meta)
    everything = synthetic.make_run([replace(r, status="failed", reason="x") for r in results])
    assert tier_summary(everything.samples, everything.meta).startswith("no case was measured whole")



def test_the_terminal_names_each_warning_once_and_leaves_the_rest_to_the_report():
    from cxlbench.cli.tier_table import warning_lines
    meta = {"cases": [{"case_id": f"c{i}", "status": "ok", "info": {"warnings": [f"w{i % 7}"]}} for i in range(14)]
            + [{"case_id": "gone", "status": "failed", "info": {"warnings": ["not shown: the case failed"]}}]}
    lines = warning_lines(meta)
    assert lines[:2] == ["warning: w0 (2 cases)", "warning: w1 (2 cases)"] and len(lines) == 6
    assert lines[-1] == "... and 2 more warnings; the report lists each with its case"
    assert warning_lines({"cases": [{"case_id": "c", "status": "ok", "info": {"warnings": ["once"]}}]}) == \
        ["warning: once (c)"]


def test_a_user_may_name_standard_output_whatever_it_is_and_wherever_they_stand():
    """As a user, `--json /dev/stdout >> log` was refused because /dev is not theirs
    (the file behind stdout is a regular one, so it was taken for a file to replace),
    and `-o -` in a folder they cannot write was refused for that folder."""
    import os
    import subprocess
    import sys
    if os.geteuid() != 0:
        pytest.skip("needs root to become nobody (root may write /dev and any folder)")
    import shutil
    import tempfile
    base = Path(tempfile.mkdtemp(dir="/tmp"))             # pytest's own folder is root's alone
    base.chmod(0o755)
    log, here = base / "log", base / "here"
    log.touch()
    log.chmod(0o666)                                    # the user's own log, as theirs would be
    here.mkdir(mode=0o555)
    # set dumpable again after setuid, as a user's own process is: else /proc/self is root's
    probe = ("import ctypes, os; from cxlbench.cli.argtypes import out_file; import cxlbench.results.store; "
             f"os.setgid(65534); os.setuid(65534); ctypes.CDLL(None).prctl(4, 1, 0, 0, 0); "
             f"os.chdir({str(here)!r}); "
             "print(out_file('/dev/stdout'), out_file('-'))")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)}
    with open(log, "a") as appended:
        r = subprocess.run([sys.executable, "-c", probe], stdout=appended, stderr=subprocess.PIPE, text=True,
                           env=env, timeout=120)
    said = log.read_text().strip()
    shutil.rmtree(base)
    assert r.returncode == 0, r.stderr
    assert said == "/dev/stdout -"


def test_an_interpreter_without_the_report_s_libraries_measures_and_refuses_only_the_report(tmp_path):
    """The test bed's guest has no jinja2 or matplotlib and measures with --no-report:
    requiring them of every command failed it; a report asked for there is one line."""
    import os
    import subprocess
    import sys
    suite = tmp_path / "tiny.toml"
    suite.write_text('repetitions = 2\n[[benchmark]]\nname = "fakes.family"\n')
    tests = Path(__file__).parent
    env = {**os.environ, "PYTHONPATH": f"{tests.parent}{os.pathsep}{tests}"}

    def bare(*args: str) -> subprocess.CompletedProcess:
        code = ("import sys; sys.modules['jinja2'] = sys.modules['matplotlib'] = None; "
                f"from cxlbench.cli.main import main; sys.exit(main({list(args)!r}))")
        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    measured = bare("run", "--suite", str(suite), "--out", str(tmp_path / "r"), "--no-report")
    assert measured.returncode == 0, measured.stderr
    reported = bare("run", "--suite", str(suite), "--out", str(tmp_path / "r"))
    line, = reported.stderr.strip().splitlines()[-1:]
    assert reported.returncode == 2 and "Traceback" not in reported.stderr
    assert "a report needs jinja2" in line or "a report needs matplotlib" in line

