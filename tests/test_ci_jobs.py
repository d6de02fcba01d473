"""The CI job files to copy (ci/github, ci/gitlab): valid against their published
schemas offline (check-jsonschema bundles them), and their gate script run for real
on a throwaway history, with `cxlbench run` stood in for by a synthetic run and the
ten minutes between confirmation runs shortened (the runs' own clocks keep them
15 minutes apart, as the gate demands)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from ruamel.yaml import YAML

from tests.fakes.synthetic import machine, suite_results, write_run

REPO = Path(__file__).resolve().parent.parent
GITHUB, GITLAB = REPO / "ci/github/cxlbench.yml", REPO / "ci/gitlab/cxlbench.yml"
START = pd.Timestamp("2026-11-01T00:00:00+00:00")


@pytest.mark.parametrize("path, schema", [(GITHUB, "vendor.github-workflows"), (GITLAB, "vendor.gitlab-ci")])
def test_each_ci_file_is_valid_against_its_published_schema(path, schema):
    done = subprocess.run([sys.executable, "-m", "check_jsonschema", "--builtin-schema", schema, str(path)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_schema_check_refuses_a_broken_job(tmp_path):
    """The check above can fail: a job without what to run is refused."""
    broken = tmp_path / "broken.yml"
    broken.write_text(GITHUB.read_text().replace("runs-on: [self-hosted, cxlbench]", "runs-onn: x"))
    done = subprocess.run([sys.executable, "-m", "check_jsonschema", "--builtin-schema",
                           "vendor.github-workflows", str(broken)], capture_output=True, text=True)
    assert done.returncode != 0


def _yaml(path: Path) -> dict:
    return YAML(typ="safe").load(path.read_text())


def gate_script(path: Path) -> str:
    """The shell the job runs for the gate (the step or script line that calls it)."""
    doc = _yaml(path)
    if path == GITHUB:
        return next(s["run"] for s in doc["jobs"]["bench"]["steps"] if s.get("id") == "gate")
    return next(line for line in doc["bench"]["script"] if "gate --history" in line)


def test_both_jobs_keep_the_history_summarise_and_publish_the_site():
    gh, gl = _yaml(GITHUB), _yaml(GITLAB)
    steps = gh["jobs"]["bench"]["steps"]
    uses = [s.get("uses", "").split("@")[0] for s in steps]
    assert {"actions/cache/restore", "actions/cache/save", "actions/upload-pages-artifact"} <= set(uses)
    assert any("GITHUB_STEP_SUMMARY" in s.get("run", "") for s in steps)
    assert any("publish" in s.get("run", "") and "-o public" in s["run"] for s in steps)
    assert gh["jobs"]["pages"]["steps"][0]["uses"].startswith("actions/deploy-pages")
    assert gl["bench"]["cache"]["paths"] == ["history/"] and gl["bench"]["cache"]["when"] == "always"
    assert gl["bench"]["artifacts"]["reports"]["junit"] == "junit.xml"
    assert gl["pages"]["artifacts"]["paths"] == ["public/"]
    assert gate_script(GITHUB).split() == gate_script(GITLAB).split()      # one gate, two hosts


# ------------------------------------------------------------------ the gate script, run

def history_run(out: Path, label: str, slow: float, seed: int) -> Path:
    """One `ci`-shaped run 15 minutes after the newest under `out` (latency `slow` times higher)."""
    newest = [pd.Timestamp(json.loads(p.read_text())["started"]) for p in out.glob("*/*/run.json")]
    when = max(newest) + pd.Timedelta(minutes=15) if newest else START
    m, tiers = machine(cxl=False)
    results = suite_results(np.random.default_rng(seed), noise=0.01, tiers=("ddr0",), working_sets=[256 << 20],
                            pages=("4k",), kernels=("read",), threads=(1,), loaded=False, extras=False,
                            factor=lambda case, metric: slow if metric == "latency_ns" else 1 / slow)
    path = write_run(out, results, m=m, tiers=tiers, suite="ci", label=label)
    meta = json.loads((path / "run.json").read_text())
    meta["started"] = when.isoformat()
    (path / "run.json").write_text(json.dumps(meta))
    return path


STUB = """#!{python}
# `cxlbench run` is a synthetic run here; every other command is the real one.
import os, sys
sys.path[:0] = [{repo!r}]
args = sys.argv[1:]
if args[0] == "run":
    from pathlib import Path
    from tests.test_ci_jobs import history_run
    out = Path(args[args.index("--out") + 1])
    history_run(out, args[args.index("--label") + 1], float(os.environ["STUB_SLOW"]), len(list(out.rglob("run.json"))))
    sys.exit(0)
from cxlbench.cli.main import main
sys.exit(main(args))
"""


def _run_gate(job: Path, tmp_path: Path, confirmations_slow: float) -> tuple[int, str]:
    history = tmp_path / "history"
    for i in range(14):                                  # 13 like each other, then one 10% slower
        history_run(history, f"r{i}", 1.10 if i == 13 else 1.0, seed=i)
    stub = tmp_path / "cxlbench"
    stub.write_text(STUB.format(python=sys.executable, repo=str(REPO)))
    stub.chmod(0o755)
    env = {**os.environ, "CXLBENCH": str(stub), "HISTORY": str(history), "CONFIRM_SPACING": "0",
           "STUB_SLOW": str(confirmations_slow), "PYTHONPATH": str(REPO)}
    done = subprocess.run(["bash", "-c", gate_script(job)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    return done.returncode, done.stdout + done.stderr


@pytest.mark.slow
def test_a_suspect_run_gets_two_confirmation_runs_and_fails_when_they_are_slower_too(tmp_path):
    rc, output = _run_gate(GITHUB, tmp_path, confirmations_slow=1.10)
    assert rc == 1 and "Traceback" not in output, output
    assert len(list((tmp_path / "history").rglob("run.json"))) == 16
    verdict = json.loads((tmp_path / "gate.json").read_text())
    assert verdict["status"] == "fail" and len(verdict["confirmations"]) == 2
    junit = ET.parse(tmp_path / "junit.xml").getroot()
    assert int(junit.get("failures")) == int(junit.get("tests")) >= 1
    assert verdict["current"] in (tmp_path / "gate.md").read_text()


@pytest.mark.slow
def test_a_suspect_run_whose_confirmations_are_normal_passes(tmp_path):
    rc, output = _run_gate(GITLAB, tmp_path, confirmations_slow=1.0)
    assert rc == 0 and "Traceback" not in output, output
    verdict = json.loads((tmp_path / "gate.json").read_text())
    assert verdict["status"] == "pass" and {p["verdict"] for p in verdict["points"]} == {"not confirmed"}
    junit = ET.parse(tmp_path / "junit.xml").getroot()
    assert junit.get("failures") == "0" and int(junit.get("tests")) >= 1
