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
Models (bench/conv_models.py): a ResNet-style stack (3x3 conv, batch norm,
ReLU, max pool, stride-2 stages, global pool, linear) and an MBConv stack
(1x1 expand, depthwise 3x3, squeeze-excite, SiLU, 1x1 project, batch norm):
the two kinds of convolution in WORKLOADS' unet_effnet encoder; then
unet_effnet itself (--unet-batch, --unet-size; AdamW) through the backend,
from_torch, eager and inductor.
"""
import argparse
import copy
import os
import statistics
import time

import torch
import torch.nn as nn

import tilefuse  # noqa: F401 (registers the backend)
from conv_models import (mbconv_like, resnet_like, segmentation_batch, segmentation_loss,
                         unet_effnet)


def torch_step(run, opt, loss_fn, bf16=False):
    """One PyTorch training step of `run` (eager or compiled); bf16: under
    PyTorch's CPU autocast (convolutions and matmuls in bf16)."""
    def step():
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = loss_fn(run)
        loss.backward()
        opt.step()
    return step


def measure(name, path, step, args):
    """ms per step, or NaN (said) where the path fails (inductor may not
    compile here)."""
    try:
        return timed(step, args.steps, args.rounds) * 1e3
    except Exception as e:  # noqa: BLE001
        print(f"  ({name}, {path}: {type(e).__name__}: {str(e).splitlines()[0][:120]})")
        return float("nan")
    finally:
        torch._dynamo.reset()


def timed(step, steps, rounds):
    step()  # warm-up (compiles)
    out = []
    for _ in range(rounds):
        t = time.perf_counter()
        for _ in range(steps):
            step()
        out.append((time.perf_counter() - t) / steps)
    return statistics.median(out)


def segmentation_times(args, paths):
    """ms per AdamW step of unet_effnet (WORKLOADS: batch, size, 151 classes,
    an ignore band, lr 1e-3, weight decay 1e-2) along `paths`."""
    torch.manual_seed(0)
    base = unet_effnet()
    x, y = segmentation_batch(args.unet_batch, args.unet_size)
    times = {}
    for path in paths:
        model = copy.deepcopy(base)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-2)
        bf16 = args.precision == "bf16"
        if path == "jax":
            step = jax_step(base, x, y)
            if step is None:
                continue
        elif path == "from_torch":
            step_fn = tilefuse.from_torch(model, (x, y), opt, loss_fn=segmentation_loss,
                                          precision=args.precision)
            step = lambda: step_fn(x, y)  # noqa: E731
        else:
            run = model if path == "eager" else torch.compile(
                model, backend="tilefuse" if path == "tilefuse" else "inductor")
            step = torch_step(run, opt, lambda r: segmentation_loss(r, x, y), bf16)
        times[path] = measure("unet_effnet", path, step, args)
    return times


def jax_step(base, x, y):
    """unet_effnet's JAX step, or None (said) where its first loss is not
    PyTorch's: a benchmark of a different model would mean nothing."""
    import unet_jax
    want = segmentation_loss(copy.deepcopy(base), x, y).item()
    step = unet_jax.adamw_step(copy.deepcopy(base), x, y)
    got = float(step())
    if abs(got - want) > 1e-4 * abs(want):
        print(f"  (jax: first loss {got} is not PyTorch's {want}; left out)")
        return None
    return step


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--no-inductor", action="store_true")
    ap.add_argument("--unet-batch", type=int, default=8)
    ap.add_argument("--unet-size", type=int, default=128)
    ap.add_argument("--only-unet", action="store_true")
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32",
                    help="unet_effnet's precision: bf16 is PyTorch's CPU autocast for eager, "
                         "the backend and inductor, precision='bf16' for from_torch")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"batch {args.batch}, {args.size}x{args.size}, f32, {args.threads} threads, "
          f"torch {torch.__version__}; ms per step (whole call), median of {args.rounds}")
    print("| model | eager | tilefuse | tilefuse im2col | inductor | eager / tilefuse | "
          "im2col / tilefuse |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, make in (() if args.only_unet else (("resnet-like", resnet_like),
                                                  ("mbconv-like", mbconv_like))):
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
            step = torch_step(run, opt, lambda r: nn.functional.cross_entropy(r(x), y))
            times[path] = measure(name, path, step, args)
        os.environ.pop("TILEFUSE_LIBRARY_CONV", None)
        t = times
        print(f"| {name} | {t['eager']:.1f} | {t['tilefuse']:.1f} | {t['tilefuse im2col']:.1f} | "
              f"{t.get('inductor', float('nan')):.1f} | {t['eager'] / t['tilefuse']:.2f} | "
              f"{t['tilefuse im2col'] / t['tilefuse']:.2f} |")
    paths = ["eager", "tilefuse", "from_torch"] + ([] if args.no_inductor else ["inductor"])
    try:
        import jax  # noqa: F401
        paths += [] if args.precision == "bf16" else ["jax"]
    except ImportError:
        print("  (JAX is not installed: no JAX column)")
    t = segmentation_times(args, paths)
    print(f"\nunet_effnet, batch {args.unet_batch}, {args.unet_size}x{args.unet_size}, 151 "
          f"classes, AdamW, {args.precision} (ms per step):\n")
    print("| eager | tilefuse (backend) | from_torch | inductor | jax | eager / backend | "
          "eager / from_torch | inductor / from_torch | jax / from_torch |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    ind, jx = t.get("inductor", float("nan")), t.get("jax", float("nan"))
    print(f"| {t['eager']:.0f} | {t['tilefuse']:.0f} | {t['from_torch']:.0f} | {ind:.0f} | "
          f"{jx:.0f} | {t['eager'] / t['tilefuse']:.2f} | {t['eager'] / t['from_torch']:.2f} | "
          f"{ind / t['from_torch']:.2f} | {jx / t['from_torch']:.2f} |")


if __name__ == "__main__":
    main()
