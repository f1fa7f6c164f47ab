#!/usr/bin/env python3
"""Training-step time of the WORKLOADS.md models on the CPU: tilefuse's
compiled step against PyTorch eager, torch.compile of the whole step, JAX
jit and a plain-numpy step (bench/numpy_train.py), side by side in one run.

    PYTHONPATH=build/python python3 bench/workloads.py [--steps 20] [--rounds 3]
        [--threads 2] [--models gpt2_mini,mlp_mnist,gpt2_small_layer,unet_effnet]
        [--skip-compile] [--json out.json]

Every implementation runs the same model from the same initial parameters
with the same optimizer (gpt2_mini and gpt2_small_layer -- one GPT-2-small-
shaped block: d 768, 12 heads, seq 1024, batch 1 -- AdamW lr 1e-3, wd 0.01;
mlp_mnist: Adam lr 2e-4; unet_effnet -- bench/conv_models.py, batch 8 at
128x128, 151 classes with an ignore band -- AdamW lr 1e-3, wd 1e-2, the
PyTorch module through tilefuse.from_torch, and bench/unet_jax.py for JAX,
no numpy step), all in float32, all on --threads threads: the
process is pinned to that many cores and every pool sized to them before
any library loads (set_threads). Dropout 0.1 as
WORKLOADS.md has it: tilefuse draws its masks in the kernels (Philox);
PyTorch draws its own (torch.nn.functional.dropout); numpy draws them with
numpy's generator each step; JAX gets masks drawn once outside the timed
step (its time excludes mask generation). PyTorch eager uses the fused
AdamW/Adam (`fused=True`); torch.compile compiles the whole step function
(forward, backward, optimizer step: Dynamo splits it where it must).
Reported: the median over --rounds rounds (the paths taken in turn, so
noise hits all alike) of each round's median step over --steps steps, after
two warm-up steps, and each baseline's time divided by tilefuse's (above 1:
tilefuse is faster).
"""
import argparse
import json
import os
import statistics
import sys
import time


def set_threads(n):
    """Every runtime on n threads, before any of them starts: the process
    is pinned to n cores (XLA has no thread-count flag; its pool then shares
    them), and tilefuse's, OpenMP's and OpenBLAS's pools are sized to n."""
    cores = sorted(os.sched_getaffinity(0))
    if not 1 <= n <= len(cores):
        sys.exit(f"--threads {n}: this process may run on {len(cores)} cores")
    os.sched_setaffinity(0, set(cores[:n]))
    for name in ("TILEFUSE_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                 "MKL_NUM_THREADS"):
        os.environ[name] = str(n)
    if n == 1:
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                                   " --xla_cpu_multi_thread_eigen=false").strip()


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--models", default="gpt2_mini,mlp_mnist,gpt2_small_layer")
    parser.add_argument("--skip-compile", action="store_true",
                        help="leave out torch.compile (its cold compile takes a minute)")
    parser.add_argument("--json", help="also write the results here")
    return parser.parse_args(argv)


if __name__ == "__main__":
    set_threads(parse_args().threads)  # before numpy, torch and JAX load

import numpy as np  # noqa: E402

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
    # One GPT-2-small-shaped block (d 768, 12 heads, seq 1024), batch 1.
    "gpt2_small_layer": dict(config=lambda: W.gpt2_mini_config(
                                 n_layer=1, d_model=768, n_head=12, seq=1024, batch=1, vocab=1024),
                             init=W.gpt2_mini_init, batch=W.gpt2_mini_batch,
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


def torch_step_fn(name, m, cfg, compiled):
    """One PyTorch training step (a callable returning the loss tensor):
    torch_reference's functional model over a dict of leaf tensors."""
    import torch
    import torch.nn.functional as TF
    import torch_reference as R
    family = "mlp_mnist" if name == "mlp_mnist" else "gpt2_mini"
    loss_fn = {"gpt2_mini": R.gpt2_mini_loss, "mlp_mnist": R.mlp_mnist_loss}[family]
    params = R.to_torch(m["init"](cfg, seed=0))
    batch = m["batch"](cfg, seed=1)
    p = cfg["dropout"]
    drop = lambda t: TF.dropout(t, p, training=True)  # noqa: E731
    opt_cls = torch.optim.AdamW if m["decoupled"] else torch.optim.Adam
    # The compiled step leaves the optimizer to Inductor; eager takes the
    # fused kernels.
    opt = opt_cls(list(params.values()), lr=m["lr"], weight_decay=m["weight_decay"],
                  **({} if compiled else {"fused": True}))

    def step():
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(params, batch, None, cfg, True, dropout=drop)
        loss.backward()
        opt.step()
        return loss.detach()
    return torch.compile(step) if compiled else step


def make_tilefuse(m, cfg):
    """(step callable, compile seconds)."""
    params, batch = m["init"](cfg, seed=0), m["batch"](cfg, seed=1)

    def loss_fn(p, b, s):
        return m["loss"](p, b, s, cfg, True)
    t = time.perf_counter()
    step = tilefuse.compile_train_step(loss_fn, params, batch, optimizer=m["optimizer"](),
                                       device="cpu")
    return (lambda: step(batch)), time.perf_counter() - t


def unet_paths(skip_compile):
    """unet_effnet's steps (a callable each, returning the loss) and
    from_torch's compile seconds: tilefuse.from_torch, PyTorch eager (fused
    AdamW), torch.compile of the whole step, JAX jit, from one model's
    parameters and one batch."""
    import copy

    import torch

    import conv_models as C
    torch.manual_seed(0)
    base = C.unet_effnet()
    x, y = C.segmentation_batch(8, 128)

    def adamw(m, **kw):
        return torch.optim.AdamW(m.parameters(), lr=1e-3, weight_decay=1e-2, **kw)

    def torch_step(compiled):
        model = copy.deepcopy(base)
        opt = adamw(model, **({} if compiled else {"fused": True}))

        def step():
            opt.zero_grad(set_to_none=True)
            loss = C.segmentation_loss(model, x, y)
            loss.backward()
            opt.step()
            return loss.detach()
        return torch.compile(step) if compiled else step

    model = copy.deepcopy(base)
    t = time.perf_counter()
    ours = tilefuse.from_torch(model, (x, y), adamw(model), loss_fn=C.segmentation_loss)
    paths = {"tilefuse": lambda: ours(x, y), "torch eager": torch_step(False)}
    compile_s = time.perf_counter() - t
    if not skip_compile:
        paths["torch.compile"] = torch_step(True)
    try:
        import unet_jax
        paths["jax jit"] = unet_jax.adamw_step(copy.deepcopy(base), x, y)
    except ImportError:
        pass
    return paths, compile_s


def make_numpy(m, cfg):
    params, batch = m["init"](cfg, seed=0), m["batch"](cfg, seed=1)
    state = numpy_train.init_state(params)
    rng = np.random.default_rng(0)
    count = [0]

    def one():
        count[0] += 1
        return m["numpy_step"](params, state, batch, count[0], cfg, lr=m["lr"], dropout_rng=rng)
    return one


def make_jax(name, m, cfg):
    try:
        import jax
        import jax.numpy as jnp
        import jax_reference as J
    except ImportError:
        return None
    family = "mlp_mnist" if name == "mlp_mnist" else "gpt2_mini"
    loss_fn = {"gpt2_mini": J.gpt2_mini_loss, "mlp_mnist": J.mlp_mnist_loss}[family]
    masks_fn = {"gpt2_mini": J.gpt2_mini_dropout_masks,
                "mlp_mnist": J.mlp_mnist_dropout_masks}[family]
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
    return one


def main(argv=None):
    """Runs the comparison; the caller has run set_threads (the script does,
    before anything loads)."""
    args = parse_args(argv)
    try:
        import torch
        torch.set_num_threads(args.threads)
    except ImportError:
        torch = None
    rows = []
    for name in args.models.split(","):
        if name == "unet_effnet":
            paths, compile_s = unet_paths(args.skip_compile)
        else:
            m = MODELS[name]
            cfg = m["config"]()
            paths, compile_s = {}, None
            ours, compile_s = make_tilefuse(m, cfg)
            paths["tilefuse"] = ours
            if torch is not None:
                paths["torch eager"] = torch_step_fn(name, m, cfg, compiled=False)
                if not args.skip_compile:
                    paths["torch.compile"] = torch_step_fn(name, m, cfg, compiled=True)
            jax_step = make_jax(name, m, cfg)
            if jax_step is not None:
                paths["jax jit"] = jax_step
            paths["numpy"] = make_numpy(m, cfg)
        sync = {"jax jit": lambda r: r.block_until_ready()}
        cold = {}
        for path, fn in paths.items():  # first calls: compiles
            t = time.perf_counter()
            sync.get(path, lambda r: r)(fn())
            cold[path] = time.perf_counter() - t
        samples = {k: [] for k in paths}
        for _ in range(args.rounds):
            for path, fn in paths.items():
                samples[path].append(median_step_seconds(fn, args.steps,
                                                         sync.get(path, lambda r: r)))
        ms = {k: statistics.median(v) * 1e3 for k, v in samples.items()}
        rows.append({"model": name, "threads": args.threads, "compile_s": compile_s,
                     "first_call_s": cold, "median_ms": ms})
        print(f"{name}: {args.threads} thread(s), median ms per step over {args.rounds} "
              f"rounds of {args.steps} steps; x = path / tilefuse (above 1: tilefuse faster)")
        for path, t in ms.items():
            print(f"  {path:14s} {t:9.2f} ms  x {t / ms['tilefuse']:5.2f}   "
                  f"first call {cold[path]:6.2f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
