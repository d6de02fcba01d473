"""Training across ranks: two torchrun launchers on 127.0.0.1 (c10d rendezvous,
gloo) train the tiny Llama with FSDP2 into one store, beside a world-size-1 run;
every row says its rank and node rank, and the scaling table has both sizes."""
import os
import socket
import subprocess
import sys

import pytest

from cxlbench.fleet.scaling import table
from cxlbench.results.store import find_runs, load_run

pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(out, nnodes, rdzv_id, port):
    """One launcher per node, each told its node rank (static rendezvous, as a Slurm job
    step gives it). The elastic c10d rendezvous hung once here in CI: one agent, its
    worker done, waited out its exit barrier for the other, whose keep-alive and exit
    barrier share one store client (pytorch/pytorch#69520); the static one has no
    keep-alive."""
    def cmd(node):
        return [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(nnodes), "--nproc-per-node", "1",
                "--rdzv-backend", "static", "--master-addr", "127.0.0.1", "--master-port", str(port),
                "--node-rank", str(node), "--rdzv-id", rdzv_id, "--max-restarts", "0",
                "-m", "cxlbench.training.distributed", "--out", str(out),
                "--config", "cpu", "--steps", "3", "--warmup", "1"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TMPDIR": str(out)}     # torchelastic_* scratch goes with it
    return [subprocess.Popen(cmd(node), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            for node in range(nnodes)]


def finish(procs):
    """Every launcher's output, or, past the deadline, all of them killed and shown."""
    try:
        outs = [p.communicate(timeout=180)[0] for p in procs]
    except subprocess.TimeoutExpired:
        for p in procs:
            p.kill()
        pytest.fail("a launcher did not finish in 180 s:\n" + "\n".join(p.communicate()[0][-2000:] for p in procs))
    assert all(p.returncode == 0 for p in procs), "\n".join(o[-2000:] for o in outs)
    return outs


def test_two_launchers_train_the_tiny_llama_with_fsdp2_and_the_scaling_table_has_world_sizes_1_and_2(tmp_path):
    finish(launch(tmp_path, 1, "one", free_port()))
    outs = finish(launch(tmp_path, 2, "two", free_port()))
    assert any("world size 2: stored" in o for o in outs)
    runs = [load_run(p) for p in find_runs(tmp_path)]
    two = next(r for r in runs if r.meta["training"]["world_size"] == 2)
    per_rank = two.samples[two.samples.metric == "tokens_per_s"]
    assert sorted(set(zip(per_rank["rank"], per_rank["node_rank"]))) == [(0, 0), (1, 1)]
    assert (two.samples[two.samples.metric == "tokens_per_s_total"]["rank"] == -1).all()
    rows = table(runs)
    assert [(r.world_size, r.nodes) for r in rows] == [(1, 1), (2, 2)]
    assert rows[0].efficiency == pytest.approx(1.0) and 0 < rows[1].efficiency
