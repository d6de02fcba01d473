"""The offload engine's delayed parameter update (DPU, ZeRO-Offload §5.2).

After `dpu_warmup_steps` ordinary steps, step i's host update runs on a thread of
its own while step i+1's forward and backward run on parameters one update stale,
and it is applied before step i+2. These tests check that schedule by what the
engine computed and by the order of recorded events, never by timing; the loss
curves by a fixed seed. One torch thread, as in test_training.py.
"""
from __future__ import annotations

import os
import threading

import pytest
import torch

from cxlbench.training.configs import model_config, train_config
from cxlbench.training.data import MarkovTokens
from cxlbench.training.delayed import DelayedUpdateError
from cxlbench.training.engine import OffloadEngine, build_model
from cxlbench.training.model import loss_fn
from cxlbench.training.optimizer import HostAdamW
from cxlbench.training.placement import Placement
from cxlbench.training.session import overlap_of
from planning import plan

NODE0 = 0 if os.path.isdir("/sys/devices/system/node/node0") else None
WARMUP = 2


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _setup(dpu: bool, steps: int, batch: int = 4, seq: int = 32):
    cfg = model_config("tiny")
    train = train_config("tiny", batch=batch, seq_len=seq, chunk_params=1 << 14, dpu=dpu,
                         dpu_warmup_steps=WARMUP)
    return cfg, train, MarkovTokens(cfg.vocab_size, seed=0).batches(steps, batch, seq)


def _engine(cfg, train, tmp_path=None, nvme=False, **kw) -> OffloadEngine:
    placement = Placement("nvme", "nvme", NODE0) if nvme else Placement(NODE0, NODE0, NODE0)
    return OffloadEngine(cfg, train, placement, "cpu", nvme_dir=str(tmp_path) if nvme else None, **kw)


def _dpu_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("dpu-update") and t.is_alive()]


@pytest.mark.parametrize("nvme", [False, True])
def test_the_warm_up_steps_are_the_synchronous_engines_bit_for_bit(tmp_path, nvme):
    """Steps before dpu_warmup_steps run the ordinary way, and the first delayed step
    still reads the parameters the synchronous engine reads: identical losses and
    master parameters, to the bit."""
    cfg, sync_train, batches = _setup(False, WARMUP + 1)
    _, dpu_train, _ = _setup(True, WARMUP + 1)
    runs = {}
    for name, train in (("sync", sync_train), ("dpu", dpu_train)):
        engine = _engine(cfg, train, tmp_path, nvme)
        try:
            losses = [engine.step(*b).loss for b in batches[:WARMUP]]
            master = engine.master_params()           # nothing in flight yet: no flush
            losses.append(engine.step(*batches[WARMUP]).loss)
        finally:
            engine.close()
        runs[name] = losses, master
    assert runs["dpu"][0] == runs["sync"][0]
    assert torch.equal(runs["dpu"][1], runs["sync"][1])


def test_after_warm_up_each_step_reads_the_parameters_of_the_update_before_last():
    """Staleness exactly one: step i+1's forward reads the master parameters as step
    i-1's update left them (not step i's, not step i-2's). Checked against a
    synchronous replay: a fresh twin of the model at the parameters each step read
    gives the gradients the engine stepped with, and AdamW over those, one step after
    the other, gives every master the engine produced."""
    steps = 8
    cfg, train, batches = _setup(True, steps)
    engine = _engine(cfg, train)
    used, grads_in, master_after = [], [], []
    engine.model.register_forward_pre_hook(
        lambda m, a: used.append(torch.cat([p.detach().reshape(-1) for p in m.parameters()]).clone()))
    real = engine.host_opt.step

    def recording_step(grads, on_chunk=None):
        grads_in.append(grads.clone())
        out = real(grads, on_chunk)
        master_after.append(engine.master.clone())
        return out
    engine.host_opt.step = recording_step
    initial = engine.master.clone()
    try:
        stale = [engine.step(*b).staleness for b in batches]
        engine.flush()
    finally:
        engine.close()

    assert stale == [0] * (WARMUP + 1) + [1] * (steps - WARMUP - 1)
    assert len(master_after) == steps                      # every step's update, the last by flush
    assert torch.equal(used[0], initial)
    for i in range(1, steps):
        if i <= WARMUP:                                    # ordinary: the update just before
            assert torch.equal(used[i], master_after[i - 1])
        else:                                              # delayed: the one before that
            assert torch.equal(used[i], master_after[i - 2])
            assert not torch.equal(used[i], master_after[i - 1])

    # the synchronous replay
    twin = build_model(cfg, train)
    p, m, v = initial.clone(), torch.zeros_like(initial), torch.zeros_like(initial)
    replay = HostAdamW(p, m, v, p.numel(), engine.host_opt.hyper, engine.impl, engine.chunk)
    for i, (x, y) in enumerate(batches):
        offset = 0
        for q in twin.parameters():
            q.data = used[i][offset:offset + q.numel()].view(q.shape).clone()
            q.grad = None
            offset += q.numel()
        loss_fn(twin(x), y).backward()
        g = torch.cat([q.grad.reshape(-1) for q in twin.parameters()])
        torch.testing.assert_close(g, grads_in[i], rtol=1e-5, atol=1e-7)
        replay.step(grads_in[i])
        assert torch.equal(p, master_after[i]), f"step {i}'s update differs from the replay"


def test_the_update_runs_while_the_next_forward_and_backward_run():
    """By order, not time: each delayed update is handed to its thread before the next
    step's forward starts, and holds back until that forward has finished (a forward
    hook says when): an engine that ran the update before the forward could not pass
    (the update would wait in vain and fail the step), and one that launched it after
    the forward would record the launch after it."""
    steps = 7
    cfg, train, batches = _setup(True, steps)
    events: list = []
    engine = _engine(cfg, train, events=events)
    forward_done = threading.Event()
    step_of = {"i": 0}

    def after_forward(module, args, out):
        engine.dpu.event("forward_end", step_of["i"])
        forward_done.set()
    engine.model.register_forward_hook(after_forward)
    real = engine.host_opt.step

    def held_step(grads, on_chunk=None):
        if threading.current_thread().name.startswith("dpu-update"):
            if not forward_done.wait(60):
                raise TimeoutError("the next step's forward never ran beside the update")
        return real(grads, on_chunk)
    engine.host_opt.step = held_step
    try:
        for i, b in enumerate(batches):
            step_of["i"] = i
            forward_done.clear()
            engine.step(*b)
    finally:
        engine.close()

    at = {e: k for k, e in enumerate(events)}
    delayed = range(WARMUP, steps - 1)                     # updates launched by the step after
    for i in delayed:
        assert (at[("update_launched", i)] < at[("forward_start", i + 1)] < at[("forward_end", i + 1)]
                < at[("update_end", i)])
        assert at[("update_start", i)] < at[("update_end", i)]
        assert at[("backward_end", i + 1)] < at[("applied", i)]
        if ("forward_start", i + 2) in at:                 # applied before the step after reads
            assert at[("applied", i)] < at[("forward_start", i + 2)]
    assert ("update_launched", steps - 1) not in at        # the last waits for a flush
    assert not any(name == "update_launched" for name, i in events if i < WARMUP)   # warm-up: in line


def test_an_error_in_the_update_thread_fails_the_next_step_and_close_still_ends_the_thread():
    cfg, train, batches = _setup(True, 6)
    engine = _engine(cfg, train)

    def broken(grads, on_chunk=None):
        raise ValueError("state file vanished")
    try:
        for b in batches[:WARMUP + 1]:
            engine.step(*b)
        engine.host_opt.step = broken
        with pytest.raises(DelayedUpdateError, match="ValueError: state file vanished"):
            engine.step(*batches[WARMUP + 1])              # launches the update, joins its failure
    finally:
        engine.close()
    assert not _dpu_threads()


def test_close_joins_the_update_thread():
    cfg, train, batches = _setup(True, 5)
    engine = _engine(cfg, train)
    try:
        for b in batches:
            engine.step(*b)
        assert len(_dpu_threads()) == 1
    finally:
        engine.close()
    assert not _dpu_threads()


def test_the_update_thread_has_its_own_openmp_team_and_leaves_the_mains():
    torch.set_num_threads(2)
    cfg, train, _ = _setup(True, 1)
    engine = _engine(cfg, train, dpu_threads=1)
    try:
        assert torch.get_num_threads() == 2
        assert engine.dpu._pool.submit(torch.get_num_threads).result() == 1
    finally:
        engine.close()


def test_with_the_delayed_update_the_loss_falls_as_without_it():
    """30 steps, fixed seed. The parameters are one update stale, so the curves are not
    identical: DPU's loss trails by a little (5.9% at most here, batch 4 × 64 tokens),
    held within 10% of the synchronous run's at every step; both fall by over 30%."""
    cfg, _, batches = _setup(False, 30, seq=64)
    curves = {}
    for dpu in (False, True):
        _, train, _ = _setup(dpu, 30, seq=64)
        engine = _engine(cfg, train)
        try:
            curves[dpu] = [engine.step(*b).loss for b in batches]
        finally:
            engine.close()
    sync, dpu = curves[False], curves[True]
    for curve in (sync, dpu):
        assert sorted(curve[-5:])[2] < 0.7 * curve[0]
    assert all(abs(d - s) <= 0.10 * s for s, d in zip(sync, dpu))
    assert dpu[:WARMUP + 1] == sync[:WARMUP + 1] and dpu[WARMUP + 1:] != sync[WARMUP + 1:]


# ---- the family and the session ----------------------------------------------------

def test_the_step_model_composition_follows_the_engine_and_the_device():
    assert overlap_of("offload", cuda=False, dpu=True) == "dpu-shared"
    assert overlap_of("offload", cuda=True, dpu=True) == "dpu"
    assert overlap_of("offload", cuda=False, dpu=False) == "serial"
    assert overlap_of("offload", cuda=True, dpu=False) == "overlapped"
    assert overlap_of("none", cuda=True, dpu=False) == "none"


def test_the_dpu_axis_doubles_only_the_offload_placements(tmp_path):
    from cxlbench.benchmarks import training
    from test_training import _env
    table = {"name": "training", "mode": "train", "config": ["tiny"], "steps": 3, "warmup_steps": 2,
             "engine": ["offload", "none"], "optimizer_on": ["ddr", "nvme"], "dpu": [False, True]}
    planned = [p for p in plan(training, table, _env(tmp_path, gpu=False)) if p.skip is None]
    keys = sorted((p.case.target, p.case.params["engine"], p.case.params.get("dpu", False)) for p in planned)
    assert keys == [("ddr0", "none", False), ("ddr0", "offload", False), ("ddr0", "offload", True),
                    ("nvme0", "offload", False), ("nvme0", "offload", True)]
    dpu = [p.case for p in planned if p.case.params.get("dpu")]
    assert all(c.params["dpu_warmup_steps"] == 1 for c in dpu)        # warmup_steps - 1: untimed
    plain = [p.case for p in planned if not p.case.params.get("dpu")]
    assert all("dpu" not in c.case_id for c in plain)                  # ordinary cases keep their ids


@pytest.mark.skipif(NODE0 is None, reason="no NUMA node 0")
def test_a_dpu_case_says_so_and_is_checked_against_the_shared_core_composition(tmp_path):
    from cxlbench.benchmarks import training
    from test_training import _env
    env = _env(tmp_path, gpu=False)
    table = {"name": "training", "mode": "train", "config": ["tiny"], "steps": 3, "warmup_steps": 2,
             "engine": ["offload"], "optimizer_on": ["nvme"], "dpu": [True]}
    (case,) = [p.case for p in plan(training, table, env) if p.skip is None]
    info: dict = {}
    samples = training.measure(case, env, info)
    torch.set_num_threads(1)
    assert {s.metric for s in samples} <= set(training.METRICS)
    assert info["dpu"]["on"] and info["dpu"]["staleness"] == 1 and info["dpu"]["warmup_steps"] == 1
    assert info["dpu"]["update_threads"] == 1
    waits = [s for s in samples if s.metric == "update_wait_s"]
    assert len(waits) == 3 and all(s.value >= 0 for s in waits)
    (pred,) = [s for s in samples if s.metric == "predicted_step_s"]
    assert pred.params["model_overlap"] == "dpu-shared"


def test_a_dpu_run_whose_first_delayed_step_would_be_timed_is_refused():
    from cxlbench.training.session import RunSpec, run
    train = train_config("tiny", batch=2, seq_len=16, warmup_steps=2, steps=2, dpu=True,
                         dpu_warmup_steps=2)
    with pytest.raises(ValueError, match="must be below warmup_steps"):
        run(RunSpec("tiny", "offload", train, Placement(NODE0, NODE0, NODE0)))


def test_the_device_checks_dpu_table_runs_the_same_path_on_the_cpu():
    """scripts/device-check.sh runs this on a GPU; here the same code on the CPU: a row
    without DPU and one with, each checked against its own composition."""
    from cxlbench.cli.devicecheck import dpu_check
    lines = list(dpu_check(["tiny"], ["ddr"], "cpu", steps=3))
    rows = [line for line in lines[2:] if line.startswith("|")]
    assert len(rows) == 2, lines
    assert "| off |" in rows[0] and "| serial |" in rows[0]
    assert "| on (warm-up 2, staleness 1) |" in rows[1] and "| dpu-shared |" in rows[1]
    # each case's notes follow the table: on a GPU, why a term is priced as it is
    assert any(line.startswith("- note (DPU): CPU AdamW chosen") for line in lines[4:])


@pytest.mark.skipif(NODE0 is None, reason="no NUMA node 0")
def test_a_failed_update_fails_the_case_rather_than_skipping_or_hanging_it(tmp_path, monkeypatch):
    """measure() raises the update thread's error (the runner records the case as
    failed, with its reason); it is no Skip, and the engine's thread is gone."""
    from cxlbench.benchmarks import training
    from cxlbench.benchmarks.base import Skip
    from test_training import _env
    real = HostAdamW.step

    def failing(self, grads, on_chunk=None):
        if threading.current_thread().name.startswith("dpu-update"):
            raise OSError("the optimizer's tier went away")
        return real(self, grads, on_chunk)
    monkeypatch.setattr(HostAdamW, "step", failing)
    env = _env(tmp_path, gpu=False)
    table = {"name": "training", "mode": "train", "config": ["tiny"], "steps": 3, "warmup_steps": 2,
             "engine": ["offload"], "optimizer_on": ["ddr"], "dpu": [True]}
    (case,) = [p.case for p in plan(training, table, env) if p.skip is None]
    with pytest.raises(DelayedUpdateError, match="the optimizer's tier went away") as failure:
        training.measure(case, env, {})
    assert not isinstance(failure.value, Skip)
    assert not _dpu_threads()


def test_on_a_cpu_run_the_update_and_its_copy_back_are_probed_on_the_update_thread(tmp_path, monkeypatch):
    """The copy back into the compute copy is the update thread's (a one-thread team),
    so its rate is read there, as the optimizer's is; the gradients' copy stays the main's."""
    from cxlbench.benchmarks import training
    from cxlbench.training import probes
    from test_training import _env
    where = []
    real = probes.copy_spans_Bps

    def spy(dst, src, spans, **kw):
        where.append((threading.current_thread().name.startswith("dpu-update"), dst.data_ptr()))
        return real(dst, src, spans, **kw)
    monkeypatch.setattr(probes, "copy_spans_Bps", spy)
    env = _env(tmp_path, gpu=False)
    table = {"name": "training", "mode": "train", "config": ["tiny"], "steps": 3, "warmup_steps": 2,
             "engine": ["offload"], "optimizer_on": ["ddr"], "dpu": [True, False]}
    cases = {p.case.params.get("dpu", False): p.case for p in plan(training, table, env) if p.skip is None}
    training.measure(cases[True], env, {})
    torch.set_num_threads(1)
    assert [on_update for on_update, _ in where] == [False, True]      # d2h on main, h2d on the update's
    where.clear()
    training.measure(cases[False], env, {})
    torch.set_num_threads(1)
    assert [on_update for on_update, _ in where] == [False, False]     # no update thread: both on main
