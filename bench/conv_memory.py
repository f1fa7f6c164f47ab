#!/usr/bin/env python3
"""unet_effnet's memory: tilefuse's planned peak against PyTorch's measured one.

    PYTHONPATH=build/python python3 bench/conv_memory.py [--batch 8] [--size 128]

tilefuse: from_torch's step, `step.memory_plan()` (the arena's planned peak:
activations, gradients and temporaries of forward, backward and AdamW; the
parameters and optimizer state it keeps, listed beside). PyTorch: one eager
AdamW step in a fresh process, the growth of its resident set (VmHWM) over the
resident set before the step, after a warm-up step (so the optimizer state
and allocator caches exist) -- what a step adds at its peak, measured the
only way the CPU allocator allows.
"""
import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def eager_peak(batch, size):
    code = f"""
import sys, torch
sys.path.insert(0, {HERE!r})
import conv_models as C
torch.manual_seed(0); torch.set_num_threads(2)
m = C.unet_effnet(); x, y = C.segmentation_batch({batch}, {size})
opt = torch.optim.AdamW(m.parameters(), lr=1e-3, weight_decay=1e-2)
def step():
    opt.zero_grad(set_to_none=True)
    C.segmentation_loss(m, x, y).backward()
    opt.step()
def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) * 1024
step()
before = status("VmRSS")
# VmHWM is the high-water mark since the start: reset it (Linux >= 4.0)
open("/proc/self/clear_refs", "w").write("5")
step()
print(status("VmHWM") - before)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    return int(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--size", type=int, default=128)
    args = ap.parse_args()
    import torch

    import tilefuse
    sys.path.insert(0, HERE)
    import conv_models as C
    torch.manual_seed(0)
    m = C.unet_effnet()
    x, y = C.segmentation_batch(args.batch, args.size)
    step = tilefuse.from_torch(m, (x, y), torch.optim.AdamW(m.parameters(), lr=1e-3,
                                                             weight_decay=1e-2),
                               loss_fn=C.segmentation_loss)
    plan = step.memory_plan()
    params = sum(p.numel() for p in m.parameters()) * 4
    mib = 1 << 20
    eager = eager_peak(args.batch, args.size)
    print(f"unet_effnet, batch {args.batch}, {args.size}x{args.size}, f32, AdamW")
    print("| tilefuse planned peak (arena) MiB | kept: params + AdamW state MiB | "
          "PyTorch eager step's peak growth MiB | PyTorch / tilefuse |")
    print("|---:|---:|---:|---:|")
    print(f"| {plan.peak / mib:.0f} | {3 * params / mib:.1f} | {eager / mib:.0f} | "
          f"{eager / plan.peak:.2f} |")


if __name__ == "__main__":
    main()
