#!/usr/bin/env python3
"""Inference of convolutional networks in eval mode (batch norm with running
statistics): tilefuse with its epilogues in the convolution against the
same compile with them as kernels, PyTorch eager and Inductor, same run.

    PYTHONPATH=build/python python3 bench/conv_inference.py [--batch 8]
        [--size 128] [--calls 5] [--rounds 3] [--threads 2]

Per model, one forward call under torch.no_grad() (the whole Python call),
medians of --rounds rounds of --calls calls after a warm-up:
- eager: PyTorch;
- tilefuse: torch.compile(model, backend="tilefuse"): each convolution's
  bias, inference batch norm (folded into its weight and bias) and
  relu/silu run inside oneDNN's call (graph.conv_bias_act);
- tilefuse, epilogue kernels: the same with TILEFUSE_CONV_EPILOGUES=0
  (a kernel after each convolution, as before);
- inductor: torch.compile(model).
Models: torchvision's ResNet-18 and WORKLOADS' unet_effnet (EfficientNet-
style encoder) where installed. The largest difference between tilefuse's
outputs and eager's is printed beside the times.
"""
import argparse
import os
import statistics
import time

import torch

import tilefuse  # noqa: F401 (registers the backend)
from conv_models import unet_effnet


def timed(call, calls, rounds):
    call()  # warm-up (compiles)
    per_round = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            call()
        per_round.append((time.perf_counter() - start) / calls)
    return statistics.median(per_round)


def models(size):
    out = []
    try:
        import torchvision
        torch.manual_seed(0)
        out.append(("resnet18", torchvision.models.resnet18(num_classes=10)))
    except ImportError:
        print("(torchvision not installed: no ResNet-18)")
    torch.manual_seed(0)
    out.append(("unet_effnet", unet_effnet()))
    for _, m in out:
        for mod in m.modules():  # running statistics as after training
            if isinstance(mod, torch.nn.BatchNorm2d):
                mod.running_mean.uniform_(-0.5, 0.5)
                mod.running_var.uniform_(0.5, 2.0)
        m.eval()
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--size", type=int, default=128)
    p.add_argument("--calls", type=int, default=5)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    x = torch.randn(args.batch, 3, args.size, args.size, generator=torch.Generator().manual_seed(1))
    print(f"batch {args.batch}, {args.size}x{args.size}, {args.threads} threads; ms per call "
          f"(median of {args.rounds} rounds of {args.calls})")
    print(f"{'model':<12} {'eager':>8} {'tilefuse':>9} {'epilogue kernels':>17} "
          f"{'inductor':>9} {'vs eager':>9} {'vs kernels':>11} {'vs inductor':>12} {'max|diff|':>10}")
    for name, model in models(args.size):
        with torch.no_grad():
            want = model(x)
            row = {"eager": timed(lambda: model(x), args.calls, args.rounds)}
            diff = float("nan")
            for path, env in (("tilefuse", None), ("kernels", "0")):
                if env is None:
                    os.environ.pop("TILEFUSE_CONV_EPILOGUES", None)
                else:
                    os.environ["TILEFUSE_CONV_EPILOGUES"] = env
                torch._dynamo.reset()
                compiled = torch.compile(model, backend="tilefuse")
                row[path] = timed(lambda: compiled(x), args.calls, args.rounds)
                if path == "tilefuse":
                    diff = (compiled(x) - want).abs().max().item()
            os.environ.pop("TILEFUSE_CONV_EPILOGUES", None)
            torch._dynamo.reset()
            try:
                compiled = torch.compile(model)
                row["inductor"] = timed(lambda: compiled(x), args.calls, args.rounds)
            except Exception as e:  # noqa: BLE001
                print(f"  (inductor: {type(e).__name__}: {str(e).splitlines()[0][:100]})")
                row["inductor"] = float("nan")
            torch._dynamo.reset()
        ms = {k: v * 1e3 for k, v in row.items()}
        print(f"{name:<12} {ms['eager']:8.1f} {ms['tilefuse']:9.1f} {ms['kernels']:17.1f} "
              f"{ms['inductor']:9.1f} {ms['eager'] / ms['tilefuse']:8.2f}x "
              f"{ms['kernels'] / ms['tilefuse']:10.2f}x {ms['inductor'] / ms['tilefuse']:11.2f}x "
              f"{diff:10.2e}")


if __name__ == "__main__":
    main()
