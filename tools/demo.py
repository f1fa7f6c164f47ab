#!/usr/bin/env python3
"""tilefuse demo: trace GPT-2 mini (WORKLOADS.md CPU sizes), run it, train it.

Traces the forward pass and loss of `gpt2_mini` with tilefuse, prints the
graph's summary and op count, then runs it on the reference interpreter
on a synthetic batch and prints the logits' shape, the loss and a checksum
of the logits. Then it compiles a whole AdamW training step (forward,
backward, update) into fused CPU kernels and runs --steps of them, printing
the loss as it falls.

    PYTHONPATH=build/python python3 tools/demo.py [--eval] [--seed N] [--steps N]

`--eval` disables dropout (by default the training-mode forward runs, with
dropout masks drawn from --seed).
"""
import argparse
import sys
import time

import numpy as np

try:
    import tilefuse
    from tilefuse import workloads
except ImportError as e:  # pragma: no cover - a usage hint, not a feature
    sys.exit(f"cannot import tilefuse ({e}); run with PYTHONPATH=<build>/python")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--eval", action="store_true", help="disable dropout")
    parser.add_argument("--seed", type=int, default=0, help="dropout seed (default 0)")
    parser.add_argument("--steps", type=int, default=5, help="training steps (default 5)")
    args = parser.parse_args(argv)
    training = not args.eval

    cfg = workloads.gpt2_mini_config()
    params = workloads.gpt2_mini_init(cfg, seed=0)
    batch = workloads.gpt2_mini_batch(cfg, seed=1)
    seed = np.int64(args.seed)
    print("gpt2_mini: " + ", ".join(f"{k}={v}" for k, v in cfg.items()))
    print(f"  {sum(p.size for p in params.values()):,} parameters, "
          f"{'training (dropout on)' if training else 'eval (dropout off)'}")

    def gpt2_mini_forward(params, batch, seed):
        return workloads.gpt2_mini_loss_and_logits(params, batch, seed, cfg, training)

    t0 = time.perf_counter()
    graph = tilefuse.trace(gpt2_mini_forward, params, batch, seed)
    t_trace = time.perf_counter() - t0
    n_ops = sum(1 for line in graph.mlir().splitlines() if "= graph." in line)
    print()
    print(graph.summary().rstrip())
    print(f"\ntraced in {t_trace * 1e3:.1f} ms: {n_ops} graph ops")

    t0 = time.perf_counter()
    loss, logits = graph.interpret(params, batch, seed)
    t_run = time.perf_counter() - t0
    logits64 = logits.astype(np.float64)
    print(f"interpreted in {t_run:.2f} s")
    print(f"  logits: {logits.dtype}{list(logits.shape)}")
    print(f"  loss: {float(loss):.6f} (ln(vocab) = {np.log(cfg['vocab']):.6f})")
    print(f"  logits checksum: sum={logits64.sum():.6f} sum|x|={np.abs(logits64).sum():.6f}")
    if not np.isfinite(float(loss)) or not np.isfinite(logits64).all():
        print("error: non-finite output", file=sys.stderr)
        return 1
    return train(cfg, params, batch, args)


def train(cfg, params, batch, args):
    """AdamW (lr 1e-3, weight decay 0.01) on one batch: the loss must fall."""
    def loss_fn(params, batch, seed):
        return workloads.gpt2_mini_loss(params, batch, seed, cfg, training=not args.eval)

    t0 = time.perf_counter()
    step = tilefuse.compile_train_step(
        loss_fn, params, batch,
        optimizer=tilefuse.optim.AdamW(lr=1e-3, weight_decay=0.01),
        device="auto", seed=args.seed)
    n_ops = sum(1 for line in step.graph.mlir().splitlines() if "= graph." in line)
    print(f"\ntraining step compiled in {time.perf_counter() - t0:.2f} s: "
          f"{n_ops} graph ops (forward, backward, AdamW)")
    stages = step.compiled._exe.compile_stages
    print("  " + ", ".join(f"{name} {secs * 1e3:.0f} ms" for name, secs in stages))
    steps = step.compiled.report()
    kinds = {}
    for k in steps:
        kinds[k["kind"]] = kinds.get(k["kind"], 0) + 1
    print(f"  runs as {len(steps)} steps on the CPU: "
          + ", ".join(f"{n} {kind}" for kind, n in sorted(kinds.items()))
          + " (library = GEMM, gather, scatter-add)")
    losses = []
    for i in range(args.steps):
        t0 = time.perf_counter()
        losses.append(step(batch))
        print(f"  step {i + 1}: loss {losses[-1]:.6f} ({time.perf_counter() - t0:.2f} s)")
    if args.steps >= 2 and not losses[-1] < losses[0]:
        print("error: the loss did not fall", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
