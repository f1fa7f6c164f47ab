#!/usr/bin/env python3
"""What a user's call costs, against the same-run copy bandwidth (CPU).

    PYTHONPATH=build/python python3 bench/calls.py [--rounds 5] [--scale 1.0]

For each case, past the last-level cache, the median over --rounds rounds
(each round takes every case in turn) of:
- the whole Python call of the compiled function (results dropped between
  calls, as a loop that keeps only the latest would);
- its kernels alone (the executor's per-step profile);
- numpy.copyto of an array as large as the call's inputs + outputs,
  measured in the same round;
- numpy's own call computing the same result, where numpy has one;
and the fraction of copy bandwidth: (bytes the call must read and write) /
call time, over 2 * copied bytes / copy time.

Cases: an 8-op pointwise chain over 2^26 f32; softmax over rows of 1024;
a transpose of [2^17, 1024] f32 written contiguous (numpy:
ascontiguousarray(x.T)); layer_norm forward + backward (x, dy -> y, dx,
dgamma, dbeta); cross-entropy forward + backward (logits, labels -> loss,
dlogits); AdamW over 32M parameters (one compile_train_step call whose
gradient is the batch).
"""
import argparse
import statistics
import time

import numpy as np

import tilefuse
import tilefuse.functional as F


def numpy_softmax(m):
    e = np.exp(m - m.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def cases(scale):
    """(name, function, inputs, bytes moved, numpy's call or None)."""
    rng = np.random.default_rng(0)
    n = int((1 << 26) * scale)
    x = rng.standard_normal(n).astype(np.float32)
    chain = lambda x: ((x * 1.5 + 2.0).exp() * 0.5 - 1.0).abs().sqrt() * 3.0 + 1.0  # noqa: E731
    chain_np = lambda x: np.sqrt(np.abs(np.exp(x * 1.5 + 2.0) * 0.5 - 1.0)) * 3.0 + 1.0  # noqa: E731
    yield ("pointwise chain 8 ops", chain, (x,), 2 * x.nbytes, chain_np)
    rows = int(131072 * scale)
    m = rng.standard_normal((rows, 1024)).astype(np.float32)
    yield ("softmax rows of 1024", lambda m: F.softmax(m, -1), (m,), 2 * m.nbytes, numpy_softmax)
    yield ("transpose [rows, 1024]", lambda m: m.T, (m,), 2 * m.nbytes,
           lambda m: np.ascontiguousarray(m.T))
    w = np.ones(1024, np.float32)
    b = np.zeros(1024, np.float32)
    dy = rng.standard_normal((rows, 1024)).astype(np.float32)
    ln = tilefuse.trace(lambda x, w, b, dy: (F.layer_norm(x, (1024,), w, b) * dy).sum(),
                        m, w, b, dy).value_and_grad(wrt=(0, 1, 2))
    # reads x, dy; writes dx (and the 1024-wide dgamma, dbeta)
    yield ("layer_norm fwd+bwd", ln, (m, w, b, dy), 3 * m.nbytes, None)
    vocab = 1024
    labels = rng.integers(0, vocab, rows).astype(np.int64)
    ce = tilefuse.trace(lambda z, t: F.cross_entropy(z, t), m, labels).value_and_grad(wrt=(0,))
    yield ("cross_entropy fwd+bwd", ce, (m, labels), 2 * m.nbytes + labels.nbytes, None)


def once(fn):
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def profiled_seconds(compiled, call):
    """The kernels' time of one call (the executor's per-step profile)."""
    compiled.profile(True)
    call()
    seconds = sum(r.get("seconds", 0.0) for r in compiled.report(profile=True))
    compiled.profile(False)
    return seconds


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--scale", type=float, default=1.0,
                    help="size multiplier (1.0: 256-512 MiB per input)")
    args = ap.parse_args()
    # Each case: (name, call, compiled, bytes moved); numpy's calls by name.
    prepared, numpy_calls = [], {}
    for name, fn, inputs, moved, numpy_fn in cases(args.scale):
        compiled = fn.compile("cpu") if isinstance(fn, tilefuse.Graph) else \
            tilefuse.compile(fn, *inputs, device="cpu")
        prepared.append((name, (lambda c, i: lambda: c(*i))(compiled, inputs), compiled, moved))
        if numpy_fn is not None:
            numpy_calls[name] = (lambda f, i: lambda: f(*i))(numpy_fn, inputs)
    # AdamW over 32M parameters: p, m, v read and written, the gradient read.
    n = int((1 << 25) * args.scale)
    params = {"p": np.zeros(n, np.float32)}
    batch = {"g": np.ones(n, np.float32)}
    step = tilefuse.compile_train_step(lambda p, b: (p["p"] * b["g"]).sum(), params, batch,
                                       tilefuse.optim.AdamW(lr=1e-3), device="cpu")
    prepared.append(("AdamW 32M params", lambda: step(batch), step, 7 * 4 * n))
    copies = {}
    for name, call, _, moved in prepared:
        src = np.ones(moved // 2 // 4, np.float32)
        dst = np.empty_like(src)
        copies[name] = (lambda s, d: lambda: np.copyto(d, s))(src, dst)
        call()  # first calls: page faults, result pools
        copies[name]()
    # Rounds take every case in turn (call, kernels, copy, numpy), so a
    # burst of other load on this shared machine hits all of them alike.
    samples = {name: ([], [], [], []) for name, *_ in prepared}
    for _ in range(args.rounds):
        for name, call, compiled, _ in prepared:
            calls, kernels, copy, numpy_times = samples[name]
            calls.append(once(call))
            kernels.append(profiled_seconds(compiled, call))
            copy.append(once(copies[name]))
            if name in numpy_calls:
                numpy_times.append(once(numpy_calls[name]))
    print(f"{'case':24s} {'call ms':>9s} {'kernels ms':>11s} {'copy ms':>8s} {'numpy ms':>9s} "
          f"{'call/copy bw':>13s} {'kernels/copy bw':>16s}")
    for name, _, _, moved in prepared:
        calls, kernels, copy, numpy_times = samples[name]
        call, kernels, copy = (statistics.median(v) for v in (calls, kernels, copy))
        numpy_ms = f"{statistics.median(numpy_times) * 1e3:9.1f}" if numpy_times else f"{'-':>9s}"
        bw = 2 * (moved // 2) / copy
        print(f"{name:24s} {call * 1e3:9.1f} {kernels * 1e3:11.1f} {copy * 1e3:8.1f} {numpy_ms} "
              f"{moved / call / bw:13.2f} {moved / kernels / bw:16.2f}")


if __name__ == "__main__":
    main()
