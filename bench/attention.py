#!/usr/bin/env python3
"""Fused attention forward + backward against PyTorch's CPU flash attention, same run.

    PYTHONPATH=build/python python3 bench/attention.py [--seq 1024 2048 4096 8192]
        [--heads 12] [--dim 64] [--repeats 3] [--threads 2] [--precision f32|bf16]

Per sequence length, causal and not: tilefuse's compiled value-and-gradient
of sum(F.scaled_dot_product_attention(q, k, v) * dO) with respect to q, k
and v (graph.attention + graph.attention_grad: the whole Python call,
results returned as numpy arrays) against torch's
F.scaled_dot_product_attention forward and backward(dO) with the same
tensors (torch picks its CPU flash kernel), medians of --repeats calls
after one warm-up each, both on --threads threads. --precision bf16: q, k,
v and dO in bf16 on both sides (tilefuse's call takes f32 arrays and casts
them to bf16 first, its gradients come back as f32). Also the planned peak of
tilefuse's step (graph.memory_plan) against the bytes of q, k, v and dO
(the issue's bound: at most 4x).
"""
import argparse
import statistics
import time

import numpy as np
import torch

import tilefuse
import tilefuse.functional as F


def median_seconds(fn, repeats):
    fn()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seq", type=int, nargs="+", default=[1024, 2048, 4096, 8192])
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--precision", choices=["f32", "bf16"], default="f32")
    args = ap.parse_args()
    bf16 = args.precision == "bf16"
    torch.set_num_threads(args.threads)
    print(f"B=1, H={args.heads}, D={args.dim}, {args.precision}, {args.threads} threads, "
          f"torch {torch.__version__}")
    print("| T | causal | tilefuse ms | torch ms | torch / tilefuse | planned peak MiB | "
          "q+k+v+dO MiB | peak / (q+k+v+dO) |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|")
    rng = np.random.default_rng(0)
    for t in args.seq:
        shape = (1, args.heads, t, args.dim)
        q, k, v, dout = (rng.standard_normal(shape).astype(np.float32) for _ in range(4))
        for causal in (False, True):
            def loss(q, k, v, dout):
                if bf16:
                    q, k, v, dout = (x.to("bf16") for x in (q, k, v, dout))
                out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                return (out * dout).to("f32").sum()

            graph = tilefuse.trace(loss, q, k, v, dout).value_and_grad(wrt=(0, 1, 2))
            peak = graph.memory_plan("cpu").peak
            step = graph.compile("cpu")
            ours = median_seconds(lambda: step(q, k, v, dout), args.repeats)
            dtype = torch.bfloat16 if bf16 else torch.float32
            tq, tk, tv = (torch.from_numpy(x).to(dtype).requires_grad_() for x in (q, k, v))
            tdo = torch.from_numpy(dout).to(dtype)

            def theirs():
                for x in (tq, tk, tv):
                    x.grad = None
                torch.nn.functional.scaled_dot_product_attention(
                    tq, tk, tv, is_causal=causal).backward(tdo)

            torch_s = median_seconds(theirs, args.repeats)
            inputs = 4 * q.nbytes // (2 if bf16 else 1)
            mib = 1 << 20
            print(f"| {t} | {'yes' if causal else 'no'} | {ours * 1e3:.1f} | "
                  f"{torch_s * 1e3:.1f} | {torch_s / ours:.2f} | {peak / mib:.1f} | "
                  f"{inputs / mib:.1f} | {peak / inputs:.2f} |", flush=True)


if __name__ == "__main__":
    main()
