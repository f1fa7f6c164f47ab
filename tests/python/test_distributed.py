"""Data-parallel training steps (parallel="ddp") over torch.distributed on
gloo: processes spawned on this machine (one thread each), each training on
its part of every batch, against one process trained on the whole batches."""
import os
import socket
import subprocess
import sys
import tempfile

import numpy as np
import pytest

import tilefuse
from tilefuse import optim

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available():
    pytest.skip("this PyTorch has no torch.distributed", allow_module_level=True)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import distributed_cases as cases  # noqa: E402
from emulated_link import EmulatedLink  # noqa: E402

TIMEOUT = 300


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([HERE] + [p for p in sys.path if p])
    env["OMP_NUM_THREADS"] = env["TILEFUSE_NUM_THREADS"] = "1"
    return env


def _results(out, world):
    got = []
    for r in range(world):
        path = f"{out}.rank{r}.npz"
        assert os.path.exists(path), f"rank {r} wrote no result"
        got.append(dict(np.load(path)))
    return got


def _spawn(case, world, tmp, **env):
    """Runs `case` on `world` processes joined through a file store."""
    store, out = os.path.join(tmp, "store"), os.path.join(tmp, "out")
    procs = [subprocess.Popen([sys.executable, os.path.join(HERE, "distributed_worker.py"), case,
                               str(r), str(world), store, out], env={**_env(), **env},
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
             for r in range(world)]
    logs = [p.communicate(timeout=TIMEOUT)[0].decode(errors="replace") for p in procs]
    return procs, logs, out


def _run(case, world, **env):
    """Runs `case` on `world` processes; every rank must exit cleanly. Their
    results, in rank order."""
    with tempfile.TemporaryDirectory() as tmp:
        procs, logs, out = _spawn(case, world, tmp, **env)
        for p, log in zip(procs, logs):
            assert p.returncode == 0, log
        return _results(out, world)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _without_noise(value, skip, noise, name):
    """A copy of `value` with the entries `skip` (a slice, or None) zeroed,
    after checking they stay below `noise`: rounding noise left out of a
    comparison (distributed_cases.key_biases)."""
    value = value.copy()
    if skip is not None:
        assert np.abs(value[skip]).max() < noise, name
        value[skip] = 0
    return value


def _masked_params(case, result):
    """The result's parameters, the entries cases.excluded leaves out zeroed."""
    # Rounding noise moves them from zero by a fraction of one AdamW step
    # of lr in f32; 16-bit noise is large enough for AdamW's normalised
    # update to move them by up to lr a step.
    noise = cases.ADAMW_LR * (1 if cases.precision(case) == "fp32" else cases.STEPS)
    return {name: _without_noise(value, cases.excluded(case, name[len("param/"):], value),
                                 noise, name)
            for name, value in result.items() if name.startswith("param/")}


def _distance(params, reference):
    """Relative distance of two runs' parameters, all of them together."""
    num = sum(float(np.sum((params[k] - reference[k]).astype(np.float64) ** 2)) for k in reference)
    return np.sqrt(num / sum(float(np.sum(reference[k].astype(np.float64) ** 2))
                             for k in reference))


def _check_against_one_process(case, got):
    case = case.split(":")[-1]  # "<mode>:<case>": the reference has no mode
    case = {"artifact": "mlp"}.get(case, case)
    ref = cases.run_single(case)
    world = len(got)
    for r, res in enumerate(got):
        assert "error" not in res, f"{case}: rank {r}: {res['error']}"
    # The loss each rank returns is its own part's; their mean is the whole
    # batch's (equal parts), at every step.
    mean = sum(res["losses"] for res in got) / world
    want = _masked_params(case, ref)
    precision = cases.precision(case)
    if precision != "fp32":
        # 16 bits: each rank's gradients are rounded to 16 bits before the
        # all-reduce (in PyTorch DDP under autocast too), one process's
        # once, so the runs agree to 16-bit rounding, not to f32's. Bound:
        # how far the policy itself moves one process from f32.
        f32 = cases.run_single("+".join(o for o in case.split("+") if o != precision))
        loss_bound = np.max(np.abs(ref["losses"] - f32["losses"]) / np.abs(f32["losses"]))
        param_bound = _distance(want, _masked_params(case, f32))
        loss_err = np.max(np.abs(mean - ref["losses"]) / np.abs(ref["losses"]))
        assert loss_err <= loss_bound, (
            f"{case}: the mean of the ranks' losses differs from one process's by {loss_err:.2e} "
            f"(relative), more than {precision} moves one process from f32 ({loss_bound:.2e})")
        for r, res in enumerate(got):
            err = _distance(_masked_params(case, res), want)
            assert err <= param_bound, (
                f"{case}: rank {r} of {world}: parameters differ from one process by {err:.2e} "
                f"(relative, after {cases.STEPS} steps), more than {precision} moves one process "
                f"from f32 ({param_bound:.2e})")
        return
    np.testing.assert_allclose(mean, ref["losses"], rtol=1e-5,
                               err_msg=f"{case}: mean of the ranks' losses vs one process")
    for r, res in enumerate(got):
        have = _masked_params(case, res)
        for name, expect in want.items():
            err = np.linalg.norm(have[name] - expect) / np.linalg.norm(expect)
            assert err <= 1e-5, (f"{case}: rank {r} of {world}: {name} differs from one process "
                                 f"by {err:.2e} (relative, f32, after {cases.STEPS} steps)")


@pytest.mark.parametrize("case,world", [
    ("mlp", 2), ("mlp", 4), ("gpt2", 2), ("from_torch", 2),
    ("zero1:mlp", 2), ("zero1:mlp", 4), ("zero2:mlp", 4), ("zero2:gpt2", 2), ("zero3:mlp", 2), ("zero3:mlp", 4),
    ("zero3:gpt2", 2), ("artifact", 2),
    # Options in every mode, against one process with the same options:
    # global-norm clipping, SGD (scale-sensitive), gradient accumulation,
    # 16-bit autocast (fp16 with dynamic loss scaling), parameter groups.
    ("mlp+clip", 2), ("zero2:mlp+clip", 2), ("zero3:mlp+clip", 4), ("mlp+sgd", 2),
    ("zero1:mlp+sgd", 2), ("zero3:mlp+sgd", 4), ("mlp+accumulate+sgd", 2),
    ("zero3:mlp+accumulate", 2), ("mlp+fp16+sgd", 2), ("zero2:mlp+fp16", 2),
    ("mlp+bf16", 2), ("zero3:gpt2+bf16", 2), ("mlp+groups", 2), ("zero2:mlp+groups+sgd", 2),
    ("zero3:gpt2+groups", 2)])
def test_ddp_trains_like_one_process_on_the_whole_batch(case, world):
    got = _run(case, world)
    _check_against_one_process(case, got)
    # Every rank ran the bucketed all-reduces (starts and waits).
    assert all(int(g["collectives"]) >= 2 for g in got)


def _torchrun_two_nodes(tmp, master_addr, prefix=lambda node: [], **env):
    out, port = os.path.join(tmp, "out"), _free_port()
    procs = [subprocess.Popen(
        prefix(node) + [sys.executable, "-m", "torch.distributed.run", "--nnodes=2",
                        "--nproc_per_node=1", f"--node_rank={node}", f"--master_addr={master_addr}",
                        f"--master_port={port}", os.path.join(HERE, "distributed_worker.py"),
                        "mlp", out],
        env={**_env(), **env}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        for node in range(2)]
    logs = [p.communicate(timeout=TIMEOUT)[0].decode(errors="replace") for p in procs]
    for p, log in zip(procs, logs):
        assert p.returncode == 0, log
    return _results(out, 2)


def test_ddp_under_torchrun_with_two_nodes():
    """torchrun's rendezvous across two "nodes" on this machine."""
    with tempfile.TemporaryDirectory() as tmp:
        got = _torchrun_two_nodes(tmp, "127.0.0.1")
    _check_against_one_process("mlp", got)


def test_ddp_under_torchrun_with_two_hosts_on_a_network():
    """The same across two hosts with addresses of their own, joined by a
    1 Gbit/s link (network namespaces: tests/python/emulated_link.py), the
    rendezvous and every collective crossing the link."""
    why = EmulatedLink.unavailable()
    if why:
        pytest.skip(f"no emulated network on this machine: it {why}")
    with tempfile.TemporaryDirectory() as tmp, EmulatedLink(2, "1gbit") as link:
        before = link.sent_bytes(1)
        got = _torchrun_two_nodes(tmp, link.address(0), link.prefix, **link.env)
        sent = link.sent_bytes(1) - before
    _check_against_one_process("mlp", got)
    # Node 1's gradients crossed its link: a ring all-reduce over 2 ranks
    # sends each rank's whole gradient once a step.
    grad_bytes = sum(v.nbytes for k, v in got[1].items() if k.startswith("param/"))
    assert sent >= grad_bytes * cases.STEPS, (sent, grad_bytes)


def test_ranks_that_compiled_different_steps_fail_clearly():
    with tempfile.TemporaryDirectory() as tmp:
        _, _, out = _spawn("mismatch", 2, tmp)
        got = _results(out, 2)
    for r, res in enumerate(got):
        assert "error" in res, f"rank {r} ran a step the other rank compiled differently"
        assert "compiled a different training step" in str(res["error"]), res["error"]


def test_a_dead_rank_makes_the_others_fail():
    with tempfile.TemporaryDirectory() as tmp:
        _, _, out = _spawn("dies", 2, tmp)
        res = dict(np.load(f"{out}.rank0.npz"))
    assert "error" in res, "rank 0 finished a step whose all-reduce had no partner"


def _check_against_eager_ddp(got, what, excluded=lambda name, value: None):
    """Losses step by step and parameters at the end against eager DDP's in
    the same processes; `excluded(name, value)`: entries of a parameter left
    out of the comparison (a slice, or None), which must stay at
    rounding-noise level."""
    for r, res in enumerate(got):
        assert "error" not in res, res["error"]
        np.testing.assert_allclose(res["losses"][:, 1], res["losses"][:, 0], rtol=1e-5,
                                   err_msg=f"rank {r}: {what} losses vs eager DDP")
        for name in res:
            if name.startswith("eager/"):
                want, have = res[name], res["compiled/" + name[len("eager/"):]]
                skip = excluded(name[len("eager/"):], want)
                want, have = (_without_noise(v, skip, 3e-3, name) for v in (want, have))
                err = np.linalg.norm(have - want) / max(np.linalg.norm(want), 1e-30)
                assert err <= 1e-5, f"rank {r}: {what}: {name[6:]} differs from eager DDP by {err:.2e}"


@pytest.mark.parametrize("path", ["from_torch", "compile"])
def test_batch_norm_statistics_follow_ddps_buffer_broadcast(path):
    got = _run(f"batch_norm:{path}", 2)
    what = ("torch.compile(DDP(model), backend=\"tilefuse\")" if path == "compile" else
            "from_torch(parallel=\"ddp\")")
    _check_against_eager_ddp(got, f"{what} with batch norm")
    if path == "compile":
        for r, res in enumerate(got):
            assert (int(res["compiled"]) >= 2 and int(res["partitioned"]) == 0 and
                    int(res["eager_graphs"]) == 0), f"rank {r}: the backend did not compile it whole"
    # The ranks' statistics differ (each updates with its own batch) but
    # started every step from rank 0's.
    assert not np.array_equal(got[0]["compiled/bn.running_mean"], got[1]["compiled/bn.running_mean"])


def test_torch_compile_of_a_ddp_module_compiles_through_tilefuse():
    """torch.compile(DDP(model), backend="tilefuse"): Dynamo hands the
    backend the module's forward (DDP's graph splitting at bucket
    boundaries), tilefuse compiles it whole, and training matches eager DDP."""
    got = _run("compiled_ddp", 2)
    _check_against_eager_ddp(got, "torch.compile(DDP(model), backend=\"tilefuse\")")
    for r, res in enumerate(got):
        assert int(res["graphs"]) >= 1 and int(res["compiled"]) >= 2, (
            f"rank {r}: the backend compiled {int(res['graphs'])} graphs")
        said = str(res["sequential"])
        assert said.startswith("0 ATen graphs") and "wraps torch.nn.Sequential" in said, said


@pytest.mark.parametrize("model,path,optimizer", [
    ("gpt2", "ddp", "adamw"), ("llama", "ddp", "sgd"), ("gpt2", "zero3", "sgd"),
    ("llama", "zero2", "adamw"), ("gpt2", "compile", "sgd"), ("llama", "compile", "adamw")])
def test_huggingface_models_train_data_parallel_like_eager_ddp(model, path, optimizer):
    """HuggingFace GPT-2 (tied embeddings) and Llama (grouped-query
    attention, rotary positions), two ranks, each on its own batches:
    through from_torch(parallel=...) and torch.compile(DDP(model),
    backend="tilefuse"), 10 AdamW or SGD-momentum steps give eager DDP's
    losses and parameters, every graph the backend is handed compiled whole."""
    pytest.importorskip("transformers", reason="transformers is installed by tools/dev.sh; "
                        "run the README's test command")
    got = _run(f"hf:{model}:{path}:{optimizer}", 2)
    what = (f"torch.compile(DDP({model}), backend=\"tilefuse\")" if path == "compile" else
            f"from_torch({model}, parallel=\"{path}\")")
    _check_against_eager_ddp(got, what, cases.key_biases)
    for r, res in enumerate(got):
        if path == "compile":
            assert int(res["compiled"]) >= 2, f"rank {r}: the backend compiled {int(res['compiled'])} graphs"
            assert int(res["partitioned"]) == 0 and int(res["eager_graphs"]) == 0, (
                f"rank {r}: {what}: {int(res['partitioned'])} graphs partitioned, "
                f"{int(res['eager_graphs'])} left to PyTorch")
        else:
            assert int(res["graphs"]) == 0, f"rank {r}: from_torch went through the backend"


def test_a_sharded_checkpoint_resumes_bit_for_bit_and_loads_at_another_world_size():
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = os.path.join(tmp, "ckpt")
        procs, logs, out = _spawn("checkpoint", 2, tmp, TILEFUSE_TEST_CHECKPOINT=ckpt)
        for p, log in zip(procs, logs):
            assert p.returncode == 0, log
        got = _results(out, 2)
        assert sorted(os.listdir(ckpt)) == ["index.json", "rank0.npz", "rank1.npz"]
        for r, res in enumerate(got):
            assert "error" not in res, res["error"]
            # The same losses and parameters, bit for bit, from the checkpoint.
            np.testing.assert_array_equal(res["resumed"], res["after"], err_msg=f"rank {r}")
            assert bool(res["whole_matches"]), "state_dict() is not params() whole"
            assert res["more"][0] == res["more"][1], "loading state_dict() changed the step"
            for name in res:
                if name.startswith("first/"):
                    np.testing.assert_array_equal(res["second/" + name[6:]], res[name], name)
        # One process loads the two ranks' shards (joined, then split for a
        # world of one) and holds the parameters rank 0 saved after 4 steps.
        loaded = _load_at_world_size_one(ckpt)
        saved = dict(np.load(os.path.join(ckpt, "rank0.npz")))
        import json
        index = json.load(open(os.path.join(ckpt, "index.json")))
        assert index["world"] == 2 and index["mode"] == "zero2"
        whole = {}
        for b, members in enumerate(index["shards"]):
            flat = np.concatenate([dict(np.load(os.path.join(ckpt, f"rank{r}.npz")))
                                   [f"params/shard{b}"] for r in range(2)])
            offset = 0
            for i in members:
                n = int(np.prod(index["shapes"][i]))
                whole[index["names"][i]] = flat[offset:offset + n].reshape(index["shapes"][i])
                offset += n
        for name, value in loaded.items():
            np.testing.assert_array_equal(value, whole[name], err_msg=name)
        assert int(saved["step"]) == 4


def _load_at_world_size_one(ckpt):
    """A zero2 step of one rank loading the two-rank checkpoint."""
    loss_fn, params, batches, extra = cases.CASES["gpt2"]()
    with tempfile.TemporaryDirectory() as tmp:
        dist.init_process_group("gloo", init_method=f"file://{tmp}/store", rank=0, world_size=1)
        try:
            from tilefuse import distributed
            step = tilefuse.compile_train_step(loss_fn, params, batches[0], cases._optimizer(),
                                               device="cpu", parallel="zero2", **extra)
            distributed.load_sharded(step, ckpt)
            assert step.step_count == 4
            return step.params()
        finally:
            dist.destroy_process_group()


def test_a_zero3_artifact_resumes_from_each_ranks_checkpoint_bit_for_bit():
    got = _run("zero_artifact", 2)
    for r, res in enumerate(got):
        assert "error" not in res, f"rank {r}: {res['error']}"
        assert int(res["resumed_step"]) == 3, int(res["resumed_step"])
        np.testing.assert_array_equal(res["got"], res["want"], err_msg=(
            f"rank {r}: the loaded zero3 artifact's losses vs the step that exported it"))
        assert bool(res["same_state"]), f"rank {r}: the loaded step's shards differ at the end"
        said = str(res["refused"])
        assert "ZeRO step" in said and "kept_state()" in said and "save_sharded" in said, said


def test_zero3_plans_at_most_065_of_ddps_peak_per_rank():
    """A model whose parameters and optimizer state dominate (four 512 x 512
    weights, batch 4): per rank, the arena's planned peak plus the kept
    parameters and state."""
    import tilefuse.functional as F
    rng = np.random.default_rng(0)
    d = 512
    params = {f"w{i}": (rng.standard_normal((d, d)) * 0.02).astype(np.float32) for i in range(4)}
    batch = {"x": rng.standard_normal((4, d)).astype(np.float32), "y": rng.integers(0, d, 4)}

    def loss_fn(p, b):
        h = b["x"]
        for i in range(3):
            h = F.gelu(h @ p[f"w{i}"])
        return F.cross_entropy(h @ p["w3"], b["y"])

    def peak(mode, world):
        g = tilefuse.train_step_graph(loss_fn, params, batch, optim.AdamW(lr=1e-3),
                                      parallel=mode, world_size=world, bucket_bytes=1 << 20)
        plan = g.compile("cpu").memory_plan()
        return plan.peak + plan.argument_bytes, plan
    ddp, _ = peak("ddp", 2)
    zero3, plan = peak("zero3", 2)
    assert zero3 <= 0.65 * ddp, f"zero3 plans {zero3} bytes per rank, ddp {ddp}"
    # The memory plan shows the gathered parameters, gathered again in the
    # backward pass: 4 in the forward, 3 in the backward (the first layer's
    # input needs no gradient), each live for a few steps only.
    gathered = [b for b in plan.buffers if b.op == "graph.all_gather_start"]
    assert [b.phase for b in gathered].count("forward") == 4, [b.phase for b in gathered]
    assert [b.phase for b in gathered].count("backward") == 3
    assert max(b.last - b.first for b in gathered) < plan.steps // 4


# --- one process --------------------------------------------------------------

def _mlp_step(**kwargs):
    loss_fn, params, batches, extra = cases.CASES["mlp"]()
    return tilefuse.compile_train_step(loss_fn, params, batches[0], cases._optimizer(),
                                       device="cpu", **kwargs), batches


@pytest.fixture
def single_process_group():
    with tempfile.TemporaryDirectory() as tmp:
        dist.init_process_group("gloo", init_method=f"file://{tmp}/store", rank=0, world_size=1)
        try:
            yield
        finally:
            dist.destroy_process_group()


def test_ddp_on_one_rank_is_the_plain_step_bit_for_bit(single_process_group):
    ddp, batches = _mlp_step(parallel="ddp", bucket_bytes=4096)
    plain, _ = _mlp_step()
    for b in batches:
        assert ddp(b) == plain(b)
    for k, v in plain.params().items():
        np.testing.assert_array_equal(ddp.params()[k], v, err_msg=k)
    rows = ddp.compiled._exe.kernels()
    starts = [r for r in rows if r["name"] == "all_reduce_start"]
    waits = [r for r in rows if r["name"] == "all_reduce_wait"]
    # 5 gradients of 960, 40, 1600, 40 and 280 f32 in buckets of 4 KiB.
    assert len(starts) == len(waits) >= 2
    assert all(r["group"] == ("dp", 1) for r in starts)
    assert "all_reduce_start" in str(ddp.report())


def test_the_graph_shows_buckets_started_early_and_waited_late():
    loss_fn, params, batches, _ = cases.CASES["mlp"]()
    g = tilefuse.train_step_graph(loss_fn, params, batches[0], cases._optimizer(),
                                  parallel="ddp", world_size=4, bucket_bytes=4096)
    lines = g.mlir().splitlines()
    starts = [i for i, line in enumerate(lines) if "graph.all_reduce_start" in line]
    waits = [i for i, line in enumerate(lines) if "graph.collective_wait" in line]
    assert starts and len(starts) == len(waits)
    assert all('group = "dp", group_size = 4' in lines[i] for i in starts)
    # Every start comes before the first wait: the backward pass goes on
    # while the buckets are in flight.
    assert max(starts) < min(waits)
    # The interpreter runs one process: a group of 4 is refused, by name.
    with pytest.raises(tilefuse.CompileError, match="process group 'dp' of 4 ranks"):
        g.interpret(*[np.zeros(shape, {"f32": np.float32, "f64": np.float64}.get(dtype, np.int64))
                      for dtype, shape in g.inputs])


def test_parallel_needs_an_initialised_process_group():
    if dist.is_initialized():
        pytest.skip("a process group is initialised in this process")
    with pytest.raises(tilefuse.CompileError, match="init_process_group"):
        _mlp_step(parallel="ddp")


@pytest.mark.parametrize("kwargs,match", [
    (dict(parallel="fsdp"), "parallel must be"),
    (dict(bucket_bytes=1024), "need parallel"),
    (dict(parallel="ddp", bucket_bytes=0), "bucket_bytes must be"),
])
def test_parallel_arguments_are_checked(single_process_group, kwargs, match):
    loss_fn, params, batches, _ = cases.CASES["mlp"]()
    device = kwargs.pop("device", "cpu")
    with pytest.raises(tilefuse.CompileError, match=match):
        tilefuse.compile_train_step(loss_fn, params, batches[0], optim.AdamW(lr=1e-3),
                                    device=device, **kwargs)


def test_a_step_compiled_for_another_world_size_is_refused(single_process_group):
    loss_fn, params, batches, _ = cases.CASES["mlp"]()
    g = tilefuse.train_step_graph(loss_fn, params, batches[0], cases._optimizer(),
                                  parallel="ddp", world_size=2)
    compiled = g.compile("cpu")
    from tilefuse import distributed
    with pytest.raises(tilefuse.CompileError, match="compiled for 2"):
        distributed.bind(compiled._exe)
