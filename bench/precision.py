#!/usr/bin/env python3
"""Mixed precision on the CPU: bf16 against f32, same run.

    PYTHONPATH=build/python python3 bench/precision.py [--steps 20] [--rounds 3]
    PYTHONPATH=build/python python3 bench/precision.py --trajectory 100 [--seeds 0,1,2,3]
    PYTHONPATH=build/python python3 bench/precision.py --trajectory 100 --noise-floor
    PYTHONPATH=build/python python3 bench/precision.py --numerics-report

For gpt2_mini (AdamW) and a GPT-2-small-shaped layer (1 block, d=768, 12
heads, seq 1024, batch 1, vocab 1024, no dropout): median step time and
the planned arena of `compile_train_step(..., precision="bf16")` against
the f32 step, from the same parameters and batch, alternating the two in
one process; and a 2048^3 matmul compiled with precision="bf16" (operands
cast in, the product cast out) against f32, as GFLOP/s of the whole call.
bf16 GEMMs run through oneDNN's matmul (AVX512-BF16 where the CPU has it;
TILEFUSE_DNNL=none widens them to f32 for the BLAS sgemm, as f16 GEMMs
always are).

`--numerics-report`: gpt2_mini's bf16 step (SGD, then AdamW) after one
step: kernel outputs, those over their bound, the largest error/bound.

`--trajectory N` (`--seeds`: the parameter seeds, batches from 10*seed+1..5):
gpt2_mini (AdamW lr 1e-3, wd 0.01) and mlp_mnist (batch
64, Adam lr 2e-4), both with dropout 0 (so every run computes the same
function), trained N steps from the same parameters over the same 5
batches in turn, four ways: tilefuse `compile_train_step` in f32 and with
precision="bf16", and PyTorch (tests/python/torch_reference.py:
torch.optim.Adam/AdamW, same hyperparameters) in f32 and with the forward
pass and loss under torch.autocast("cpu", torch.bfloat16). For each
workload: the losses of each run, then the largest (with its step) and the
mean relative difference |a - b| / |b| of the loss trajectories of
tilefuse bf16 vs PyTorch bf16, tilefuse bf16 vs tilefuse f32, PyTorch bf16
vs PyTorch f32 and tilefuse f32 vs PyTorch f32. The two bf16 policies
differ: matmul/linear (and the tied LM head) are bf16 and the losses f32
in both, but tilefuse runs softmax, log_softmax and layer_norm in f32 while
PyTorch's CPU autocast keeps them in their input's dtype, so gpt2_mini's
attention softmax and mlp_mnist's log_softmax (both fed by a bf16 matmul)
are bf16 there. Needs torch.

`--noise-floor` (with `--trajectory`): how far apart two bf16 runs land
when nothing but an equally valid rounding differs, to read the
differences above against. Three more runs per workload and seed: PyTorch
bf16 and tilefuse bf16 from the same parameters moved by an f32 ulp or
two (each f32 parameter element times 1 +- 2^-23, signs drawn from the seed),
and PyTorch bf16 with one intra-op thread instead of the process's
(its GEMMs then block and sum in another order). Each is compared with its
unperturbed twin; f32 runs from the moved parameters show how far the
same perturbation goes without bf16 roundoff.
"""
import argparse
import os
import statistics
import sys
import time

import numpy as np

import tilefuse
from tilefuse import workloads as W


def configs():
    return {
        "gpt2_mini": W.gpt2_mini_config(),
        "gpt2_small_layer": W.gpt2_mini_config(n_layer=1, d_model=768, n_head=12, seq=1024,
                                               batch=1, vocab=1024, dropout=0.0),
    }


def median_time(fn, steps):
    fn()
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def _rel(a, b):
    """(max, argmax, mean) of |a - b| / |b|, elementwise over the steps."""
    rel = np.abs(np.asarray(a) - np.asarray(b)) / np.abs(np.asarray(b))
    return rel.max(), int(rel.argmax()), rel.mean()


def _moved_one_ulp(params, seed):
    """params with every f32 element multiplied by 1 +- 2^-23 (one or two
    f32 ulps of a normal number; signs drawn from the seed); others
    unchanged."""
    rng = np.random.default_rng(1000 + seed)
    moved = {}
    for name, value in params.items():
        value = np.asarray(value)
        if value.dtype == np.float32:
            sign = rng.choice(np.array([-1.0, 1.0], np.float32), size=value.shape)
            value = value * (np.float32(1) + sign * np.float32(2.0**-23))
        moved[name] = value
    return moved


def trajectory(n, seeds=(0,), noise_floor=False):
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir,
                                    "tests", "python"))
    import torch
    import torch_reference as TR

    runs = {  # config, init, batch, tilefuse loss, torch loss, optimizer, lr, weight decay
        "gpt2_mini": (W.gpt2_mini_config(dropout=0.0), W.gpt2_mini_init, W.gpt2_mini_batch,
                      W.gpt2_mini_loss, TR.gpt2_mini_loss, "adamw", 1e-3, 0.01),
        "mlp_mnist": (W.mlp_mnist_config(batch=64, dropout=0.0), W.mlp_mnist_init,
                      W.mlp_mnist_batch, W.mlp_mnist_loss, TR.mlp_mnist_loss, "adam", 2e-4, 0.0),
    }
    optimizers = {"adam": tilefuse.optim.Adam, "adamw": tilefuse.optim.AdamW}
    for (name, (cfg, init, batch_fn, loss, torch_loss, opt, lr, wd)), seed in (
            (run, seed) for run in runs.items() for seed in seeds):
        losses = {}
        params = init(cfg, seed=seed)
        batches = [batch_fn(cfg, seed=10 * seed + s) for s in range(1, 6)]

        def tilefuse_run(precision, start):
            step = tilefuse.compile_train_step(
                lambda p, b, s: loss(p, b, s, cfg, True), start, batches[0],
                optimizer=optimizers[opt](lr=lr, weight_decay=wd), device="cpu",
                precision=precision)
            return np.array([step(batches[i % 5]) for i in range(n)])

        def pytorch_run(dtype, start):
            return np.array(TR.torch_trajectory(
                lambda p, b: torch_loss(p, b, None, cfg, True), start, batches, opt, lr, wd,
                n, autocast_dtype=dtype))

        for precision, dtype in (("fp32", None), ("bf16", torch.bfloat16)):
            losses["tilefuse " + precision] = tilefuse_run(precision, params)
            losses["pytorch " + precision] = pytorch_run(dtype, params)
        pairs = [("tilefuse bf16", "pytorch bf16"), ("tilefuse bf16", "tilefuse fp32"),
                 ("pytorch bf16", "pytorch fp32"), ("tilefuse fp32", "pytorch fp32")]
        if noise_floor:
            moved = _moved_one_ulp(params, seed)
            for precision, dtype in (("fp32", None), ("bf16", torch.bfloat16)):
                losses[f"tilefuse {precision} +1ulp"] = tilefuse_run(precision, moved)
                losses[f"pytorch {precision} +1ulp"] = pytorch_run(dtype, moved)
            threads = torch.get_num_threads()
            torch.set_num_threads(1 if threads > 1 else 2)
            try:
                losses[f"pytorch bf16 {torch.get_num_threads()} thr"] = pytorch_run(
                    torch.bfloat16, params)
            finally:
                torch.set_num_threads(threads)
            pairs += [("pytorch bf16", "pytorch bf16 +1ulp"),
                      ("pytorch bf16", next(k for k in losses if k.endswith(" thr"))),
                      ("tilefuse bf16", "tilefuse bf16 +1ulp"),
                      ("pytorch fp32", "pytorch fp32 +1ulp"),
                      ("tilefuse fp32", "tilefuse fp32 +1ulp")]
        print(f"{name} (seed {seed}): {n} steps ({opt} lr {lr:g}, weight decay {wd:g}, "
              "dropout 0); loss "
              + ", ".join(f"{k.replace('fp32', 'f32')} {v[0]:.4f} -> {v[-1]:.4f}"
                          for k, v in losses.items() if "ulp" not in k and "thr" not in k))
        for a, b in pairs:
            top, at, mean = _rel(losses[a], losses[b])
            what = f"{a} vs {b}".replace("fp32", "f32")
            print(f"  {what:38s} relative difference max {top:.2e} (step {at}), "
                  f"mean {mean:.2e}", flush=True)


def numerics():
    """The numerics report of gpt2_mini's bf16 step (SGD and AdamW), after
    one step from the initial parameters."""
    cfg = W.gpt2_mini_config(dropout=0.0)
    params, batch = W.gpt2_mini_init(cfg, seed=0), W.gpt2_mini_batch(cfg, seed=1)
    for opt in (tilefuse.optim.SGD(lr=1e-2), tilefuse.optim.AdamW(lr=1e-3, weight_decay=0.01)):
        step = tilefuse.compile_train_step(
            lambda p, b, s: W.gpt2_mini_loss(p, b, s, cfg, True), params, batch,
            optimizer=opt, device="cpu", precision="bf16")
        step(batch)
        report = step.numerics_report(batch)
        worst = max(report.rows, key=lambda r: r["error"] / r["bound"])
        print(f"gpt2_mini bf16 {type(opt).__name__} step: {len(report)} kernel outputs, "
              f"{len(report.over)} over their bound; largest error/bound "
              f"{worst['error'] / worst['bound']:.2f} ({worst['kernel']}.{worst['output']})")
        for r in report.over:
            print(f"  over: {r['kernel']}.{r['output']} {r['dtype']} error {r['error']:.2e} "
                  f"bound {r['bound']:.2e} ops {','.join(r['ops'][:6])}...")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--trajectory", type=int, metavar="N")
    ap.add_argument("--seeds", default="0", help="parameter seeds of --trajectory: 0,1,2")
    ap.add_argument("--noise-floor", action="store_true",
                    help="with --trajectory: also bf16 runs moved by one f32 ulp / one thread")
    ap.add_argument("--numerics-report", action="store_true")
    args = ap.parse_args()
    if args.trajectory:
        return trajectory(args.trajectory, [int(s) for s in args.seeds.split(",")],
                          args.noise_floor)
    if args.noise_floor:
        ap.error("--noise-floor goes with --trajectory N")
    if args.numerics_report:
        return numerics()
    for name, cfg in configs().items():
        params, batch = W.gpt2_mini_init(cfg, seed=0), W.gpt2_mini_batch(cfg, seed=1)
        steps, samples = {}, {"fp32": [], "bf16": []}
        for precision in samples:
            steps[precision] = tilefuse.compile_train_step(
                lambda p, b, s: W.gpt2_mini_loss(p, b, s, cfg, True), params, batch,
                optimizer=tilefuse.optim.AdamW(lr=1e-3, weight_decay=0.01), device="cpu",
                precision=precision)
        for _ in range(args.rounds):
            for precision, step in steps.items():
                samples[precision].append(median_time(lambda: step(batch), args.steps))
        t32, t16 = (statistics.median(samples[p]) for p in ("fp32", "bf16"))
        m32, m16 = (steps[p].memory_plan().peak for p in ("fp32", "bf16"))
        print(f"{name:17s} step: f32 {t32 * 1e3:8.2f} ms, bf16 {t16 * 1e3:8.2f} ms "
              f"(bf16 / f32 {t16 / t32:.2f});  arena: f32 {m32 / 2**20:7.1f} MiB, bf16 "
              f"{m16 / 2**20:7.1f} MiB (bf16 / f32 {m16 / m32:.2f})", flush=True)
    n = 2048
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((n, n)).astype(np.float32) for _ in range(2))
    rates = {}
    for precision in ("fp32", "bf16"):
        fn = tilefuse.compile(lambda x, y: x @ y, a, b, device="cpu", precision=precision)
        seconds = statistics.median(median_time(lambda: fn(a, b), 5) for _ in range(args.rounds))
        rates[precision] = 2 * n ** 3 / seconds / 1e9
    print(f"matmul {n}^3 (whole call): f32 {rates['fp32']:.1f} GFLOP/s, bf16 "
          f"{rates['bf16']:.1f} GFLOP/s (bf16 / f32 {rates['bf16'] / rates['fp32']:.2f})")


if __name__ == "__main__":
    main()
