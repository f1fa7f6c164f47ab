#!/usr/bin/env python3
"""Inference of convolutional networks in eval mode (batch norm with running
statistics): tilefuse with its epilogues in the convolution against the
same compile with them as kernels, PyTorch eager and Inductor, same run.

    PYTHONPATH=build/python python3 bench/conv_inference.py [--batch 8]
        [--size 128] [--calls 5] [--rounds 3] [--threads 2]

Per model, one forward call under torch.no_grad() (the whole Python call),
medians of --rounds rounds of --calls calls, the paths interleaved in each
round, after two warm-up calls each:
- eager: PyTorch;
- tilefuse: torch.compile(model, backend="tilefuse"): each convolution's
  bias, inference batch norm (folded into its weight and bias) and
  relu/silu run inside oneDNN's call (graph.conv_bias_act);
- tilefuse, epilogue kernels: the same with TILEFUSE_CONV_EPILOGUES=0
  (a kernel after each convolution, as before);
- channels-first: the tilefuse path with TILEFUSE_CHANNELS_LAST=0 (fusion
  keeps PyTorch's layout even where a region of convolutions would pay
  for channels-last);
- inductor: torch.compile(model).
Models: torchvision's ResNet-18 and WORKLOADS' unet_effnet (EfficientNet-
style encoder) where installed. The largest difference between tilefuse's
outputs and eager's is printed beside the times.
"""
import argparse
import copy
import os
import statistics
import time

import torch

import tilefuse
import tilefuse._tracing
import tilefuse.torch_integration
from conv_models import unet_effnet


def timed(paths, calls, rounds):
    """Median seconds per call of each of `paths` ({name: call}), rounds
    interleaved (each path timed once per round, in turn) after two
    warm-up calls each: the first calls of a process pay oneDNN's JIT and
    the threads' start."""
    for call in paths.values():
        call()
        call()
    per_round = {name: [] for name in paths}
    for _ in range(rounds):
        for name, call in paths.items():
            start = time.perf_counter()
            for _ in range(calls):
                call()
            per_round[name].append((time.perf_counter() - start) / calls)
    return {name: statistics.median(t) for name, t in per_round.items()}


# The convolution steps' names of every program compiled since cleared.
seen = []
_compile = tilefuse._tracing.Graph.compile


def _compile_and_note(self, *args, **kwargs):
    seen.extend(r["name"] for r in self.fuse("cpu").report())
    return _compile(self, *args, **kwargs)


tilefuse._tracing.Graph.compile = _compile_and_note


def with_setting(setting, name="TILEFUSE_CONV_EPILOGUES"):
    """The tilefuse backend compiling with the environment's `name` =
    setting (None: unset). Inference graphs compile within the backend
    call."""
    def backend(gm, example_inputs):
        before = os.environ.pop(name, None)
        if setting is not None:
            os.environ[name] = setting
        try:
            return tilefuse.torch_integration.tilefuse_backend(gm, example_inputs)
        finally:
            os.environ.pop(name, None)
            if before is not None:
                os.environ[name] = before
    return backend


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
          f"{'channels-first':>15} {'inductor':>9} {'vs eager':>9} {'vs kernels':>11} "
          f"{'vs inductor':>12} {'max|diff|':>10}")
    for name, model in models(args.size):
        with torch.no_grad():
            want = model(x)
            paths = {"eager": model}
            # Each path compiles its own copy of the model (Dynamo keeps one
            # compiled graph per module instance), under its setting of
            # TILEFUSE_CONV_EPILOGUES; the convolutions each program has
            # are checked to be what the path says.
            for path, setting in (("tilefuse", None), ("kernels", "0")):
                compiled = torch.compile(copy.deepcopy(model), backend=with_setting(setting))
                seen.clear()
                compiled(x)
                folded = sum(n == "conv_bias_act" for n in seen)
                assert (folded > 0) == (setting is None), (path, seen)
                paths[path] = compiled
            # Channels-first convolutions (TILEFUSE_CHANNELS_LAST=0), where
            # fusion would otherwise lay them out channels-last.
            paths["channels-first"] = torch.compile(
                copy.deepcopy(model), backend=with_setting("0", "TILEFUSE_CHANNELS_LAST"))
            paths["channels-first"](x)
            diff = (paths["tilefuse"](x) - want).abs().max().item()
            try:
                inductor = torch.compile(copy.deepcopy(model))
                inductor(x)
                paths["inductor"] = inductor
            except Exception as e:  # noqa: BLE001
                print(f"  (inductor: {type(e).__name__}: {str(e).splitlines()[0][:100]})")
            row = timed({k: (lambda f=f: f(x)) for k, f in paths.items()}, args.calls,
                        args.rounds)
            row.setdefault("inductor", float("nan"))
            torch._dynamo.reset()
        ms = {k: v * 1e3 for k, v in row.items()}
        print(f"{name:<12} {ms['eager']:8.1f} {ms['tilefuse']:9.1f} {ms['kernels']:17.1f} "
              f"{ms['channels-first']:15.1f} "
              f"{ms['inductor']:9.1f} {ms['eager'] / ms['tilefuse']:8.2f}x "
              f"{ms['kernels'] / ms['tilefuse']:10.2f}x {ms['inductor'] / ms['tilefuse']:11.2f}x "
              f"{diff:10.2e}")


if __name__ == "__main__":
    main()
