#!/usr/bin/env python3
"""Convolutional training steps: tilefuse's graph.conv (oneDNN) against the
written-out form it replaced (im2col gathers and matmuls) and PyTorch, same run.

    PYTHONPATH=build/python python3 bench/conv_step.py [--batch 8] [--size 64]
        [--steps 5] [--rounds 3] [--threads 2]

Per model, one SGD-momentum step (forward, backward, update) of the whole
Python call, medians of --rounds rounds of --steps steps after a warm-up:
- eager: PyTorch;
- tilefuse: torch.compile(model, backend="tilefuse"), convolutions as
  graph.conv / conv_grad_input / conv_grad_weight steps;
- tilefuse im2col: the same with TILEFUSE_LIBRARY_CONV=0 (convolutions
  written out, as before graph.conv existed);
- inductor: torch.compile(model) where it compiles here.
Models: a ResNet-style stack (3x3 conv, batch norm, ReLU, max pool,
stride-2 stages, global pool, linear) and an MBConv stack (1x1 expand,
depthwise 3x3, squeeze-excite, SiLU, 1x1 project, batch norm): the two
kinds of convolution in WORKLOADS' unet_effnet encoder.
"""
import argparse
import copy
import os
import statistics
import time

import torch
import torch.nn as nn

import tilefuse  # noqa: F401 (registers the backend)


def resnet_like(width=32):
    def block(ci, co, stride):
        return nn.Sequential(nn.Conv2d(ci, co, 3, stride, 1, bias=False), nn.BatchNorm2d(co),
                             nn.ReLU())
    return nn.Sequential(block(3, width, 2), nn.MaxPool2d(3, 2, 1), block(width, width, 1),
                         block(width, width, 1), block(width, 2 * width, 2),
                         block(2 * width, 2 * width, 1), block(2 * width, 4 * width, 2),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4 * width, 10))


class MBConv(nn.Module):
    def __init__(self, c, expand=4):
        super().__init__()
        e = c * expand
        self.expand = nn.Sequential(nn.Conv2d(c, e, 1, bias=False), nn.BatchNorm2d(e), nn.SiLU())
        self.depthwise = nn.Sequential(nn.Conv2d(e, e, 3, 1, 1, groups=e, bias=False),
                                       nn.BatchNorm2d(e), nn.SiLU())
        self.se = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(e, c // 4, 1), nn.SiLU(),
                                nn.Conv2d(c // 4, e, 1), nn.Sigmoid())
        self.project = nn.Sequential(nn.Conv2d(e, c, 1, bias=False), nn.BatchNorm2d(c))

    def forward(self, x):
        h = self.depthwise(self.expand(x))
        return x + self.project(h * self.se(h))


def mbconv_like(width=24):
    return nn.Sequential(nn.Conv2d(3, width, 3, 2, 1, bias=False), nn.BatchNorm2d(width),
                         nn.SiLU(), MBConv(width), MBConv(width), nn.AdaptiveAvgPool2d(1),
                         nn.Flatten(), nn.Linear(width, 10))


def timed(step, steps, rounds):
    step()  # warm-up (compiles)
    out = []
    for _ in range(rounds):
        t = time.perf_counter()
        for _ in range(steps):
            step()
        out.append((time.perf_counter() - t) / steps)
    return statistics.median(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--no-inductor", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"batch {args.batch}, {args.size}x{args.size}, f32, {args.threads} threads, "
          f"torch {torch.__version__}; ms per step (whole call), median of {args.rounds}")
    print("| model | eager | tilefuse | tilefuse im2col | inductor | eager / tilefuse | "
          "im2col / tilefuse |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, make in (("resnet-like", resnet_like), ("mbconv-like", mbconv_like)):
        torch.manual_seed(0)
        base = make()
        x = torch.randn(args.batch, 3, args.size, args.size)
        y = torch.randint(0, 10, (args.batch,))
        times = {}
        for path in ("eager", "tilefuse", "tilefuse im2col", "inductor"):
            if path == "inductor" and args.no_inductor:
                continue
            model = copy.deepcopy(base)
            opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
            os.environ["TILEFUSE_LIBRARY_CONV"] = "0" if path == "tilefuse im2col" else "1"
            run = model if path == "eager" else torch.compile(
                model, backend="tilefuse" if path.startswith("tilefuse") else "inductor")

            def step():
                opt.zero_grad()
                loss = nn.functional.cross_entropy(run(x), y)
                loss.backward()
                opt.step()
            try:
                times[path] = timed(step, args.steps, args.rounds) * 1e3
            except Exception as e:  # noqa: BLE001 (inductor may not compile here)
                times[path] = float("nan")
                print(f"  ({name}, {path}: {type(e).__name__}: {str(e).splitlines()[0][:120]})")
            torch._dynamo.reset()
        os.environ.pop("TILEFUSE_LIBRARY_CONV", None)
        t = times
        print(f"| {name} | {t['eager']:.1f} | {t['tilefuse']:.1f} | {t['tilefuse im2col']:.1f} | "
              f"{t.get('inductor', float('nan')):.1f} | {t['eager'] / t['tilefuse']:.2f} | "
              f"{t['tilefuse im2col'] / t['tilefuse']:.2f} |")


if __name__ == "__main__":
    main()
