#!/usr/bin/env python3
"""unet_effnet's memory: tilefuse's step against PyTorch's, measured alike.

    PYTHONPATH=build/python python3 bench/conv_memory.py [--batch 8] [--size 128]

Each side runs in a fresh process with glibc told to serve every allocation
of 64 KiB or more by mmap (MALLOC_MMAP_THRESHOLD_), so freed tensors leave
the resident set at once and the resident set's high-water mark is the
memory actually live at the step's peak. After a warm-up step (optimizer
state, primitives and caches exist) and malloc_trim, the next step's growth
of the high-water mark (VmHWM) over the resident set before it is what the
step needs beyond what it keeps.

- PyTorch eager: activations, gradients (zero_grad(set_to_none=True)),
  temporaries of forward, backward and AdamW.
- tilefuse from_torch: its arena is allocated when the step is built and
  stays resident, so the step's growth counts what it allocates beyond the
  arena (results handed back, library scratch); the arena's planned peak
  (`step.memory_plan().peak`) is listed beside it, and the sum is the
  comparable figure.

Without the mmap threshold and the trim, memory glibc keeps from the
warm-up step counts as "before" and hides most of PyTorch's peak (this
script's earlier version reported 298 MiB for a step that needs ~480).
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
step()
ctypes.CDLL("libc.so.6").malloc_trim(0)
before = status("VmRSS")
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
    extra, planned = measure(args.batch, args.size, TILEFUSE)
    ours = planned + extra
    print(f"unet_effnet, batch {args.batch}, {args.size}x{args.size}, f32, AdamW")
    print("| tilefuse arena's planned peak MiB | tilefuse step's growth beyond it MiB | "
          "tilefuse total MiB | PyTorch eager step's peak growth MiB | tilefuse / PyTorch |")
    print("|---:|---:|---:|---:|---:|")
    print(f"| {planned / mib:.0f} | {extra / mib:.1f} | {ours / mib:.0f} | {eager / mib:.0f} | "
          f"{ours / eager:.2f} |")


if __name__ == "__main__":
    main()
