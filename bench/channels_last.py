#!/usr/bin/env python3
"""unet_effnet's training step with channels-last convolutions against the
same step channels-first (TILEFUSE_CHANNELS_LAST=0), in one process.

    PYTHONPATH=build/python python3 bench/channels_last.py [--batch 8]
        [--size 128] [--steps 3] [--rounds 5] [--threads 2]

Both steps are compiled through tilefuse.from_torch from one model's
parameters (AdamW lr 1e-3, weight decay 1e-2) and timed interleaved: each
round runs --steps steps of one layout, then of the other, so both see the
same machine. Prints the losses of the first steps (they must be equal),
ms per step (whole call, median of the rounds), and each layout's profile
summed by kind of step (kernels by kind, library steps by name).
"""
import argparse
import collections
import copy
import os
import statistics
import time

import torch

import tilefuse
from conv_models import segmentation_batch, segmentation_loss, unet_effnet

LAYOUTS = {"channels-last": "1", "channels-first": "0"}


def build(base, x, y):
    steps = {}
    for name, flag in LAYOUTS.items():
        os.environ["TILEFUSE_CHANNELS_LAST"] = flag  # part of the compile's key
        model = copy.deepcopy(base)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-2)
        t = time.perf_counter()
        steps[name] = tilefuse.from_torch(model, (x, y), opt, loss_fn=segmentation_loss)
        print(f"{name}: compiled in {time.perf_counter() - t:.1f} s")
    os.environ.pop("TILEFUSE_CHANNELS_LAST")
    return steps


def profile(step, x, y, calls):
    step.train_step.profile()
    for _ in range(calls):
        step(x, y)
    totals, counts = collections.defaultdict(float), collections.Counter()
    for row in step.report(profile=True):
        kind = row["kind"] if row["kind"] != "library" else row["name"]
        totals[kind] += row.get("seconds", 0.0) * 1e3
        counts[kind] += 1
    step.train_step.profile(False)
    return totals, counts


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--size", type=int, default=128)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    base = unet_effnet()
    x, y = segmentation_batch(args.batch, args.size)
    steps = build(base, x, y)
    for name, step in steps.items():
        print(f"{name}: losses", [round(float(step(x, y)), 7) for _ in range(3)])
    times = {name: [] for name in steps}
    for _ in range(args.rounds):
        for name, step in steps.items():
            t = time.perf_counter()
            for _ in range(args.steps):
                step(x, y)
            times[name].append((time.perf_counter() - t) / args.steps * 1e3)
    print(f"\nunet_effnet, batch {args.batch}, {args.size}x{args.size}, AdamW, f32, "
          f"{args.threads} threads; ms per step, median of {args.rounds} rounds of "
          f"{args.steps}:\n")
    print("| channels-last | channels-first | channels-first / channels-last |")
    print("|---:|---:|---:|")
    last = statistics.median(times["channels-last"])
    first = statistics.median(times["channels-first"])
    print(f"| {last:.1f} | {first:.1f} | {first / last:.2f} |")
    profiles = {name: profile(step, x, y, args.steps) for name, step in steps.items()}
    kinds = sorted(set().union(*(p[0] for p in profiles.values())),
                   key=lambda k: -profiles["channels-first"][0].get(k, 0.0))
    print("\nprofiled ms per step by kind (steps of that kind):\n")
    print("| kind | channels-last | channels-first |")
    print("|---|---:|---:|")
    for kind in kinds:
        cells = [f"{profiles[n][0].get(kind, 0.0):.1f} ({profiles[n][1].get(kind, 0)})"
                 for n in LAYOUTS]
        print(f"| {kind} | {cells[0]} | {cells[1]} |")
    totals = [sum(profiles[n][0].values()) for n in LAYOUTS]
    print(f"| all | {totals[0]:.1f} | {totals[1]:.1f} |")


if __name__ == "__main__":
    main()
