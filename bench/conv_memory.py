#!/usr/bin/env python3
"""unet_effnet's memory: tilefuse's step against PyTorch's, measured alike.

    PYTHONPATH=build/python python3 bench/conv_memory.py [--batch 8] [--size 128]

Each side runs in a fresh process with glibc told to serve every allocation
of 64 KiB or more by mmap (MALLOC_MMAP_THRESHOLD_), so freed tensors leave
the resident set at once and the resident set's high-water mark is the
memory actually in use at the step's peak. The figure is the high-water
mark (VmHWM) during the second step over the resident set before the first
(model and optimizer built; for tilefuse, the step compiled): everything a
training step takes, once-made library state (oneDNN's primitives, their
JIT code and buffers) included.

- PyTorch eager: activations, gradients (zero_grad(set_to_none=True)),
  AdamW's state (made in the first step), temporaries.
- tilefuse from_torch: the arena (allocated when the step is built, made
  resident by the first call; `step.memory_plan().peak`, listed beside),
  what the runtime allocates beyond it. (AdamW's state is made when the step
  is built, so it is in the baseline: 2 x 0.9 MiB here.)

Without the mmap threshold, memory glibc keeps from an earlier step counts
as already resident and hides most of a step's peak (this script's first
version reported 298 MiB for an eager step that needs ~485).
"""
import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

MEASURE = """
import ctypes, sys
sys.path.insert(0, {here!r})
import torch
import conv_models as C
torch.manual_seed(0); torch.set_num_threads(2)
m = C.unet_effnet(); x, y = C.segmentation_batch({batch}, {size})
opt = torch.optim.AdamW(m.parameters(), lr=1e-3, weight_decay=1e-2)
{build}
def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) * 1024
ctypes.CDLL("libc.so.6").malloc_trim(0)
before = status("VmRSS")
step()
ctypes.CDLL("libc.so.6").malloc_trim(0)
open("/proc/self/clear_refs", "w").write("5")  # resets VmHWM (Linux >= 4.0)
step()
print(status("VmHWM") - before, planned)
"""

EAGER = """
def step():
    opt.zero_grad(set_to_none=True)
    C.segmentation_loss(m, x, y).backward()
    opt.step()
planned = 0
"""

TILEFUSE = """
import tilefuse
compiled = tilefuse.from_torch(m, (x, y), opt, loss_fn=C.segmentation_loss)
def step():
    compiled(x, y)
planned = compiled.memory_plan().peak
"""


def measure(batch, size, build):
    code = MEASURE.format(here=HERE, batch=batch, size=size, build=build)
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env)
    if out.returncode != 0:
        raise SystemExit(out.stderr)
    growth, planned = out.stdout.strip().splitlines()[-1].split()
    return int(growth), int(planned)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--size", type=int, default=128)
    args = ap.parse_args()
    mib = 1 << 20
    eager, _ = measure(args.batch, args.size, EAGER)
    ours, planned = measure(args.batch, args.size, TILEFUSE)
    print(f"unet_effnet, batch {args.batch}, {args.size}x{args.size}, f32, AdamW")
    print("| tilefuse step MiB | of which the arena (planned peak) MiB | "
          "PyTorch eager step MiB | tilefuse / PyTorch |")
    print("|---:|---:|---:|---:|")
    print(f"| {ours / mib:.0f} | {planned / mib:.0f} | {eager / mib:.0f} | {ours / eager:.2f} |")


if __name__ == "__main__":
    main()
