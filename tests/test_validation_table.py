"""scripts/validation_table.py pairs each round's cxlbench read with the likwid-bench
runs validate.sh made just before and after it: the pairing is what docs/validation.md's
ratios rest on, so a round matched with the wrong runs would move them silently."""
import importlib.util
import math
from pathlib import Path

import pandas as pd
import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "validation_table.py"


@pytest.fixture(scope="module")
def vt():
    spec = importlib.util.spec_from_file_location("validation_table", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def per_run(rows):
    return pd.DataFrame([{"benchmark": "bandwidth", "page": "4k", "threads": t, "round": float(r), "value": v}
                         for r, t, v in rows])


def test_each_round_has_one_likwid_figure_the_geometric_mean_of_its_two_runs(vt, tmp_path):
    (tmp_path / "likwid-load-T1.txt").write_text("1 before 20000\n1 after 20000\n2 before 18000\n2 after 32000\n")
    assert vt.likwid_reads(tmp_path, 1) == pytest.approx([20.0, 24.0])


def test_a_folder_from_before_the_sandwich_gives_every_run(vt, tmp_path):
    (tmp_path / "likwid-load-T1.txt").write_text("21000\n22000.5\n")
    assert vt.likwid_reads(tmp_path, 1) == pytest.approx([21.0, 22.0005])


def test_a_round_is_paired_with_its_own_runs_and_the_rest_are_named(vt, tmp_path, capsys):
    (tmp_path / "likwid-load-T1.txt").write_text(
        "1 before 20000\n1 after 20000\n"     # paired: 22 / 20
        "2 before 18000\n2 after 32000\n"     # paired: 24 / 24
        "3 before 21000\n"                    # no run after: unpaired
        "4 before 20000\n4 after 20000\n")    # two cxlbench reads in round 4: unpaired
    frame = per_run([(1, 1, 22.0), (2, 1, 24.0), (3, 1, 25.0), (4, 1, 20.0), (4, 1, 30.0),
                     (1, 2, 99.0), (float("nan"), 1, 50.0)])
    vt.sandwich(tmp_path, frame, 1)
    out = capsys.readouterr().out
    gm = math.sqrt(1.1 * 1.0)
    assert f"geometric mean {gm:.3f}, 2 rounds" in out
    assert "median 1.050 (1.00-1.10)" in out
    assert "rounds 3, 4 left unpaired" in out


def test_no_sandwich_no_paired_line(vt, tmp_path, capsys):
    (tmp_path / "likwid-load-T1.txt").write_text("21000\n")
    vt.sandwich(tmp_path, per_run([(1, 1, 22.0)]), 1)
    assert capsys.readouterr().out == ""


def test_rounds_are_read_from_the_labels_old_and_new(vt, tmp_path):
    for run_id, label in (("a", "r3-read"), ("b", "round7"), ("c", "r12-1GiB-4k"), ("d", "nightly")):
        folder = tmp_path / "results" / run_id
        folder.mkdir(parents=True)
        (folder / "run.json").write_text(f'{{"run_id": "{run_id}", "label": "{label}"}}')
    assert vt.run_rounds(tmp_path) == {"a": 3, "b": 7, "c": 12, "d": None}


def test_the_read_buffers_contiguity_is_summarised_per_thread_count_or_said_missing(vt):
    rows = [{"benchmark": "bandwidth", "page": "4k", "metric": "bandwidth_GBps", "threads": float(t),
             "phys_contiguity": c, "value": 1.0} for t, c in ((1, 0.5), (1, 0.9), (1, 0.7), (2, 0.8))]
    line = vt.contiguity_line(pd.DataFrame(rows))
    assert "1 thread median 0.70 (0.50-0.90)" in line and "2 threads median 0.80 (0.80-0.80)" in line
    hidden = pd.DataFrame([{**rows[0], "phys_contiguity": None}])
    assert "not recorded" in vt.contiguity_line(hidden)
    assert "not recorded" in vt.contiguity_line(pd.DataFrame([rows[0]]).drop(columns="phys_contiguity"))


def test_the_multichase_frames_line_counts_each_repetitions_buffer_once_beside_the_peers_arena(vt):
    # a repetition's tails share its buffer: five metrics of one repetition are one buffer
    rows = [{"working_set_bytes": 1 << 30, "page": "4k", "run_id": "r1", "repetition": rep,
             "phys_contiguity": c} for rep, c in ((0, 0.1), (1, 0.2), (2, 0.9)) for _ in range(5)]
    rows += [{"working_set_bytes": 1 << 24, "page": "4k", "run_id": "r1", "repetition": 0, "phys_contiguity": 0.5}]
    line = vt._frames_line(pd.DataFrame(rows), 1 << 30, [0.4, 0.0, 0.8])
    assert "cxlbench's buffers 0.20 (0.10-0.90)" in line and "multichase's arena 0.40 (0.00-0.80)" in line
    hidden = pd.DataFrame(rows).assign(phys_contiguity=None)
    assert "cxlbench's buffers not recorded" in vt._frames_line(hidden, 1 << 30, [0.4])
