#!/usr/bin/env python3
"""What a user's call costs, against the same-run copy bandwidth (CPU).

    PYTHONPATH=build/python python3 bench/calls.py [--rounds 5] [--scale 1.0]

For each case, past the last-level cache, the median over --rounds of:
- the whole Python call of the compiled function (results dropped between
  calls, as a loop that keeps only the latest would);
- its kernels alone (the executor's per-step profile);
- numpy.copyto of an array as large as the call's inputs + outputs,
  measured in the same round;
and the fraction of copy bandwidth: (bytes the call must read and write) /
call time, over 2 * copied bytes / copy time.

Cases: an 8-op pointwise chain over 2^26 f32; softmax over rows of 1024;
layer_norm forward + backward (x, dy -> y, dx, dgamma, dbeta); cross-entropy
forward + backward (logits, labels -> loss, dlogits); AdamW over 32M
parameters (one compile_train_step call whose gradient is the batch).
"""
import argparse
import statistics
import time

import numpy as np

import tilefuse
import tilefuse.functional as F


def cases(scale):
    rng = np.random.default_rng(0)
    n = int((1 << 26) * scale)
    x = rng.standard_normal(n).astype(np.float32)
    yield ("pointwise chain 8 ops", lambda x: ((x * 1.5 + 2.0).exp() * 0.5 - 1.0).abs().sqrt()
           * 3.0 + 1.0, (x,), 2 * x.nbytes)
    rows = int(131072 * scale)
    m = rng.standard_normal((rows, 1024)).astype(np.float32)
    yield ("softmax rows of 1024", lambda m: F.softmax(m, -1), (m,), 2 * m.nbytes)
    w = np.ones(1024, np.float32)
    b = np.zeros(1024, np.float32)
    dy = rng.standard_normal((rows, 1024)).astype(np.float32)
    ln = tilefuse.trace(lambda x, w, b, dy: (F.layer_norm(x, (1024,), w, b) * dy).sum(),
                        m, w, b, dy).value_and_grad(wrt=(0, 1, 2))
    # reads x, dy; writes dx (and the 1024-wide dgamma, dbeta)
    yield ("layer_norm fwd+bwd", ln, (m, w, b, dy), 3 * m.nbytes)
    vocab = 1024
    labels = rng.integers(0, vocab, rows).astype(np.int64)
    ce = tilefuse.trace(lambda z, t: F.cross_entropy(z, t), m, labels).value_and_grad(wrt=(0,))
    yield ("cross_entropy fwd+bwd", ce, (m, labels), 2 * m.nbytes + labels.nbytes)


def timed(fn, rounds):
    fn()
    out = []
    for _ in range(rounds):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return statistics.median(out)


def copy_seconds(nbytes, rounds):
    src = np.ones(nbytes // 4, np.float32)
    dst = np.empty_like(src)
    return timed(lambda: np.copyto(dst, src), rounds)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--scale", type=float, default=1.0,
                    help="size multiplier (1.0: 256-512 MiB per input)")
    args = ap.parse_args()
    print(f"{'case':24s} {'call ms':>9s} {'kernels ms':>11s} {'copy ms':>8s} "
          f"{'call/copy bw':>13s} {'kernels/copy bw':>16s}")
    rows = []
    for name, fn, inputs, moved in cases(args.scale):
        compiled = fn.compile("cpu") if isinstance(fn, tilefuse.Graph) else \
            tilefuse.compile(fn, *inputs, device="cpu")
        call = timed(lambda: compiled(*inputs), args.rounds)
        compiled.profile(True)
        compiled(*inputs)
        kernels = sum(r.get("seconds", 0.0) for r in compiled.report(profile=True))
        compiled.profile(False)
        copy = copy_seconds(moved // 2, args.rounds)
        rows.append((name, call, kernels, copy, moved))
    # AdamW over 32M parameters: p, m, v read and written, the gradient read.
    n = int((1 << 25) * args.scale)
    params = {"p": np.zeros(n, np.float32)}
    batch = {"g": np.ones(n, np.float32)}
    step = tilefuse.compile_train_step(lambda p, b: (p["p"] * b["g"]).sum(), params, batch,
                                       tilefuse.optim.AdamW(lr=1e-3), device="cpu")
    call = timed(lambda: step(batch), args.rounds)
    step.profile(True)
    step(batch)
    kernels = sum(r.get("seconds", 0.0) for r in step.report(profile=True))
    moved = 7 * 4 * n
    rows.append(("AdamW 32M params", call, kernels, copy_seconds(moved // 2, args.rounds), moved))
    for name, call, kernels, copy, moved in rows:
        bw = 2 * (moved // 2) / copy
        print(f"{name:24s} {call * 1e3:9.1f} {kernels * 1e3:11.1f} {copy * 1e3:8.1f} "
              f"{moved / call / bw:13.2f} {moved / kernels / bw:16.2f}")


if __name__ == "__main__":
    main()
