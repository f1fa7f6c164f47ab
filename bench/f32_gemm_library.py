#!/usr/bin/env python3
"""f32 GEMM time per shape and transpose: oneDNN's row slabs against the BLAS's, CPU.

    PYTHONPATH=build/python python3 bench/f32_gemm_library.py [--calls 40]

Each shape (gpt2_mini's and GPT-2 small's projection, MLP and weight-gradient
GEMMs) is compiled as one matmul and run --calls times with profiling on, in
three processes side by side: TILEFUSE_DNNL_F32=0 (the BLAS), =1 (the
library tilefuse picks per shape, cpu::f32GemmPrefersDnnl) and =all (oneDNN
whatever the shape). The table gives the GEMM step's mean time from
report(profile=True), so Python's call cost is not in it.
"""
import argparse
import os
import subprocess
import sys

SHAPES = [(512, 128, 384), (512, 128, 128), (512, 128, 512), (512, 512, 128), (128, 512, 384),
          (128, 512, 512), (512, 128, 1024), (1024, 768, 768), (1024, 3072, 768),
          (768, 1024, 768), (3072, 1024, 768), (1024, 768, 2304), (1024, 768, 3072),
          (768, 1024, 3072)]

ONE = r'''
import sys, numpy as np, tilefuse
m, k, n, kind, calls = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
rng = np.random.default_rng(0)
A = rng.standard_normal((k, m) if kind == "tn" else (m, k), dtype=np.float32)
B = rng.standard_normal((n, k) if kind == "nt" else (k, n), dtype=np.float32)
f = {"nn": lambda a, b: a @ b, "nt": lambda a, b: a @ b.T, "tn": lambda a, b: a.T @ b}[kind]
fn = tilefuse.compile(f, A, B, device="cpu")
fn(A, B)
fn.profile()
for _ in range(calls):
    fn(A, B)
row = next(r for r in fn.report(profile=True) if r["name"] == "gemm")
print(row["seconds"] * 1e3)
'''


def time_ms(env_value, m, k, n, kind, calls):
    env = dict(os.environ, TILEFUSE_DNNL_F32=env_value)
    out = subprocess.run([sys.executable, "-c", ONE, str(m), str(k), str(n), kind, str(calls)],
                         env=env, check=True, capture_output=True, text=True).stdout
    return float(out.split()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=40)
    args = ap.parse_args()
    print(f"| m x k x n | op | BLAS ms | oneDNN ms | oneDNN / BLAS | picked ms | picked GFLOP/s |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for m, k, n in SHAPES:
        for kind in ("nn", "nt", "tn"):
            blas = time_ms("0", m, k, n, kind, args.calls)
            dnnl = time_ms("all", m, k, n, kind, args.calls)
            picked = time_ms("1", m, k, n, kind, args.calls)
            gflops = 2 * m * n * k / picked / 1e6
            print(f"| {m}x{k}x{n} | {kind} | {blas:.3f} | {dnnl:.3f} | {dnnl / blas:.2f} | "
                  f"{picked:.3f} | {gflops:.0f} |", flush=True)


if __name__ == "__main__":
    main()
