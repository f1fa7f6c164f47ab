#!/usr/bin/env python3
"""Data-parallel training steps: tilefuse's parallel="ddp" against PyTorch's
DistributedDataParallel, both on gloo, one thread per rank, same run.

    PYTHONPATH=build/python python3 bench/ddp_step.py [--steps 10] [--rounds 3]
        [--bucket-mb 25] [--world 1 2] [--modes ddp zero2 zero3]

The model is gpt2_mini (tests/python/torch_zoo.py's GPT at gpt2_mini's
sizes: vocab 1024, seq 128, d 128, 4 heads, 2 layers, dropout 0, tied LM
head), batch 4 per rank (each rank adds its own 4 sequences: weak scaling),
AdamW (lr 1e-3, weight decay 0.01). For each world size the script spawns
the ranks (a file store on this machine), and each rank measures, in turn:
- tilefuse: tilefuse.from_torch(model, ..., parallel=<mode>) for each of
  --modes (world 1: no parallel), the whole Python call;
- PyTorch: DDP(model) forward, backward, torch.optim.AdamW (world 1: the
  plain module).
Medians over --rounds rounds of --steps steps. Rank 0 also reports, for the
tilefuse step: the bytes it all-reduces per step against the ring
all-reduce's minimum (2 (n-1)/n of the gradient bytes, sent by each rank),
the bytes each rank actually sent (the loopback
device's counter over the profiled steps, all ranks being on this machine),
the time its waits blocked (exposed communication), and the time the same
all-reduces take alone (torch.distributed on buckets of the same sizes);
hidden = 1 - exposed / alone; and the same bucket by bucket (each bucket's
all-reduce alone, one at a time), with where in the step each starts.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, os.pardir, "tests", "python"))


def loopback_bytes():
    """Bytes the loopback device has sent (Linux), 0 where unknown."""
    try:
        with open("/proc/net/dev") as f:
            for line in f:
                name, _, rest = line.partition(":")
                if name.strip() == "lo":
                    return int(rest.split()[8])
    except OSError:
        pass
    return 0


def rank_main(rank, world, store, out, args):
    os.environ["OMP_NUM_THREADS"] = os.environ["TILEFUSE_NUM_THREADS"] = "1"
    import numpy as np
    import torch
    import torch.distributed as dist

    import tilefuse
    import torch_zoo
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)

    class GPT(torch_zoo.GPT):  # gpt2_mini's sizes
        vocab, seq, d, n_head, n_layer, batch = 1024, 128, 128, 4, 2, 4
    torch.manual_seed(0)
    base = GPT()
    g = torch.Generator().manual_seed(1 + rank)
    idx = torch.randint(0, GPT.vocab, (GPT.batch, GPT.seq), generator=g)
    tgt = torch.randint(0, GPT.vocab, (GPT.batch, GPT.seq), generator=g)

    def fresh():
        m = GPT()
        m.load_state_dict(base.state_dict())
        return m
    modes = args.modes if world > 1 else ["one process"]
    steps, cold = {}, {}
    for mode in modes:
        kw = dict(parallel=mode, bucket_bytes=int(args.bucket_mb * (1 << 20))) if world > 1 else {}
        t = time.perf_counter()
        steps[mode] = tilefuse.from_torch(fresh(), (idx, tgt), tilefuse.optim.AdamW(
            lr=1e-3, weight_decay=0.01), device="cpu", **kw)
        cold[mode] = time.perf_counter() - t
    tf = steps[modes[0]]
    model = fresh()
    net = torch.nn.parallel.DistributedDataParallel(model) if world > 1 else model
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3, weight_decay=0.01)

    def torch_step():
        opt.zero_grad(set_to_none=True)
        loss = net(idx, tgt)
        loss.backward()
        opt.step()
        return loss.item()
    paths = {f"tilefuse {mode}": (lambda s=s: s(idx, tgt)) for mode, s in steps.items()}
    paths["pytorch"] = torch_step
    for fn in paths.values():
        fn()
    times = {name: [] for name in paths}
    for _ in range(args.rounds):
        for name, fn in paths.items():
            dist.barrier()
            t = time.perf_counter()
            for _ in range(args.steps):
                fn()
            times[name].append((time.perf_counter() - t) / args.steps)
    result = {"world": world, "cold_s": cold, "modes": modes,
              **{name: statistics.median(v) for name, v in times.items()}}
    exe = tf.train_step.compiled._exe
    rows = exe.kernels()
    starts = [r for r in rows if r["name"] == "all_reduce_start"]
    if starts:
        dist.barrier()
        sent = loopback_bytes()
        exe.set_profiling(True)
        for _ in range(args.steps):
            tf(idx, tgt)
        seconds, calls = exe.step_seconds()
        exe.set_profiling(False)
        dist.barrier()
        # Every rank's traffic crosses the loopback device (counted once per
        # byte sent), barriers included: per rank and step.
        sent = (loopback_bytes() - sent) / world / args.steps
        waits = sum(s for s, r in zip(seconds, rows) if r["name"] == "all_reduce_wait") / calls
        sizes = [r["shape"][0] for r in starts]
        buckets = [torch.zeros(n) for n in sizes]
        alone = []
        for _ in range(args.steps):
            dist.barrier()
            t = time.perf_counter()
            works = [dist.all_reduce(b, async_op=True) for b in buckets]
            for w in works:
                w.wait()
            alone.append(time.perf_counter() - t)
        # Bucket by bucket: where in the step it starts (the fraction of
        # the step's steps before it), how long its wait blocked, and how
        # long its all-reduce takes alone. A wait belongs to the first
        # started bucket of its size not yet waited for.
        start_rows = [i for i, r in enumerate(rows) if r["name"] == "all_reduce_start"]
        open_starts = [(n, k) for k, n in enumerate(sizes)]
        per_bucket = [{"elements": n, "start_at": i / len(rows), "wait_s": 0.0}
                      for n, i in zip(sizes, start_rows)]
        for sec, r in zip(seconds, rows):
            if r["name"] == "all_reduce_wait":
                j = next(k for k, (n, _) in enumerate(open_starts) if n == r["shape"][0])
                per_bucket[open_starts.pop(j)[1]]["wait_s"] = sec / calls
        for b, bucket in zip(per_bucket, buckets):
            one = []
            for _ in range(args.steps):
                dist.barrier()
                t = time.perf_counter()
                dist.all_reduce(bucket)
                one.append(time.perf_counter() - t)
            b["alone_s"] = statistics.median(one)
        grad_bytes = 4 * sum(p.numel() for p in base.parameters())
        result.update(buckets=len(sizes), bucket_bytes=4 * sum(sizes), grad_bytes=grad_bytes,
                      ring_min_bytes=2 * (world - 1) / world * grad_bytes,
                      exposed_s=waits, alone_s=statistics.median(alone), sent_bytes=sent,
                      per_bucket=per_bucket)
    if rank == 0:
        with open(out, "w") as f:
            json.dump(result, f)
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--bucket-mb", type=float, default=25.0)
    ap.add_argument("--world", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--modes", nargs="+", default=["ddp"],
                    choices=["ddp", "zero1", "zero2", "zero3"])
    ap.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--store", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.rank is not None:
        return rank_main(args.rank, args.world[0], args.store, args.out, args)
    results = []
    for world in args.world:
        with tempfile.TemporaryDirectory() as tmp:
            store, out = os.path.join(tmp, "store"), os.path.join(tmp, "out.json")
            procs = [subprocess.Popen([sys.executable, __file__, "--rank", str(r), "--world",
                                       str(world), "--store", store, "--out", out, "--steps",
                                       str(args.steps), "--rounds", str(args.rounds),
                                       "--bucket-mb", str(args.bucket_mb), "--modes",
                                       *args.modes])
                     for r in range(world)]
            for p in procs:
                if p.wait() != 0:
                    sys.exit(f"a rank of world size {world} failed")
            with open(out) as f:
                results.append(json.load(f))
    print("gpt2_mini data-parallel step, batch 4 per rank, gloo, 1 thread per rank\n")
    print("| world | tilefuse | tilefuse step | PyTorch step | PyTorch / tilefuse | "
          "tilefuse cold compile |")
    print("|---|---|---|---|---|---|")
    for r in results:
        for mode in r["modes"]:
            t = r[f"tilefuse {mode}"]
            print(f"| {r['world']} | {mode} | {t * 1e3:.1f} ms | {r['pytorch'] * 1e3:.1f} ms | "
                  f"{r['pytorch'] / t:.2f}x | {r['cold_s'][mode]:.1f} s |")
    for r in results:
        if "buckets" not in r:
            continue
        hidden = max(0.0, 1 - r["exposed_s"] / r["alone_s"]) if r["alone_s"] > 0 else 0.0
        print(f"\nworld {r['world']}, {r['modes'][0]}: {r['buckets']} bucket(s), {r['bucket_bytes'] / 2**20:.2f} MiB "
              f"all-reduced per step = the gradients' {r['grad_bytes'] / 2**20:.2f} MiB (ring "
              f"all-reduce: each rank sends at least {r['ring_min_bytes'] / 2**20:.2f} MiB; measured "
              f"on the loopback device: {r['sent_bytes'] / 2**20:.2f} MiB per rank and step); "
              f"waits blocked {r['exposed_s'] * 1e3:.2f} ms per step, the same all-reduces "
              f"alone take {r['alone_s'] * 1e3:.2f} ms: {hidden:.0%} of the communication "
              "hidden behind the backward pass")
        for k, b in enumerate(r["per_bucket"]):
            part = max(0.0, 1 - b["wait_s"] / b["alone_s"]) if b["alone_s"] > 0 else 0.0
            print(f"  bucket {k + 1}: {4 * b['elements'] / 2**20:.2f} MiB, started "
                  f"{b['start_at']:.0%} of the way through the step's steps, its wait blocked "
                  f"{b['wait_s'] * 1e3:.2f} ms, alone {b['alone_s'] * 1e3:.2f} ms: {part:.0%} "
                  "hidden")


if __name__ == "__main__":
    main()
