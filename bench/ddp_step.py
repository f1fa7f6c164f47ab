#!/usr/bin/env python3
"""Data-parallel training steps: tilefuse's parallel="ddp" against PyTorch's
DistributedDataParallel, both on gloo, one thread per rank, same run.

    PYTHONPATH=build/python python3 bench/ddp_step.py [--steps 10] [--rounds 3]
        [--bucket-mb 25] [--world 1 2] [--modes ddp zero2 zero3] [--link-rate 1gbit]
        [--idle-comm-threads]

The model is gpt2_mini (tests/python/torch_zoo.py's GPT at gpt2_mini's
sizes: vocab 1024, seq 128, d 128, 4 heads, 2 layers, dropout 0, tied LM
head), batch 4 per rank (--batch; each rank adds its own sequences: weak scaling),
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
device's counter over the profiled steps, all ranks being on this machine,
or the rank's own link's),
the time its waits blocked (exposed communication), and the time the same
all-reduces take alone (torch.distributed on buckets of the same sizes);
hidden = 1 - exposed / alone; and the same bucket by bucket (each bucket's
all-reduce alone, one at a time), with when in the step each starts and
when gloo completes it. A step that does not wait can still pay for its
communication (CPU time for gloo and the network stack, the collectives'
starts, gradient kernels that no longer fuse with the optimizer), so the
script also times the step without communication, every rank training
alone at the same time: hidden = 1 - (ddp step - that step) / alone is the
whole-step measure. Where that time goes: each tilefuse step's CPU time per
step in the thread that runs it and in the process's other threads (gloo's),
the times that thread was preempted, and each collective start's share of
the step against its own CPU time (Linux: /proc's per-thread counters).

On the loopback device a transfer costs CPU time and no wire time, so on a
machine with no cores to spare there is nothing for the backward pass to
hide. --link-rate (root, Linux) runs each rank in its own network namespace
with a link of that rate each way (tc's rate syntax: 1gbit, 500mbit;
tests/python/emulated_link.py): communication then waits on the link, as it does
between machines.
"""
import argparse
import contextlib
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, os.pardir, "tests", "python"))
from emulated_link import EmulatedLink  # noqa: E402  (tests/python)


def sent_bytes(device):
    """Bytes `device` has sent (Linux; this process's network namespace), 0
    where unknown."""
    try:
        with open("/proc/net/dev") as f:
            for line in f:
                name, _, rest = line.partition(":")
                if name.strip() == device:
                    return int(rest.split()[8])
    except OSError:
        pass
    return 0


def other_threads():
    """Thread ids of this process but the calling thread's (Linux): gloo's
    (and torch's), which do a collective's CPU work for this rank."""
    import threading
    me = threading.get_native_id()
    return [int(tid) for tid in os.listdir("/proc/self/task") if int(tid) != me]


def thread_cpu():
    """(CPU seconds of this thread, of the process's other threads, this
    thread's involuntary context switches) so far (Linux: each thread's
    schedstat run time and status; zeros elsewhere)."""
    def run_seconds(task):
        with open(f"{task}/schedstat") as f:
            return int(f.read().split()[0]) / 1e9
    try:
        with open("/proc/thread-self/status") as f:
            switches = next(int(line.split(":")[1]) for line in f
                            if line.startswith("nonvoluntary_ctxt_switches"))
        mine = run_seconds("/proc/thread-self")
        others = sum(run_seconds(f"/proc/self/task/{tid}") for tid in other_threads())
    except (OSError, StopIteration, ValueError):
        return 0.0, 0.0, 0
    return mine, others, switches


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
        vocab, seq, d, n_head, n_layer, batch = 1024, 128, 128, 4, 2, args.batch
    torch.manual_seed(0)
    base = GPT()
    g = torch.Generator().manual_seed(1 + rank)
    idx = torch.randint(0, GPT.vocab, (GPT.batch, GPT.seq), generator=g)
    tgt = torch.randint(0, GPT.vocab, (GPT.batch, GPT.seq), generator=g)

    def fresh():
        m = GPT()
        m.load_state_dict(base.state_dict())
        return m
    # When each collective of a step starts and when gloo completes it (its
    # future's callback, on gloo's thread), for the in-flight timeline; only
    # in the profiled steps (`flights` a list), never in the timed rounds.
    # Each start's own CPU time goes to `start_cpu` in the same steps.
    flights = None
    start_cpu = []
    start = tilefuse.distributed.TorchCommunicator.start

    def timed_start(self, *a):
        begun, cpu = time.perf_counter(), time.thread_time()
        handle = start(self, *a)
        if flights is not None:
            start_cpu.append(time.thread_time() - cpu)
            flight = [begun, None]
            flights.append(flight)
            self._works[handle].get_future().then(
                lambda _, f=flight: f.__setitem__(1, time.perf_counter()))
        return handle
    tilefuse.distributed.TorchCommunicator.start = timed_start
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
    if world > 1:
        # The same step without communication, every rank training alone at
        # the same time: what the ranks' compute costs when they share the
        # machine, the baseline the communication's cost is measured from.
        apart = tilefuse.from_torch(fresh(), (idx, tgt), tilefuse.optim.AdamW(
            lr=1e-3, weight_decay=0.01), device="cpu")
        paths["tilefuse apart"] = lambda: apart(idx, tgt)
    for fn in paths.values():
        fn()
    if args.idle_comm_threads:
        # gloo's threads exist now (started by the process group and the
        # warm-up): from here on they run only when a core has nothing else.
        for tid in other_threads():
            os.sched_setscheduler(tid, os.SCHED_IDLE, os.sched_param(0))
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
    # Where each tilefuse step's time goes on this rank: the CPU time of the
    # thread that runs it, of the other threads (gloo's), and how often the
    # step's thread was preempted, per step.
    cpu = {}
    for name, fn in paths.items():
        if name.startswith("tilefuse"):
            dist.barrier()
            before = thread_cpu()
            for _ in range(args.steps):
                fn()
            after = thread_cpu()
            cpu[name] = [(b - a) / args.steps for a, b in zip(before, after)]
    result["cpu"] = cpu
    exe = tf.train_step.compiled._exe
    rows = exe.kernels()
    starts = [r for r in rows if r["name"] == "all_reduce_start"]
    if starts:
        dist.barrier()
        # On loopback every rank's traffic is counted once per byte sent,
        # barriers included; on an emulated link each rank counts its own.
        device = os.environ.get("GLOO_SOCKET_IFNAME", "lo")
        sent = sent_bytes(device)
        exe.set_profiling(True)
        spans = []
        for _ in range(args.steps):
            flights = []
            t = time.perf_counter()
            tf(idx, tgt)
            spans.append([(a - t, b - t) for a, b in flights] + [(time.perf_counter() - t,) * 2])
        seconds, calls = exe.step_seconds()
        exe.set_profiling(False)
        dist.barrier()
        sent = (sent_bytes(device) - sent) / (world if device == "lo" else 1) / args.steps
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
        # Bucket by bucket: when in the step it starts (the profiled time of
        # the program's steps before it), how long its wait blocked, and how
        # long its all-reduce takes alone. A wait belongs to the first
        # started bucket of its size not yet waited for.
        start_rows = [i for i, r in enumerate(rows) if r["name"] == "all_reduce_start"]
        open_starts = [(n, k) for k, n in enumerate(sizes)]
        per_bucket = [{"elements": n, "start_s": sum(seconds[:i]) / calls, "wait_s": 0.0}
                      for n, i in zip(sizes, start_rows)]
        for sec, r in zip(seconds, rows):
            if r["name"] == "all_reduce_wait":
                j = next(k for k, (n, _) in enumerate(open_starts) if n == r["shape"][0])
                per_bucket[open_starts.pop(j)[1]]["wait_s"] = sec / calls
        # In flight: median start and completion (from the call's start).
        for k, b in enumerate(per_bucket):
            b["flight_s"] = [statistics.median(span[k][j] for span in spans) for j in (0, 1)]
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
                      per_bucket=per_bucket, profiled_s=sum(seconds) / calls,
                      call_s=statistics.median(span[-1][0] for span in spans),
                      start_s=sum(seconds[i] for i in start_rows) / calls / len(start_rows),
                      start_cpu_s=statistics.mean(start_cpu))
    if rank == 0:
        with open(out, "w") as f:
            json.dump(result, f)
    # Shut down in order (as tests/python/distributed_worker.py): the DDP
    # module's reducer and the steps' communicators, which hold the process
    # group, go first, and no rank tears the group down while another is
    # still in a collective (a rank aborted at exit, std::terminate on a
    # joinable thread, in 2 of 13 runs before this order; not seen since).
    del net, opt, paths, steps, tf, exe
    if world > 1:
        del apart
    gc.collect()
    dist.barrier()
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--bucket-mb", type=float, default=25.0)
    ap.add_argument("--batch", type=int, default=4, help="sequences per rank")
    ap.add_argument("--world", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--modes", nargs="+", default=["ddp"],
                    choices=["ddp", "zero1", "zero2", "zero3"])
    ap.add_argument("--link-rate", help="each rank on its own link of this rate (tc's syntax: "
                    "1gbit, 500mbit; root, Linux); default: loopback")
    ap.add_argument("--idle-comm-threads", action="store_true",
                    help="an experiment (Linux): after the warm-up, run every thread but the "
                    "step's (gloo's) at SCHED_IDLE, so that a collective never takes the "
                    "step's core")
    ap.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--store", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.rank is not None:
        return rank_main(args.rank, args.world[0], args.store, args.out, args)
    if args.link_rate:
        why = EmulatedLink.unavailable()
        if why:
            sys.exit(f"--link-rate {args.link_rate}: an emulated link {why}")
    results = []
    for world in args.world:
        with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
            store, out = os.path.join(tmp, "store"), os.path.join(tmp, "out.json")
            link = stack.enter_context(EmulatedLink(world, args.link_rate)) if args.link_rate else None
            env = {**os.environ, **(link.env if link else {})}
            procs = [subprocess.Popen((link.prefix(r) if link else []) + [
                sys.executable, __file__, "--rank", str(r), "--world", str(world), "--store",
                store, "--out", out, "--steps", str(args.steps), "--rounds", str(args.rounds),
                "--bucket-mb", str(args.bucket_mb), "--batch", str(args.batch), "--modes", *args.modes]
                + (["--idle-comm-threads"] if args.idle_comm_threads else []),
                env=env)
                     for r in range(world)]
            for p in procs:
                if p.wait() != 0:
                    sys.exit(f"a rank of world size {world} failed")
            with open(out) as f:
                results.append(json.load(f))
    where = f"each rank on its own {args.link_rate} link" if args.link_rate else "loopback"
    print(f"gpt2_mini data-parallel step, batch {args.batch} per rank, gloo ({where}), 1 thread per rank\n")
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
        apart = r["tilefuse apart"]
        added = r[f"tilefuse {r['modes'][0]}"] - apart
        print(f"\nworld {r['world']}, {r['modes'][0]}: the step without communication (every "
              f"rank training alone, at the same time) takes {apart * 1e3:.1f} ms; communicating "
              f"added {added * 1e3:.1f} ms to it, against {r['alone_s'] * 1e3:.1f} ms for its "
              f"all-reduces alone: {max(0.0, 1 - added / r['alone_s']):.0%} of the communication "
              "hidden")
        print(f"{r['buckets']} bucket(s), {r['bucket_bytes'] / 2**20:.2f} MiB "
              f"all-reduced per step = the gradients' {r['grad_bytes'] / 2**20:.2f} MiB (ring "
              f"all-reduce: each rank sends at least {r['ring_min_bytes'] / 2**20:.2f} MiB; measured "
              f"on the {'link' if args.link_rate else 'loopback device'}: "
              f"{r['sent_bytes'] / 2**20:.2f} MiB per rank and step); "
              f"waits blocked {r['exposed_s'] * 1e3:.2f} ms per step, the same all-reduces "
              f"alone take {r['alone_s'] * 1e3:.2f} ms: {hidden:.0%} hidden, counting only the "
              "time the waits blocked")
        for name, (mine, others, switches) in r["cpu"].items():
            print(f"{name}, CPU per step: {mine * 1e3:.1f} ms in the thread running the step, "
                  f"{others * 1e3:.1f} ms in gloo's and other threads; the step's thread "
                  f"preempted {switches:.1f} times")
        print(f"a collective's start takes {r['start_s'] * 1e3:.2f} ms of the step (mean), of "
              f"which {r['start_cpu_s'] * 1e3:.2f} ms its own CPU time; the rest is the thread it "
              "woke (gloo's) taking the core from the step")
        for k, b in enumerate(r["per_bucket"]):
            part = max(0.0, 1 - b["wait_s"] / b["alone_s"]) if b["alone_s"] > 0 else 0.0
            print(f"  bucket {k + 1}: {4 * b['elements'] / 2**20:.2f} MiB, started "
                  f"{b['start_s'] * 1e3:.1f} ms into the {r['profiled_s'] * 1e3:.1f} ms step, its wait blocked "
                  f"{b['wait_s'] * 1e3:.2f} ms, alone {b['alone_s'] * 1e3:.2f} ms: {part:.0%} "
                  f"hidden; in flight from {b['flight_s'][0] * 1e3:.1f} to "
                  f"{b['flight_s'][1] * 1e3:.1f} ms of the {r['call_s'] * 1e3:.1f} ms call")


if __name__ == "__main__":
    main()
