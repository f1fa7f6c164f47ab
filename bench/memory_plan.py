#!/usr/bin/env python3
"""Memory plans of the WORKLOADS.md training steps, and what planning costs
in step time.

    PYTHONPATH=build/python python3 bench/memory_plan.py plans [--no-gpt2-small] [--png out.png]
    PYTHONPATH=build/python python3 bench/memory_plan.py time [--steps 30] [--rounds 3]

`plans` prints, per training step (AdamW; mlp_mnist: Adam; `_ckpt`: each
transformer block under tilefuse.checkpoint), the planned
arena (peak), the lower bound (the most bytes live at one step), their
ratio, the arena without planning (every buffer its own range, as before
the planner), and the parameters, optimizer state and batch that live
beside the arena. No kernel is compiled: `Graph.memory_plan(target)` builds
the Program and its plan only. GPT-2 small (12 layers, d=768, seq 1024,
vocab 50257, batch 8, f32) is planned for cuda:sm_90 and compared with an
estimate of PyTorch eager's peak for the same model (torch_eager_estimate
below; no GPU is needed for either number).

`time` runs each CPU workload's step planned (the defaults), unplanned
(TILEFUSE_MEMORY_PLAN=none: the same kernels, every buffer its own range)
and as before the planner (unplanned and TILEFUSE_REMATERIALIZE=0),
alternating fresh processes, and reports median step times and the
ratios to the planned one (above 1: planned is faster).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "gpu"))

import tilefuse  # noqa: E402
from tilefuse import workloads as W  # noqa: E402

MIB = float(1 << 20)


def workloads(gpt2_small):
    """name -> (config, init, batch, loss, optimizer, target)."""
    adamw = lambda: tilefuse.optim.AdamW(lr=1e-3, weight_decay=0.01)  # noqa: E731
    out = {
        "gpt2_mini": (W.gpt2_mini_config(), W.gpt2_mini_init, W.gpt2_mini_batch,
                      W.gpt2_mini_loss, adamw, "cpu"),
        "mlp_mnist": (W.mlp_mnist_config(batch=64), W.mlp_mnist_init, W.mlp_mnist_batch,
                      W.mlp_mnist_loss, lambda: tilefuse.optim.Adam(lr=2e-4), "cpu"),
        "deepfm": (W.deepfm_config(), W.deepfm_init, W.deepfm_batch, W.deepfm_loss, adamw,
                   "cpu"),
    }
    out["gpt2_mini_ckpt"] = (W.gpt2_mini_config(checkpoint=True), W.gpt2_mini_init,
                             W.gpt2_mini_batch, W.gpt2_mini_loss, adamw, "cpu")
    if gpt2_small:
        import torch_models
        out["gpt2_small"] = (torch_models.gpt2_small_config(), W.gpt2_mini_init,
                             W.gpt2_mini_batch, W.gpt2_mini_loss, adamw, "cuda:sm_90")
        out["gpt2_small_ckpt"] = (torch_models.gpt2_small_config(checkpoint=True),
                                  W.gpt2_mini_init, W.gpt2_mini_batch, W.gpt2_mini_loss, adamw,
                                  "cuda:sm_90")
    return out


def step_graph(cfg, init, batch_fn, loss, optimizer):
    params, batch = init(cfg, seed=0), batch_fn(cfg, seed=1)
    g = tilefuse.train_step_graph(lambda p, b, s: loss(p, b, s, cfg, True), params, batch,
                                  optimizer())
    n_params = sum(v.size for v in params.values())
    batch_bytes = sum(np.asarray(v).nbytes for v in batch.values())
    return g, n_params, batch_bytes


def torch_eager_estimate(cfg, n_params):
    """PyTorch eager's peak for bench/gpu/torch_models.py's GPT-2 training
    step (f32, AdamW, explicit attention, no dropout), in bytes: parameters,
    gradients and AdamW's two moments (4 x 4 bytes per parameter), plus the
    tensors autograd saves for backward, plus the largest transients of the
    backward pass (the logits' gradient beside the saved log-softmax).

    Saved per layer (B batch, T seq, d model, H heads; f32 unless noted):
    ln_1 input and output, qkv (B,T,3d: q, k, v are views of it), the
    softmax output (B,H,T,T; the mask is (T,T) bool), the attention output
    before c_proj, ln_2 input and output, the MLP's fc output (GELU's input)
    and GELU's output: 5 (B,T,d) + (B,T,3d) + (B,H,T,T) + 2 (B,T,4d).
    After the layers: ln_f input and output, the logits (B,T,V) and
    log_softmax's output (B,T,V). Transient at the start of backward: the
    logits' gradient (B,T,V) and log_softmax's input gradient (B,T,V).
    A lower estimate than the real peak: the caching allocator's rounding
    and fragmentation, cuBLAS workspaces and the per-op temporaries of
    backward (e.g. softmax's (B,H,T,T) gradient) come on top."""
    B, T, d, H, V, L = (cfg["batch"], cfg["seq"], cfg["d_model"], cfg["n_head"], cfg["vocab"],
                        cfg["n_layer"])
    params = n_params  # the same parameters as tilefuse's step (tied LM head)
    per_layer = 5 * B * T * d + B * T * 3 * d + B * H * T * T + 2 * B * T * 4 * d
    per_layer_bytes = 4 * per_layer + T * T  # + the bool mask
    saved = L * per_layer_bytes + 4 * (2 * B * T * d + 2 * B * T * V)
    transient = 4 * 2 * B * T * V
    return {"params": params, "state_bytes": 16 * params, "saved": saved,
            "transient": transient, "peak": 16 * params + saved + transient}


def plans(args):
    rows = []
    for name, (cfg, init, batch_fn, loss, optimizer, target) in workloads(
            not args.no_gpt2_small).items():
        start = time.perf_counter()
        g, n_params, batch_bytes = step_graph(cfg, init, batch_fn, loss, optimizer)
        plan = g.memory_plan(target)
        seconds = time.perf_counter() - start
        state = 4 * n_params * 3  # parameters and Adam's two moments, f32
        row = {"name": name, "target": target, "peak": plan.peak,
               "lower_bound": plan.lower_bound, "ratio": plan.ratio,
               "unplanned": plan.unplanned, "params": n_params,
               "params_and_state": state, "batch": batch_bytes,
               "total": plan.peak + state + batch_bytes, "buffers": len(plan.buffers),
               "steps": plan.steps, "seconds": seconds}
        rows.append(row)
        print(f"{name:10s} {target:11s} peak {plan.peak / MIB:10.1f} MiB  bound "
              f"{plan.lower_bound / MIB:10.1f} MiB  ratio {plan.ratio:.3f}  unplanned "
              f"{plan.unplanned / MIB:10.1f} MiB ({plan.unplanned / plan.peak:.2f}x)  "
              f"params+state {state / MIB:8.1f} MiB  batch {batch_bytes / MIB:6.2f} MiB  "
              f"[{plan.steps} steps, {len(plan.buffers)} buffers, {seconds:.1f} s]",
              flush=True)
        if name == "gpt2_mini" and args.png:
            plan.save_png(args.png, title="gpt2_mini training step (AdamW, f32), CPU, "
                          "bench/memory_plan.py plans")
            print(f"  picture: {args.png}")
        if name.startswith("gpt2_small"):
            est = torch_eager_estimate(cfg, n_params)
            row["torch_eager_estimate"] = est
            print(f"  GPT-2 small, batch {cfg['batch']}: tilefuse arena + params + AdamW "
                  f"state + batch = {row['total'] / MIB:.0f} MiB; PyTorch eager estimate "
                  f"{est['peak'] / MIB:.0f} MiB (params+grads+moments "
                  f"{est['state_bytes'] / MIB:.0f}, saved activations {est['saved'] / MIB:.0f}, "
                  f"backward transients {est['transient'] / MIB:.0f}); tilefuse / PyTorch "
                  f"{row['total'] / est['peak']:.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


def time_one(name, steps):
    """Median step time of one workload in this process (its layout is the
    environment's)."""
    cfg, init, batch_fn, loss, optimizer, _ = workloads(False)[name]
    params, batch = init(cfg, seed=0), batch_fn(cfg, seed=1)
    step = tilefuse.compile_train_step(lambda p, b, s: loss(p, b, s, cfg, True), params, batch,
                                       optimizer=optimizer(), device="cpu")
    for _ in range(3):
        step(batch)
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        step(batch)
        times.append(time.perf_counter() - t)
    return statistics.median(times), step.memory_plan().peak


# The layouts `time` compares: today's defaults, the same kernels without
# the plan, and neither the plan nor rematerialization (the step as it was
# before the memory planner).
MODES = {
    "planned": {},
    "unplanned": {"TILEFUSE_MEMORY_PLAN": "none"},
    "before": {"TILEFUSE_MEMORY_PLAN": "none", "TILEFUSE_REMATERIALIZE": "0"},
}


def timing(args):
    results = {}
    for name in ("gpt2_mini", "gpt2_mini_ckpt", "mlp_mnist", "deepfm"):
        samples = {mode: [] for mode in MODES}
        peaks = {}
        for _ in range(args.rounds):
            for mode, settings in MODES.items():
                env = dict(os.environ)
                for key in ("TILEFUSE_MEMORY_PLAN", "TILEFUSE_REMATERIALIZE"):
                    env.pop(key, None)
                env.update(settings)
                out = subprocess.run([sys.executable, __file__, "_time_one", name,
                                      str(args.steps)], env=env, capture_output=True,
                                     text=True, check=True).stdout.split()
                samples[mode].append(float(out[0]))
                peaks[mode] = int(out[1])
        med = {mode: statistics.median(v) for mode, v in samples.items()}
        results[name] = {"median_s": med, "arena": peaks}
        print(f"{name:14s} step ms: planned {med['planned'] * 1e3:7.3f}  unplanned "
              f"{med['unplanned'] * 1e3:7.3f} ({med['unplanned'] / med['planned']:.3f}x)  "
              f"before {med['before'] * 1e3:7.3f} ({med['before'] / med['planned']:.3f}x);  "
              f"arena MiB: planned {peaks['planned'] / MIB:.1f}, unplanned "
              f"{peaks['unplanned'] / MIB:.1f}, before {peaks['before'] / MIB:.1f}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "_time_one":
        seconds, peak = time_one(argv[1], int(argv[2]))
        print(seconds, peak)
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("plans")
    p.add_argument("--no-gpt2-small", action="store_true")
    p.add_argument("--png", help="draw gpt2_mini's plan into this file")
    p.add_argument("--json")
    t = sub.add_parser("time")
    t.add_argument("--steps", type=int, default=30)
    t.add_argument("--rounds", type=int, default=3)
    t.add_argument("--json")
    args = ap.parse_args(argv)
    (plans if args.command == "plans" else timing)(args)


if __name__ == "__main__":
    main()
