#!/usr/bin/env python3
"""Builds everything the GPU check needs, on a machine with the compiler
(no GPU needed): CUDA artifacts of the test corpus with their inputs and
expected outputs, the five benchmark kernels and the training workloads,
and manifest.json describing them (format: bench/gpu/bench.py).

    PYTHONPATH=build/python python3 bench/gpu/prepare.py OUT [--arch sm_90] [--no-gpt2-small]
                                                         [--target cpu]

Expected outputs come from the reference interpreter (float32), the oracle
of every CPU test; the GPU must match them within the stated tolerance.
"""
import argparse
import datetime
import json
import os
import subprocess
import sys
import time

import numpy as np

import tilefuse
import tilefuse.functional as F
from tilefuse import workloads as W

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import torch_models  # noqa: E402  (numpy parts only: no torch needed here)

# f32 results must satisfy |got - want| <= RTOL*|want| + ATOL*max(1, max|want|)
# (the bound the CPU backend is held to in tests/python/fusion_checks.py).
RTOL, ATOL = 1e-4, 1e-4


def log(msg):
    print(f"[prepare] {msg}", file=sys.stderr, flush=True)


# --- the test corpus: graphs run once against the interpreter -------------

def corpus():
    """(name, Graph, args, rtol, atol) of graphs covering every kernel family: pointwise,
    row and column reductions, split full reductions, views, f16, gathers
    and scatter-adds, GEMMs with and without epilogues, Philox dropout, the
    fused attention kernels forward and backward (f32, bf16, f16)."""
    rng = np.random.default_rng(0)
    out = []
    x = rng.standard_normal((37, 129)).astype(np.float32)
    w = rng.standard_normal((129,)).astype(np.float32)
    h = rng.standard_normal((8, 50)).astype(np.float16)

    def op_mix(x, w):
        a = F.layer_norm(F.gelu(x), (129,), w, w)
        b = (F.log_softmax(x, -1) * x.sigmoid()).sum(0) + x.argmax(1).to("f32").sum()
        return a, b, tilefuse.cat([x[:, :3], x[:, -3:]], 1).abs().sqrt()
    out.append(("op_mix", tilefuse.trace(op_mix, x, w), [x, w], RTOL, ATOL))

    # f16 storage, f32 arithmetic: the reference rounds every op to f16, the
    # kernels only what they store, so the f16 tolerance applies.
    half = tilefuse.trace(lambda h: ((h.exp() + h.tanh()).to("f32").amax(-1), h * h + 1), h)
    out.append(("f16_ops", half, [h], 1e-2, 1e-2))

    big = rng.standard_normal((1999 * 523,)).astype(np.float32)
    other = rng.standard_normal(big.shape).astype(np.float32)
    g = tilefuse.trace(lambda a, b: (a * b).sum(), big, other)
    out.append(("mul_kernel_fwd_bwd", g.value_and_grad(wrt=(0, 1)), [big, other], RTOL, ATOL))

    xs = rng.standard_normal((257, 1000)).astype(np.float32)
    out.append(("softmax_rows", tilefuse.trace(lambda x: F.softmax(x, -1), xs), [xs], RTOL, ATOL))
    out.append(("column_sums", tilefuse.trace(lambda x: x.sum(0) + x.amax(0), xs), [xs], RTOL,
                ATOL))

    a = rng.standard_normal((64, 96)).astype(np.float32)
    wl = rng.standard_normal((48, 96)).astype(np.float32)
    bl = rng.standard_normal((48,)).astype(np.float32)
    out.append(("linear_relu", tilefuse.trace(lambda a, w, b: F.relu(F.linear(a, w, b)), a, wl, bl),
                [a, wl, bl], RTOL, ATOL))

    cfg = W.gpt2_mini_config(n_layer=1, dropout=0.1)
    p, b = W.gpt2_mini_init(cfg, seed=0), W.gpt2_mini_batch(cfg, seed=1)
    fwd = tilefuse.trace(lambda p, b, s: W.gpt2_mini_loss(p, b, s, cfg, True), p, b, np.int64(3))
    out.append(("gpt2_mini_forward_dropout", fwd, [p, b, np.int64(3)], RTOL, ATOL))

    cfg = W.deepfm_config()
    p, b = W.deepfm_init(cfg, seed=0), W.deepfm_batch(cfg, seed=1)
    g = tilefuse.trace(lambda p, b: W.deepfm_loss(p, b, config=cfg), p, b)
    # Every parameter's gradient: the embeddings' scatter-adds and the
    # backward GEMMs run on the GPU too.
    out.append(("deepfm_grads", g.value_and_grad(wrt=tuple(range(len(p)))), [p, b], RTOL, ATOL))

    # The f32 kernels (heads up to 64: causal, grouped heads, odd T;
    # up to 128: a bool mask with a fully masked row), with gradients.
    for name, (hk, e, causal) in {"attention_d64_causal_gqa": (2, 64, True),
                                  "attention_d128_masked": (4, 80, False)}.items():
        q = rng.standard_normal((2, 4, 301, e)).astype(np.float32)
        k, v = (rng.standard_normal((2, hk, 301, e)).astype(np.float32) for _ in range(2))
        mask = rng.random((301, 301)) > 0.2
        mask[7] = False
        dout = rng.standard_normal(q.shape).astype(np.float32)

        def attention(q, k, v, m, causal=causal, dout=dout):
            o = F.scaled_dot_product_attention(q, k, v, attn_mask=None if causal else m,
                                               is_causal=causal)
            return (o * dout).sum(), o
        g = tilefuse.trace(attention, q, k, v, mask).value_and_grad(wrt=(0, 1, 2))
        out.append((name, g, [q, k, v, mask], RTOL, ATOL))

    # The 16-bit kernels: bf16 with heads past 128 (the d256 tiles, which
    # opt into more than 48 KiB of shared memory) and f16 with grouped
    # heads. The reference rounds the f32 math on the 16-bit inputs once,
    # the kernels also round P and dS to 16 bits for their products: the
    # 16-bit tolerance.
    for name, (dtype, e, hk) in {"attention_d256_bf16": ("bf16", 200, 2),
                                 "attention_f16_gqa": ("f16", 64, 1)}.items():
        q = rng.standard_normal((2, 2, 150, e)).astype(np.float32)
        k, v = (rng.standard_normal((2, hk, 150, e)).astype(np.float32) for _ in range(2))

        # A loss of positive terms: a sum that cancels to near 0 would hold
        # the 16-bit output's rounding to an absolute bound.
        def attention16(q, k, v, dtype=dtype):
            o = F.scaled_dot_product_attention(q.to(dtype), k.to(dtype), v.to(dtype),
                                               is_causal=True).to("f32")
            return (o * o).sum(), o
        g = tilefuse.trace(attention16, q, k, v).value_and_grad(wrt=(0, 1, 2))
        out.append((name, g, [q, k, v], 2e-2, 2e-2))

    # Convolutions through cuDNN (forward, input and weight gradients; a
    # strided one, a depthwise one) between batch norm, pooling and the
    # loss's kernels, every gradient.
    x = rng.standard_normal((8, 3, 33, 31)).astype(np.float32)
    w1 = (rng.standard_normal((16, 3, 3, 3)) * 0.3).astype(np.float32)
    w2 = (rng.standard_normal((16, 1, 3, 3)) * 0.3).astype(np.float32)
    fc = (rng.standard_normal((16, 10)) * 0.3).astype(np.float32)
    labels = rng.integers(0, 10, 8)

    def cnn(x, w1, w2, fc):
        h = F.relu(F.batch_norm(F.conv2d(x, w1, stride=2, padding=1), None, None, training=True))
        h = F.silu(F.conv2d(F.max_pool2d(h, 3, 2, 1), w2, padding=1, groups=16))
        return F.cross_entropy(F.adaptive_avg_pool2d(h, 1).reshape(8, 16) @ fc, labels)
    g = tilefuse.trace(cnn, x, w1, w2, fc).value_and_grad(wrt=(0, 1, 2, 3))
    out.append(("cnn_conv_bn_pool_grads", g, [x, w1, w2, fc], RTOL, ATOL))

    # Data-parallel steps of one rank: their collectives' steps (bucketed
    # all-reduce; ZeRO's all-gathers and reduce-scatters) as device copies,
    # in the step's CUDA graph with the fork and join of the second stream.
    params = {"w1": rng.standard_normal((64, 96)).astype(np.float32) * 0.1,
              "b1": np.zeros(96, np.float32),
              "w2": rng.standard_normal((96, 10)).astype(np.float32) * 0.1}
    batch = {"x": rng.standard_normal((32, 64)).astype(np.float32),
             "y": rng.integers(0, 10, 32)}

    def mlp_loss(p, b):
        return F.cross_entropy(F.gelu(b["x"] @ p["w1"] + p["b1"]) @ p["w2"], b["y"])
    for mode in ("ddp", "zero3"):
        g = tilefuse.train_step_graph(mlp_loss, params, batch, tilefuse.optim.AdamW(lr=1e-3),
                                      parallel=mode, world_size=1, bucket_bytes=16384)
        kept = [np.abs(rng.standard_normal(shape)).astype(np.float32) * 0.1
                for _, shape in g.inputs[:-4]]
        args = kept + [batch["x"], batch["y"], np.int64(2), np.float64(1e-3)]
        out.append((f"train_step_{mode}_one_rank", g, args, RTOL, ATOL))
    return out


# What the corpus must exercise: each kind of kernel and library step.
REQUIRED_STEPS = {"pointwise", "reduction", "matmul", "gather", "scatter_add", "attention",
                  "attention_grad", "collective", "conv", "conv_grad_input", "conv_grad_weight"}


def step_kinds(graph, target):
    """Kernel kinds and library calls of `graph` compiled for `target`."""
    seen = set()
    for row in graph.fuse(target).report():
        seen.add(row["kind"])
        if row["kind"] == "library" and any(op.endswith("_start") for op in row["ops"]):
            seen.add("collective")
        seen.update(op for op in row["ops"]
                    if op in ("matmul", "gather", "scatter_add", "attention", "attention_grad",
                              "conv", "conv_grad_input", "conv_grad_weight"))
    return seen


def flat(args):
    from tilefuse import _pytree
    leaves, _ = _pytree.flatten(list(args))
    return [np.asarray(v) for v in leaves]


def export_case(outdir, name, graph, args, target, rtol, atol):
    path = os.path.join(outdir, "corpus", name + ".tfa")
    graph.export(path, target)
    leaves = flat(args)
    want = graph._graph.interpret(leaves)
    np.savez(os.path.join(outdir, "corpus", name + ".in.npz"), *leaves)
    np.savez(os.path.join(outdir, "corpus", name + ".out.npz"), *want)
    return {"name": name, "artifact": f"corpus/{name}.tfa", "inputs": f"corpus/{name}.in.npz",
            "expected": f"corpus/{name}.out.npz", "rtol": rtol, "atol": atol}


# --- the five benchmark kernels (bench/kernel_bench.cpp) -------------------

def t(*shape):
    return "tensor<" + "x".join(map(str, shape)) + "xf32>"


def kernel_graphs():
    x = t(8192, 16384)
    chain = f"""func.func @chain(%x: {x}, %y: {x}) -> {x} {{
  %h = graph.full 0.5 : {x}
  %o = graph.full 1.0 : {x}
  %1 = graph.mul %x, %y : {x}
  %2 = graph.add %1, %x : {x}
  %3 = graph.mul %2, %h : {x}
  %4 = graph.sub %3, %y : {x}
  %5 = graph.abs %4 : {x}
  %6 = graph.add %5, %o : {x}
  %7 = graph.sqrt %6 : {x}
  %8 = graph.mul %7, %y : {x}
  return %8 : {x}
}}"""
    s = t(131072, 1024)
    softmax = f"""func.func @softmax(%x: {s}) -> {s} {{
  %0 = graph.softmax %x {{dim = 1 : i64}} : ({s}) -> {s}
  return %0 : {s}
}}"""
    ln, v = t(65536, 1024), t(1024)
    layer_norm = f"""func.func @ln(%x: {ln}, %g: {v}, %b: {v}, %w: {ln}) -> tensor<f32> {{
  %0 = graph.layer_norm %x, %g, %b : ({ln}, {v}, {v}) -> {ln}
  %1 = graph.mul %0, %w : {ln}
  %2 = graph.reduce_sum %1 {{dims = array<i64: 0, 1>}} : ({ln}) -> tensor<f32>
  return %2 : tensor<f32>
}}"""
    c = t(4096, 32768)
    ce = f"""func.func @ce(%x: {c}, %y: tensor<4096xi64>) -> tensor<f32> {{
  %0 = graph.cross_entropy %x, %y : ({c}, tensor<4096xi64>) -> tensor<f32>
  return %0 : tensor<f32>
}}"""
    a = t(33554432)
    adamw = f"""func.func @adamw(%p: {a}, %g: {a}, %m: {a}, %v: {a}, %bc1: tensor<f32>, %bc2: tensor<f32>, %lr: tensor<f32>) -> ({a}, {a}, {a}) {{
  %b1 = graph.full 0.9 : {a}
  %c1 = graph.full 0.1 : {a}
  %b2 = graph.full 0.999 : {a}
  %c2 = graph.full 0.001 : {a}
  %eps = graph.full 1.0e-8 : {a}
  %wd = graph.full 0.01 : {a}
  %m1 = graph.mul %m, %b1 : {a}
  %m2 = graph.mul %g, %c1 : {a}
  %mn = graph.add %m1, %m2 : {a}
  %gg = graph.mul %g, %g : {a}
  %v1 = graph.mul %v, %b2 : {a}
  %v2 = graph.mul %gg, %c2 : {a}
  %vn = graph.add %v1, %v2 : {a}
  %bc1b = graph.broadcast_in_dim %bc1 {{dims = array<i64>}} : (tensor<f32>) -> {a}
  %bc2b = graph.broadcast_in_dim %bc2 {{dims = array<i64>}} : (tensor<f32>) -> {a}
  %lrb = graph.broadcast_in_dim %lr {{dims = array<i64>}} : (tensor<f32>) -> {a}
  %mh = graph.div %mn, %bc1b : {a}
  %vh = graph.div %vn, %bc2b : {a}
  %sq = graph.sqrt %vh : {a}
  %den = graph.add %sq, %eps : {a}
  %upd = graph.div %mh, %den : {a}
  %dec = graph.mul %p, %wd : {a}
  %tot = graph.add %upd, %dec : {a}
  %stp = graph.mul %tot, %lrb : {a}
  %pn = graph.sub %p, %stp : {a}
  return %pn, %mn, %vn : {a}, {a}, {a}
}}"""
    return {
        "pointwise_chain": tilefuse.parse(chain),
        "softmax": tilefuse.parse(softmax),
        "layer_norm_fwd_bwd": tilefuse.parse(layer_norm).value_and_grad(wrt=(0, 1, 2)),
        "cross_entropy_fwd_bwd": tilefuse.parse(ce).value_and_grad(wrt=(0,)),
        "adamw_update": tilefuse.parse(adamw),
    }


# --- training workloads ----------------------------------------------------

def export_training(outdir, name, cfg, target, lr=1e-4, weight_decay=0.01):
    params = torch_models.gpt2_init_numpy(cfg, seed=0)
    batch = torch_models.gpt2_batch_numpy(cfg, seed=1)
    loss = lambda p, b, s: W.gpt2_mini_loss(p, b, s, cfg, True)  # noqa: E731
    g = tilefuse.train_step_graph(loss, params, batch,
                                  tilefuse.optim.AdamW(lr=lr, weight_decay=weight_decay))
    path = os.path.join(outdir, "train", name + ".tfa")
    g.export(path, target)
    return {"name": name, "artifact": f"train/{name}.tfa", "config": cfg, "lr": lr,
            "weight_decay": weight_decay, "param_names": sorted(params), "init_seed": 0,
            "batch_seed": 1}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument("--no-gpt2-small", action="store_true",
                    help="skip GPT-2 small (its compile takes the longest)")
    ap.add_argument("--target", help="another target than cuda:<arch> (cpu: the same "
                    "folder for this machine, which is how the scripts themselves are tested)")
    args = ap.parse_args()
    target = args.target or "cuda:" + args.arch
    for sub in ("corpus", "kernels", "train"):
        os.makedirs(os.path.join(args.out, sub), exist_ok=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE,
                            capture_output=True, text=True).stdout.strip() or "unknown"
    manifest = {"commit": commit, "target": target,
                "created": datetime.datetime.now(datetime.timezone.utc).strftime(
                    "%Y-%m-%dT%H:%M:%SZ"),
                "corpus": [], "kernels": [], "training": []}
    seen = set()
    for name, graph, inputs, rtol, atol in corpus():
        start = time.time()
        manifest["corpus"].append(export_case(args.out, name, graph, inputs, target, rtol, atol))
        seen |= step_kinds(graph, target)
        log(f"corpus {name}: {time.time() - start:.1f} s")
    if REQUIRED_STEPS - seen:
        sys.exit(f"prepare: the corpus has no {sorted(REQUIRED_STEPS - seen)} step for {target}")
    for name, graph in kernel_graphs().items():
        start = time.time()
        graph.export(os.path.join(args.out, "kernels", name + ".tfa"), target)
        manifest["kernels"].append({"name": name, "artifact": f"kernels/{name}.tfa"})
        log(f"kernel {name}: {time.time() - start:.1f} s")
    mini = torch_models.gpt2_config(dropout=0.0)
    runs = [("gpt2_mini", mini)]
    if not args.no_gpt2_small:
        runs.append(("gpt2_small", torch_models.gpt2_small_config()))
    for name, cfg in runs:
        start = time.time()
        manifest["training"].append(export_training(args.out, name, cfg, target))
        log(f"training {name}: {time.time() - start:.1f} s")
    with open(os.path.join(args.out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    total = sum(os.path.getsize(os.path.join(d, n)) for d, _, names in os.walk(args.out)
                for n in names)
    log(f"wrote {args.out}: {total / 2**20:.1f} MiB")
    if total > 50 * 2**20:
        sys.exit(f"prepare: {total / 2**20:.1f} MiB is over the 50 MiB a GPU check may carry")


if __name__ == "__main__":
    main()
