"""A container's, pod's or job's memory limit: read from this process's cgroup (v1 and
v2 fixture trees), and a case sized past it is skipped with the reason before it runs,
not killed by the cgroup's OOM killer mid-measurement."""
import shutil
from pathlib import Path

from cxlbench.analysis.machine import warnings
from cxlbench.benchmarks import bandwidth, interleave, latency
from cxlbench.topology.cgroup import memory_limit
from cxlbench.runner.run import build_env
from planning import plan

FIXTURES = Path(__file__).parent / "fixtures"
GIB = 1 << 30


def tree(root: Path, files: dict[str, str]) -> str:
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    return str(root)


def test_v2_the_tightest_limit_above_the_process_counts_and_inactive_page_cache_is_free(tmp_path):
    root = tree(tmp_path, {
        "proc/self/cgroup": "0::/kubepods/pod1/ctr\n",
        "sys/fs/cgroup/kubepods/pod1/ctr/memory.max": "max\n",
        "sys/fs/cgroup/kubepods/pod1/memory.max": f"{4 * GIB}\n",
        "sys/fs/cgroup/kubepods/pod1/memory.current": f"{GIB}\n",
        "sys/fs/cgroup/kubepods/pod1/memory.stat": f"anon 1000\ninactive_file {GIB // 2}\n",
        "sys/fs/cgroup/kubepods/memory.max": f"{64 * GIB}\n",
    })
    limit = memory_limit(root)
    assert (limit.limit_bytes, limit.free_bytes) == (4 * GIB, 4 * GIB - GIB // 2)
    assert limit.where == "/sys/fs/cgroup/kubepods/pod1"


def test_v1_reads_the_memory_controller_and_its_no_limit_value_is_none(tmp_path):
    files = {"proc/self/cgroup": "4:memory:/slurm/job7\n3:cpuset:/\n",
             "sys/fs/cgroup/memory/slurm/job7/memory.limit_in_bytes": f"{2 * GIB}\n",
             "sys/fs/cgroup/memory/slurm/job7/memory.usage_in_bytes": f"{GIB}\n",
             "sys/fs/cgroup/memory/slurm/job7/memory.stat": "total_inactive_file 0\n",
             "sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712\n"}
    assert memory_limit(tree(tmp_path, files)).free_bytes == GIB
    files["sys/fs/cgroup/memory/slurm/job7/memory.limit_in_bytes"] = "9223372036854771712\n"
    assert memory_limit(tree(tmp_path, files)) is None
    assert memory_limit(str(FIXTURES / "two_socket_cxl")) is None       # no /proc/self/cgroup: no limit


def test_a_case_sized_past_the_pods_limit_is_skipped_saying_so(tmp_path):
    root = tmp_path / "m"
    shutil.copytree(FIXTURES / "two_socket_cxl", root, symlinks=True)
    tree(root, {"proc/self/cgroup": "0::/pod\n", "sys/fs/cgroup/pod/memory.max": f"{2 * GIB}\n",
                "sys/fs/cgroup/pod/memory.current": "0\n"})
    env = build_env(str(root), [])
    assert env.machine.environment.memory_limit_bytes == 2 * GIB
    suite = {"repetitions": 1, "warmup": 1, "min_sample_s": 0.01, "kernel": ["triad"], "threads": [1]}
    skips = {p.case.params["array_bytes"]: p.skip for size in ("1GiB", "512MiB")
             for p in plan(bandwidth, {**suite, "array_bytes": size}, env) if p.case.target == "ddr0"}
    assert skips[512 << 20] is None                    # 1.5 GiB of 2: fits
    assert skips[1 << 30] == ("needs 3072 MiB, more than 80% of what this process's memory limit leaves "
                              "free (2048 MiB free of its cgroup's 2048 MiB)")
    chase = plan(latency, {"repetitions": 1, "warmup": 1, "min_sample_s": 0.01, "working_set": ["8GiB"]}, env)
    assert all("memory limit" in p.skip for p in chase)
    assert any("limited to 4.0 GiB by its cgroup" in w
               for w in warnings({"environment": {"memory_limit_bytes": 4 * GIB,
                                                  "memory_limit_free_bytes": 4 * GIB}}))


def test_a_case_spread_over_nodes_is_sized_against_the_limit_on_its_total(tmp_path):
    """A cgroup caps the process, not a node: at 50/50 each half fitted the limit alone
    and a case of 1.5 times the pod's memory was planned, to be killed."""
    root = tmp_path / "m"
    shutil.copytree(FIXTURES / "two_socket_cxl", root, symlinks=True)
    tree(root, {"proc/self/cgroup": "0::/pod\n", "sys/fs/cgroup/pod/memory.max": f"{2 * GIB}\n",
                "sys/fs/cgroup/pod/memory.current": "0\n"})
    env = build_env(str(root), [])
    init, ddr, far = env.initiators["cpu:node0"], env.tiers["ddr0"], env.tiers["cxl2"]
    params = {"ddr_weight": 50, "probe": "bandwidth", "kernel": "triad", "array_bytes": 1 << 30}
    assert interleave.cannot(params, init, ddr, far, env).startswith("needs 3072 MiB in all, more than 80% of")
    assert interleave.cannot({**params, "array_bytes": 256 << 20}, init, ddr, far, env) is None
