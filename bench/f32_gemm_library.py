#!/usr/bin/env python3
"""f32 GEMM time per shape and transpose: oneDNN's row slabs against the BLAS's, CPU.

    PYTHONPATH=build/python python3 bench/f32_gemm_library.py [--calls 20] [--rounds 5] [--lm-head]

Each shape (gpt2_mini's and GPT-2 small's projection, MLP and weight-gradient
GEMMs; with --lm-head also GPT-2 small's tied LM head) is compiled as one
matmul and run in one process with TILEFUSE_DNNL_F32=0 (the BLAS), =all
(oneDNN whatever the shape) and unset (the library tilefuse picks per
shape, cpu::f32GemmPrefersDnnl, which reads the variable at every GEMM
step), taking turns --rounds times: the machine's speed drifts by more than
the libraries differ, so only times taken side by side compare. The table
gives the GEMM step's median time over the rounds, each round's time the
mean of --calls calls from report(profile=True), so Python's call cost is
not in it.
"""
import argparse
import os
import statistics

import numpy as np

import tilefuse

SHAPES = [(512, 128, 384), (512, 128, 128), (512, 128, 512), (512, 512, 128), (128, 512, 384),
          (128, 512, 512), (512, 128, 1024), (1024, 768, 768), (1024, 3072, 768),
          (768, 1024, 768), (3072, 1024, 768), (1024, 768, 2304), (1024, 768, 3072),
          (768, 1024, 3072), (768, 1024, 2304)]
LM_HEAD = [(1024, 768, 50257), (1024, 50257, 768), (50257, 1024, 768)]
CHOICES = {"BLAS": "0", "oneDNN": "all", "picked": None}


def gemm_ms(fn, a, b, choice, calls):
    if CHOICES[choice] is None:
        os.environ.pop("TILEFUSE_DNNL_F32", None)
    else:
        os.environ["TILEFUSE_DNNL_F32"] = CHOICES[choice]
    fn(a, b)  # the choice's first call makes its per-shape state
    fn.profile()
    for _ in range(calls):
        fn(a, b)
    row = next(r for r in fn.report(profile=True) if r["name"] == "gemm")
    return row["seconds"] * 1e3


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--lm-head", action="store_true",
                    help="also the LM head's GEMMs (80 GFLOP each: a few calls)")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    print("| m x k x n | op | BLAS ms | oneDNN ms | oneDNN / BLAS | picked ms | picked / BLAS |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for m, k, n in SHAPES + (LM_HEAD if args.lm_head else []):
        calls = 2 if m * n * k > 1e10 else args.calls
        for kind in ("nn", "nt", "tn"):
            a = rng.standard_normal((k, m) if kind == "tn" else (m, k), dtype=np.float32)
            b = rng.standard_normal((n, k) if kind == "nt" else (k, n), dtype=np.float32)
            f = {"nn": lambda x, y: x @ y, "nt": lambda x, y: x @ y.T,
                 "tn": lambda x, y: x.T @ y}[kind]
            fn = tilefuse.compile(f, a, b, device="cpu")
            times = {choice: [] for choice in CHOICES}
            for _ in range(args.rounds):
                for choice, seen in times.items():
                    seen.append(gemm_ms(fn, a, b, choice, calls))
            blas, dnnl, picked = (statistics.median(times[c]) for c in CHOICES)
            print(f"| {m}x{k}x{n} | {kind} | {blas:.3f} | {dnnl:.3f} | {dnnl / blas:.2f} | "
                  f"{picked:.3f} | {picked / blas:.2f} |", flush=True)


if __name__ == "__main__":
    main()
