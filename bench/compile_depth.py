#!/usr/bin/env python3
"""Cold compile time against depth: a GPT-2-small-shaped training step with
1 and 12 layers.

    PYTHONPATH=build/python python3 bench/compile_depth.py [--dropout 0.1]

Per layer count (d 768, 12 heads, seq 1024, vocab 50257, batch 8 for CUDA /
1 for the CPU, AdamW): the training-step graph (traced once), then
- cpu: Graph.compile("cpu") with an empty disk cache: lowering, fusion,
  tile kernels, machine code by the JIT (the compile stages shown), without
  the parameters' state;
- cuda:sm_90: Graph.compile_artifact with an empty NVRTC cache (a fresh
  TILEFUSE_CACHE_DIR), so every unit goes through NVRTC, then again with
  the artifact in the disk cache (read back whole, the same bytes);
and the ratio 12 layers / 1 layer; the CPU compile once more from the disk
cache (in-process cache cleared: what a new process pays). Dropout sites'
Philox streams are kernel inputs, so with dropout > 0 the kernels of
different layers are still the same program.
"""
import argparse
import os
import tempfile
import time

import tilefuse
from tilefuse import workloads as W


def step_graph(layers, batch, dropout):
    cfg = W.gpt2_mini_config(n_layer=layers, d_model=768, n_head=12, seq=1024, batch=batch,
                             vocab=50257, dropout=dropout)
    params, data = W.gpt2_mini_init(cfg, seed=0), W.gpt2_mini_batch(cfg, seed=1)
    return tilefuse.train_step_graph(lambda p, b, s: W.gpt2_mini_loss(p, b, s, cfg, True),
                                     params, data,
                                     tilefuse.optim.AdamW(lr=1e-3, weight_decay=0.01))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dropout", type=float, default=0.0)
    ap.add_argument("--layers", default="1,12")
    args = ap.parse_args()
    counts = [int(n) for n in args.layers.split(",")]
    seconds = {}
    for layers in counts:
        g = step_graph(layers, 1, args.dropout)
        tilefuse.clear_cache()
        # Cold: an empty disk cache; then warm from disk (the in-process
        # cache cleared, as in a new process).
        os.environ["TILEFUSE_CACHE_DIR"] = tempfile.mkdtemp(prefix="tilefuse-cold-")
        t = time.perf_counter()
        exe = g._graph.compile("cpu")
        cpu = time.perf_counter() - t
        stages = ", ".join(f"{k} {v:.2f}" for k, v in exe.compile_stages)
        tilefuse.clear_cache()
        t = time.perf_counter()
        warm_exe = g._graph.compile("cpu")
        warm = time.perf_counter() - t
        assert [k for k, _ in warm_exe.compile_stages] == ["disk cache"], warm_exe.compile_stages
        g = step_graph(layers, 8, args.dropout)
        os.environ["TILEFUSE_CACHE_DIR"] = tempfile.mkdtemp(prefix="tilefuse-cold-")
        t = time.perf_counter()
        data = g._graph.compile_artifact("cuda:sm_90", "{}")
        cuda = time.perf_counter() - t
        t = time.perf_counter()
        warm_data = g._graph.compile_artifact("cuda:sm_90", "{}")  # the artifact from disk
        assert warm_data == data
        cuda_warm = time.perf_counter() - t
        shared = data.count(b"tilefuse-alias:")
        seconds[layers] = (cpu, cuda)
        print(f"{layers:2d} layers (dropout {args.dropout}): cpu {cpu:.2f} s ({stages}), "
              f"warm from disk {warm:.2f} s; "
              f"cuda:sm_90 artifact {cuda:.2f} s ({shared} kernels sharing code), "
              f"warm from disk {cuda_warm:.2f} s", flush=True)
    if len(counts) == 2:
        (c1, g1), (c2, g2) = seconds[counts[0]], seconds[counts[1]]
        print(f"{counts[1]} / {counts[0]} layers: cpu {c2 / c1:.2f}x, cuda {g2 / g1:.2f}x")


if __name__ == "__main__":
    main()
