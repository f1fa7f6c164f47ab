#!/usr/bin/env python3
"""Mixed precision on the CPU: bf16 against f32, same run.

    PYTHONPATH=build/python python3 bench/precision.py [--steps 20] [--rounds 3]
    PYTHONPATH=build/python python3 bench/precision.py --trajectory 100

For gpt2_mini (AdamW) and a GPT-2-small-shaped layer (1 block, d=768, 12
heads, seq 1024, batch 1, vocab 1024, no dropout): median step time and
the planned arena of `compile_train_step(..., precision="bf16")` against
the f32 step, from the same parameters and batch, alternating the two in
one process; and a 2048^3 matmul compiled with precision="bf16" (operands
cast in, the product cast out) against f32, as GFLOP/s of the whole call.
The CPU's f16/bf16 GEMM widens its operands to f32 and calls the BLAS
sgemm (no AVX512-BF16 GEMM yet), so bf16 saves memory, not GEMM time.

`--trajectory N`: gpt2_mini (AdamW lr 1e-3, wd 0.01) and mlp_mnist (batch
64, Adam lr 2e-4) trained N steps in bf16 and in f32 from the same
parameters over the same 5 batches in turn: the largest and the mean
relative difference of the losses.
"""
import argparse
import statistics
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


def trajectory(n):
    runs = {
        "gpt2_mini": (W.gpt2_mini_config(), W.gpt2_mini_init, W.gpt2_mini_batch,
                      W.gpt2_mini_loss, lambda: tilefuse.optim.AdamW(lr=1e-3, weight_decay=0.01)),
        "mlp_mnist": (W.mlp_mnist_config(batch=64), W.mlp_mnist_init, W.mlp_mnist_batch,
                      W.mlp_mnist_loss, lambda: tilefuse.optim.Adam(lr=2e-4)),
    }
    for name, (cfg, init, batch_fn, loss, optimizer) in runs.items():
        losses = {}
        for precision in ("fp32", "bf16"):
            params = init(cfg, seed=0)
            batches = [batch_fn(cfg, seed=s) for s in range(1, 6)]
            step = tilefuse.compile_train_step(
                lambda p, b, s: loss(p, b, s, cfg, True), params, batches[0],
                optimizer=optimizer(), device="cpu", precision=precision)
            losses[precision] = np.array([step(batches[i % 5]) for i in range(n)])
        a, b = losses["fp32"], losses["bf16"]
        rel = np.abs(a - b) / np.abs(a)
        print(f"{name}: {n} steps, loss f32 {a[0]:.4f} -> {a[-1]:.4f}, bf16 {b[0]:.4f} -> "
              f"{b[-1]:.4f}; relative difference max {rel.max():.3%} (step {rel.argmax()}), "
              f"mean {rel.mean():.3%}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--trajectory", type=int, metavar="N")
    args = ap.parse_args()
    if args.trajectory:
        return trajectory(args.trajectory)
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
