#!/usr/bin/env python3
"""Pooling forward and backward against PyTorch's CPU kernels, same run.

    PYTHONPATH=build/python python3 bench/pooling.py [--shape 8 64 112 112]
        [--repeats 5] [--threads 2]

Per pooling (max_pool2d and avg_pool2d with kernel 3, stride 2, padding 1:
ResNet's stem; adaptive_avg_pool2d to 7x7), the whole Python call of
tilefuse's compiled value-and-gradient of sum(pool(x)^2) with respect to x
against torch's forward and backward of the same loss, and the forward
alone (pool(x) * 2), medians of --repeats interleaved calls after one
warm-up each, both on --threads threads; and which steps the compiled
program runs (kernels only, or library gathers and scatter-adds).
"""
import argparse
import statistics
import time

import numpy as np
import torch

import tilefuse
import tilefuse.functional as F

POOLS = {
    "max_pool2d 3/2/1": (lambda a: F.max_pool2d(a, 3, 2, 1),
                         lambda t: torch.nn.functional.max_pool2d(t, 3, 2, 1)),
    "avg_pool2d 3/2/1": (lambda a: F.avg_pool2d(a, 3, 2, 1),
                         lambda t: torch.nn.functional.avg_pool2d(t, 3, 2, 1)),
    "adaptive_avg_pool2d 7x7": (lambda a: F.adaptive_avg_pool2d(a, 7),
                                lambda t: torch.nn.functional.adaptive_avg_pool2d(t, 7)),
}


def medians(calls, repeats):
    for f in calls.values():
        f()
    times = {k: [] for k in calls}
    for _ in range(repeats):
        for k, f in calls.items():
            t = time.perf_counter()
            f()
            times[k].append(time.perf_counter() - t)
    return {k: statistics.median(v) * 1e3 for k, v in times.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", type=int, nargs=4, default=[8, 64, 112, 112])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    x = np.random.default_rng(0).standard_normal(args.shape).astype(np.float32)
    print(f"x {args.shape} f32, {args.threads} threads, torch {torch.__version__}; ms per call")
    print("| pooling | pass | tilefuse | torch | torch / tilefuse | tilefuse steps |")
    print("|---|---|---:|---:|---:|---|")
    for name, (ours, theirs) in POOLS.items():
        tx = torch.tensor(x, requires_grad=True)

        def torch_both():
            tx.grad = None
            (theirs(tx) ** 2).sum().backward()

        def torch_forward():
            with torch.no_grad():
                theirs(tx) * 2.0
        both = tilefuse.trace(lambda a: (ours(a) ** 2).sum(), x).value_and_grad(wrt=(0,))
        forward = tilefuse.trace(lambda a: ours(a) * 2.0, x)
        for label, graph, torch_fn in (("fwd+bwd", both, torch_both),
                                       ("fwd", forward, torch_forward)):
            compiled = graph.compile("cpu")
            kinds = [r["kind"] for r in graph.fuse("cpu").report()]
            steps = f"{kinds.count('library')} library, {len(kinds) - kinds.count('library')} " \
                    "kernels"
            t = medians({"tilefuse": lambda: compiled(x), "torch": torch_fn}, args.repeats)
            print(f"| {name} | {label} | {t['tilefuse']:.1f} | {t['torch']:.1f} | "
                  f"{t['torch'] / t['tilefuse']:.2f} | {steps} |")


if __name__ == "__main__":
    main()
