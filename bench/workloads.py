#!/usr/bin/env python3
"""Training-step time of the WORKLOADS.md models on the CPU: tilefuse's
compiled step against a plain-numpy step (bench/numpy_train.py) and, when
installed, JAX jit. (A PyTorch eager baseline is not written yet.)

    PYTHONPATH=build/python python3 bench/workloads.py [--steps 20] [--json out.json]

Every implementation runs the same model from the same initial parameters
with the same optimizer (gpt2_mini: AdamW lr 1e-3, wd 0.01; mlp_mnist: Adam
lr 2e-4), all in float32, all with both cores. Dropout: tilefuse draws its
masks in the kernels (Philox); numpy draws them with numpy's generator each
step; JAX gets masks drawn once outside the timed step (its time excludes
mask generation). Reported: the median wall time of a step over --steps
steps after two warm-up steps, and each baseline's time divided by
tilefuse's (above 1: tilefuse is faster).
"""
import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "python"))

import tilefuse  # noqa: E402
from tilefuse import workloads as W  # noqa: E402

import numpy_train  # noqa: E402

MODELS = {
    "gpt2_mini": dict(config=W.gpt2_mini_config, init=W.gpt2_mini_init, batch=W.gpt2_mini_batch,
                      loss=W.gpt2_mini_loss, numpy_step=numpy_train.gpt2_mini_step,
                      optimizer=lambda: tilefuse.optim.AdamW(lr=1e-3, weight_decay=0.01),
                      lr=1e-3, weight_decay=0.01, decoupled=True),
    "mlp_mnist": dict(config=lambda: W.mlp_mnist_config(batch=64), init=W.mlp_mnist_init,
                      batch=W.mlp_mnist_batch, loss=W.mlp_mnist_loss,
                      numpy_step=numpy_train.mlp_mnist_step,
                      optimizer=lambda: tilefuse.optim.Adam(lr=2e-4),
                      lr=2e-4, weight_decay=0.0, decoupled=False),
}


def median_step_seconds(step, steps, sync=lambda r: r):
    for _ in range(2):
        sync(step())
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        sync(step())
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def bench_tilefuse(m, cfg, steps):
    params, batch = m["init"](cfg, seed=0), m["batch"](cfg, seed=1)

    def loss_fn(p, b, s):
        return m["loss"](p, b, s, cfg, True)
    t = time.perf_counter()
    step = tilefuse.compile_train_step(loss_fn, params, batch, optimizer=m["optimizer"](),
                                       device="cpu")
    compile_s = time.perf_counter() - t
    return median_step_seconds(lambda: step(batch), steps), compile_s


def bench_numpy(m, cfg, steps):
    params, batch = m["init"](cfg, seed=0), m["batch"](cfg, seed=1)
    state = numpy_train.init_state(params)
    rng = np.random.default_rng(0)
    count = [0]

    def one():
        count[0] += 1
        return m["numpy_step"](params, state, batch, count[0], cfg, lr=m["lr"], dropout_rng=rng)
    return median_step_seconds(one, steps)


def bench_jax(name, m, cfg, steps):
    try:
        import jax
        import jax.numpy as jnp
        import jax_reference as J
    except ImportError:
        return None
    loss_fn = {"gpt2_mini": J.gpt2_mini_loss, "mlp_mnist": J.mlp_mnist_loss}[name]
    masks_fn = {"gpt2_mini": J.gpt2_mini_dropout_masks,
                "mlp_mnist": J.mlp_mnist_dropout_masks}[name]
    params = {k: jnp.asarray(v) for k, v in m["init"](cfg, seed=0).items()}
    batch_np = m["batch"](cfg, seed=1)
    batch = {k: jnp.asarray(v) for k, v in batch_np.items()}
    masks = [jnp.asarray(x) for x in masks_fn(cfg, batch_np, 0, np.float32)]
    lr, wd, decoupled = m["lr"], m["weight_decay"], m["decoupled"]
    b1, b2, eps = 0.9, 0.999, 1e-8

    @jax.jit
    def step(p, mom, vel, t, batch, masks):
        loss, g = jax.value_and_grad(lambda q: loss_fn(q, batch, masks, cfg))(p)
        new_p, new_m, new_v = {}, {}, {}
        for k in p:
            x = p[k] * (1 - lr * wd) if decoupled else p[k]
            gk = g[k] if decoupled else g[k] + wd * p[k]
            new_m[k] = b1 * mom[k] + (1 - b1) * gk
            new_v[k] = b2 * vel[k] + (1 - b2) * gk * gk
            mhat = new_m[k] / (1 - b1 ** t)
            vhat = new_v[k] / (1 - b2 ** t)
            new_p[k] = x - lr * mhat / (jnp.sqrt(vhat) + eps)
        return loss, new_p, new_m, new_v

    state = {"p": params, "m": {k: jnp.zeros_like(v) for k, v in params.items()},
             "v": {k: jnp.zeros_like(v) for k, v in params.items()}, "t": 0}

    def one():
        state["t"] += 1
        loss, state["p"], state["m"], state["v"] = step(
            state["p"], state["m"], state["v"], jnp.float32(state["t"]), batch, masks)
        return loss
    return median_step_seconds(one, steps, sync=lambda r: r.block_until_ready())


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--models", default="gpt2_mini,mlp_mnist")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args(argv)
    rows = []
    for name in args.models.split(","):
        m = MODELS[name]
        cfg = m["config"]()
        ours, compile_s = bench_tilefuse(m, cfg, args.steps)
        row = {"model": name, "tilefuse_ms": ours * 1e3, "compile_s": compile_s,
               "numpy_ms": bench_numpy(m, cfg, args.steps) * 1e3}
        jax_s = bench_jax(name, m, cfg, args.steps)
        row["jax_jit_ms"] = None if jax_s is None else jax_s * 1e3
        rows.append(row)
    print(f"{'model':10s} {'tilefuse':>10s} {'numpy':>10s} {'x':>6s} {'jax jit':>10s} {'x':>6s}"
          f"   (median ms per step, {args.steps} steps; x = baseline / tilefuse)")
    for r in rows:
        jx = r["jax_jit_ms"]
        print(f"{r['model']:10s} {r['tilefuse_ms']:10.2f} {r['numpy_ms']:10.2f} "
              f"{r['numpy_ms'] / r['tilefuse_ms']:6.2f} "
              + (f"{jx:10.2f} {jx / r['tilefuse_ms']:6.2f}" if jx else f"{'-':>10s} {'-':>6s}"))
    print("PyTorch eager: no baseline in this script yet (torch is not installed on the "
          "machines this suite was written on).")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
