"""The device-check scripts (python -m cxlbench.cli.devicecheck, .training_check) start
under any interpreter setting a machine may have."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.parametrize("script, words", [("devicecheck", "run the GPU suite here"),
                                           ("training_check", "Run the training placements")])
def test_the_check_scripts_start_with_docstrings_stripped(script, words):
    """PYTHONOPTIMIZE=2 (python -OO) strips __doc__, which their parsers' descriptions were
    cut from: both ended in an AttributeError before parsing an argument."""
    env = {**os.environ, "PYTHONOPTIMIZE": "2", "PYTHONPATH": str(Path(__file__).parent.parent)}
    r = subprocess.run([sys.executable, "-m", f"cxlbench.cli.{script}", "--help"],
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0 and words in r.stdout, r.stderr
