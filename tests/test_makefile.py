"""`make setup` on a machine that cannot build the C core says so first, in one line."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).parent.parent
MAKE = shutil.which("make")


@pytest.mark.skipif(MAKE is None, reason="no make here")
@pytest.mark.parametrize("how", ["no compiler on PATH", "CC names a compiler that is not there"])
def test_setup_without_a_c_compiler_says_so_before_any_work(tmp_path, how):
    """It ended with exit 2 a minute in, the missing x86_64-linux-gnu-gcc buried in 150
    lines of pip's output."""
    venv = tmp_path / "venv"
    env = {"HOME": str(tmp_path), "PIP_NO_INDEX": "1"}     # were it to go on: nothing downloaded
    args = [MAKE, "-s", "-C", str(REPO), "setup", f"VENV={venv}", f"PYTHON={os.path.realpath(sys.executable)}"]
    if how == "no compiler on PATH":
        env["PATH"] = str(tmp_path / "empty")
    else:
        env["PATH"] = os.environ.get("PATH", "")
        args.append("CC=no-such-cc")
    r = subprocess.run(args, capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode != 0
    first = r.stderr.splitlines()[0]
    assert first.startswith("make setup cannot start: no C compiler ("), r.stderr
    assert "is not on PATH" in first and "apt-get install gcc python3-dev python3-venv" in first
    if how != "no compiler on PATH":
        assert "(no-such-cc is not on PATH)" in first
    assert not venv.exists(), "refused before the virtual environment is made"
