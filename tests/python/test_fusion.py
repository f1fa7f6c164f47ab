"""The fusion pass (Graph.fuse) against the unfused graph.

Graph.fuse(target) lowers the entry function to primitive ops and groups
them into graph.fusion regions (kernels). The reference interpreter runs a
fused region op by op, so a fused graph must give BIT-IDENTICAL results to
the unfused one: same number of results, same dtypes and shapes, same bytes
(NaN payloads and signed zeros included). Any difference, crash or verifier
error is a fusion bug; nothing here has a tolerance.

Covered:
* every workload of tilefuse.workloads (gpt2_mini at the WORKLOADS.md CPU
  sizes, mlp_mnist batch 32, deepfm batch 240): the forward loss, the
  value_and_grad over all parameters, and the AdamW training-step graph;
* each op family on small cases (elementwise chains, broadcasts, reductions
  with keepdim over every dim subset, argmax, layout ops in the middle of
  chains, matmul chains, gather/scatter_add, softmax/layer_norm/losses
  forward and backward, dropout), on the cpu and cuda:sm_90 targets;
* report(): kernel counts the pass promises (softmax, layer_norm, cross
  entropy, the AdamW update), op coverage (every primitive op kind of the
  unfused graph is computed by some kernel, expensive ops exactly once) and
  structural invariants of the fused IR;
* targets: cuda:sm_90 puts a bias add into the matmul ('matmul' kernels),
  unknown targets raise CompileError.
"""
import os
import re
import subprocess
import sys
import textwrap
from collections import Counter

import numpy as np
import pytest

import tilefuse
import tilefuse.functional as F
from tilefuse import _pytree, optim
from tilefuse import workloads as W

from fusion_checks import (assert_compiled_close, assert_bit_identical, check_coverage, check_structure,
                           dead_kernel_results, entry_body, flat, lowered_ops, ops_with_sizes)

TARGETS = ["cpu", "cuda:sm_90"]


# ---------------------------------------------------------------------------
# Harness
# ---------------------------------------------------------------------------

def check_fused(graph, args, target="cpu", what=""):
    """Fuses `graph`, checks the fused IR's structure and that it computes
    bit-identical results; returns (fused graph, results)."""
    want = graph.interpret(*args)
    fused = graph.fuse(target)
    text = fused.mlir()
    try:
        check_structure(fused)
        got = fused.interpret(*args)
        assert_bit_identical(got, want, f"{what} [{target}]")
    except AssertionError as e:
        raise AssertionError(f"{e}\n--- fused IR ---\n{text}") from None
    return fused, got


def _rand(rng, *shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


# ---------------------------------------------------------------------------
# Workloads: forward loss, value_and_grad over all params, AdamW train step
# ---------------------------------------------------------------------------

def _workload(name):
    cfg = {"gpt2_mini": W.gpt2_mini_config(),
           "mlp_mnist": W.mlp_mnist_config(batch=32),
           "deepfm": W.deepfm_config(batch=240)}[name]
    params = getattr(W, name + "_init")(cfg, seed=0)
    rng = np.random.default_rng(3)
    # Biases and LayerNorm scales are 0/1 at init: jitter them.
    params = {k: (v + rng.normal(0, 0.05, v.shape).astype(v.dtype)) if v.ndim == 1 else v
              for k, v in params.items()}
    batch = getattr(W, name + "_batch")(cfg, seed=1)
    loss = getattr(W, name + "_loss")
    return cfg, params, batch, loss


WORKLOAD_NAMES = ["gpt2_mini", "mlp_mnist", "deepfm"]
SEED = np.int64(-0x0123456789ABCDEF)


@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("name", WORKLOAD_NAMES)
def test_workload_forward(name, training):
    cfg, params, batch, loss = _workload(name)
    fn = lambda p, b, s: loss(p, b, s, cfg, training=training)
    g = tilefuse.trace(fn, params, batch, SEED)
    fused, got = check_fused(g, (params, batch, SEED), what=f"{name} loss")
    assert np.isfinite(got)
    check_coverage(fused, lowered_ops(g), name)


@pytest.mark.parametrize("name", WORKLOAD_NAMES)
def test_workload_value_and_grad(name):
    cfg, params, batch, loss = _workload(name)
    fn = lambda p, b, s: loss(p, b, s, cfg)
    g = tilefuse.trace(fn, params, batch, SEED)
    vg = g.value_and_grad(list(range(len(params))))
    fused, got = check_fused(vg, (params, batch, SEED), what=f"{name} value_and_grad")
    assert len(got) == 1 + len(params)
    check_coverage(fused, lowered_ops(vg), name)


@pytest.mark.parametrize("name", WORKLOAD_NAMES)
def test_workload_value_and_grad_cuda(name):
    """The cuda target moves bias adds into the GEMMs: same values."""
    cfg, params, batch, loss = _workload(name)
    fn = lambda p, b, s: loss(p, b, s, cfg)
    vg = tilefuse.trace(fn, params, batch, SEED).value_and_grad(list(range(len(params))))
    fused, _ = check_fused(vg, (params, batch, SEED), target="cuda:sm_90",
                           what=f"{name} value_and_grad")
    check_coverage(fused, lowered_ops(vg, "cuda:sm_90"), name)


def _train_step_args(params, batch, uses_seed, rng, t=3, lr=1e-3):
    leaves, _ = _pytree.flatten(params)
    n = len(leaves)
    # Non-zero optimizer state (m anything, v >= 0) so every term matters.
    state = [rng.normal(0, 1e-3, p.shape).astype(p.dtype) for p in leaves]
    state += [np.abs(rng.normal(0, 1e-5, p.shape)).astype(p.dtype) for p in leaves]
    args = list(leaves) + state + flat(batch)
    if uses_seed:
        args.append(SEED)
    return args + [np.int64(t), np.float64(lr)], n


@pytest.mark.parametrize("name", WORKLOAD_NAMES)
def test_workload_train_step(name):
    cfg, params, batch, loss = _workload(name)
    fn = lambda p, b, s: loss(p, b, s, cfg)
    step = tilefuse.compile_train_step(fn, params, batch,
                                       optim.AdamW(lr=1e-3, clip_grad_norm=1.0))
    g = step.graph
    args, n = _train_step_args(params, batch, True, np.random.default_rng(5))
    fused, got = check_fused(g, args, what=f"{name} AdamW train step")
    assert len(got) == 1 + 3 * n
    check_coverage(fused, lowered_ops(g), name)


def test_train_step_matches_compiled_step_object():
    """The train-step graph's argument order (params, state, batch, seed,
    step, lr) is the one TrainStep uses: the fused graph, interpreted,
    reproduces a real (compiled) step of a TrainStep within the compiled
    tolerances (a wrong order would be off by far more)."""
    cfg, params, batch, loss = _workload("mlp_mnist")
    fn = lambda p, b, s: loss(p, b, s, cfg)
    step = tilefuse.compile_train_step(fn, params, batch, optim.Adam(lr=1e-2), seed=11)
    leaves, _ = _pytree.flatten(params)
    zeros = [np.zeros_like(p) for p in leaves] * 2
    args = list(leaves) + zeros + flat(batch) + [np.int64(11), np.int64(1), np.float64(1e-2)]
    fused = step.graph.fuse()
    out = fused.interpret(*args)
    loss0 = step(batch)
    assert_compiled_close([np.float32(loss0)], [out[0]], "loss")
    names = sorted(step.params())
    assert_compiled_close([step.params()[k] for k in names], list(out[1:1 + len(leaves)]),
                          "parameters after one step")


# ---------------------------------------------------------------------------
# Op families, small cases (cpu and cuda)
# ---------------------------------------------------------------------------

def _case_elementwise_chain(rng):
    x, y = _rand(rng, 6, 7), _rand(rng, 6, 7)

    def fn(x, y):
        a = (x * y + 1.0).tanh()
        b = (a.abs() + 1).log() - y.sigmoid()
        c = b.maximum(x).minimum(y * 2) / (y.abs() + 0.5)
        d = c.erf() + F.relu(x) + F.silu(y) + F.gelu(a) + F.gelu(b, "tanh")
        return (d.exp().sqrt() + (x * x + 1).rsqrt()) ** 2, -d
    return fn, (x, y)


def _case_concat_of_whole_blocks(rng):
    # Attention's q, k, v merged back to [B, T, H*D] and concatenated, then
    # split again (its gradient adds three zero-padded concats): each input
    # spans whole 64-lane blocks on the CPU (concatOfWholeBlocks).
    q, k, v = (_rand(rng, 2, 4, 3, 32) for _ in range(3))

    def fn(q, k, v):
        merge = lambda t: t.transpose(1, 2).reshape(2, 3, 128)  # noqa: E731
        qkv = tilefuse.cat([merge(q), merge(k).exp(), merge(v) * 2.0], 2)
        a, b, c = tilefuse.split(qkv, 128, 2)
        return qkv, (a * b + c).tanh()
    return fn, (q, k, v)


def _case_column_results_stored_by_the_walk(rng):
    # A column kernel's full-size results that read no reduction are stored
    # by its one walk (gelu's backward beside its bias gradient), on rows
    # that are no whole blocks; and the shapes of the fuzzer's failing graph
    # (lanes along a kept unit dimension, a reduction in the middle and
    # keepdim results that squeeze to the kept shape).
    x, b, g = _rand(rng, 37, 70), _rand(rng, 70), _rand(rng, 37, 70)
    y = _rand(rng, 1, 6, 4, 1)

    def fn(x, b, g, y):
        h = F.gelu(x + b, "tanh")
        d = y - y.amax(2, keepdim=True)
        e = d.exp()
        return h, (h * g).sum(0), -h, d, e, e.sum(2, keepdim=True).log()
    return fn, (x, b, g, y)


def _case_broadcasts(rng):
    x, r, c, s = _rand(rng, 4, 5, 6), _rand(rng, 6), _rand(rng, 5, 1), _rand(rng)

    def fn(x, r, c, s):
        a = x * r + c                    # [4,5,6] with [6] and [5,1]
        b = a - s                        # 0-d
        e = r.expand(5, 6).exp() + c     # explicit broadcast_to
        return b.tanh() * e, (c + r).sigmoid()
    return fn, (x, r, c, s)


def _case_comparisons_where(rng):
    x, y = _rand(rng, 5, 8), _rand(rng, 8)

    def fn(x, y):
        a = tilefuse.where(x > y, x.exp(), y.tanh())
        b = tilefuse.where(x <= 0.1, 0.0, a)
        c = (x == y).float() + (x != 0).float() + (x >= y).to(np.float32) + (x < 0).float()
        return b * c, x.masked_fill(x < -0.5, -1e9)
    return fn, (x, y)


def _case_casts(rng):
    x = _rand(rng, 4, 6)

    def fn(x):
        h = x.to(np.float16).to(np.float32) + x.to(np.float64).exp().to(np.float32)
        i = (x * 10).to(np.int32).to(np.float32)
        b = x.to(tilefuse.bfloat16).float()
        return h * i + b
    return fn, (x,)


def _reductions_fn(x):
    outs = []
    for dims in [0, 1, 2, [0, 1], [1, 2], [0, 2], [0, 1, 2], -1]:
        for keepdim in (False, True):
            e = (x * 0.5).exp()
            outs.append(e.sum(dims, keepdim) + 1)
            outs.append(x.amax(dims, keepdim).tanh())
            outs.append(x.amin(dims, keepdim) * 2)
            outs.append((e.mean(dims, keepdim) - 1).abs())
    return outs


def _case_reductions(rng):
    return _reductions_fn, (_rand(rng, 3, 4, 5),)


def _case_reduction_epilogues(rng):
    x = _rand(rng, 6, 9)

    def fn(x):
        m = x.mean(1, keepdim=True)
        centred = x - m                           # row result read across the row
        col = x.sum(0, keepdim=True)              # other dims
        full = x.sum()                            # full reduction, read back
        y = centred * col / (full + 100.0)
        z = (y.amax(0) + y.amin(1).sum()).exp()     # reduction of a reduction's epilogue
        return y, z, x.sum([0, 1], keepdim=True) * x
    return fn, (x,)


def _case_argmax(rng):
    x = _rand(rng, 5, 6, 7)

    def fn(x):
        e = (x * 2).tanh()
        a0, a1 = e.argmax(0), e.argmax(1, keepdim=True)
        a2 = e.argmax(-1)
        return a0, a1, a2, a2.float() + e.sum(-1), (x + a1.float()).exp()
    return fn, (x,)


def _case_layout_in_chains(rng):
    x, y = _rand(rng, 4, 6, 8), _rand(rng, 8, 6)

    def fn(x, y):
        a = x.exp()
        b = a.permute(2, 0, 1).tanh()            # [8, 4, 6]
        c = b[:, 1:3, ::2] + 1                    # slice in the middle
        d = tilefuse.cat([c, c * 2, (b[:, :2, :3] - 1)], dim=1)   # [8, 6, 3]
        e = d.reshape(8, 18).sigmoid().reshape(2, 4, 18)
        f = e.transpose(0, 1).flatten(1) * 3     # [4, 36]
        g = (y.T.unsqueeze(0) + a).squeeze(0).sum(-1)
        h = tilefuse.stack([a[0], a[1].neg()], dim=2).sum(2)
        return f, g, h, x[..., 2], x[1, None, :, 3:]
    return fn, (x, y)


def _case_matmul_chains(rng):
    x, w1, w2, b = _rand(rng, 2, 5, 8), _rand(rng, 8, 16), _rand(rng, 16, 4), _rand(rng, 4)

    def fn(x, w1, w2, b):
        h = F.relu(x @ w1 + 0.1)
        h = (h @ w2 + b).tanh()
        s = h @ h.transpose(1, 2)                # batched, [2, 5, 5]
        v = x[0] @ w1[:, 0]                      # matrix-vector
        return F.softmax(s, -1) @ h, v.exp(), (x.sum(1) @ w1).amax(-1)
    return fn, (x, w1, w2, b)


def _case_linear_bias_relu(rng):
    x, w, b, w2 = _rand(rng, 7, 12), _rand(rng, 10, 12), _rand(rng, 10), _rand(rng, 3, 10)

    def fn(x, w, b, w2):
        h = F.relu(F.linear(x, w, b))
        return F.linear(h, w2), (F.linear(x, w, b).maximum(0.0) + 1).log()
    return fn, (x, w, b, w2)


def _case_embedding(rng):
    table = _rand(rng, 11, 6)
    ids = rng.integers(0, 11, size=(4, 3)).astype(np.int64)

    def fn(table, ids):
        e = F.embedding(ids, table)              # [4, 3, 6]
        return (e * 2).sum(1).tanh(), table[ids[:, 0]] + 1
    return fn, (table, ids)


def _case_composites(rng):
    x, g, b = _rand(rng, 4, 5, 16), _rand(rng, 16), _rand(rng, 16)
    t = rng.integers(0, 16, size=(4, 5)).astype(np.int64)
    t[0, 0] = -100

    def fn(x, g, b, t):
        return (F.softmax(x, -1), F.softmax(x, 1), F.log_softmax(x, 0),
                F.layer_norm(x, 16, g, b), F.layer_norm(x, (5, 16), x[0] * 0 + 1, x[1]),
                F.cross_entropy(x.reshape(-1, 16), t.reshape(-1)),
                F.nll_loss(F.log_softmax(x, -1).reshape(-1, 16), t.reshape(-1)),
                F.mse_loss(x, x.tanh()), F.binary_cross_entropy(x.sigmoid(), (x > 0).float()))
    return fn, (x, g, b, t)


def _case_dropout(rng):
    x = _rand(rng, 8, 16)

    def fn(x, seed):
        a = F.dropout(x.exp(), 0.3, seed=seed)
        b = F.dropout(a.sum(-1, keepdim=True) * x, 0.5, seed=seed)
        return a, b.tanh()
    return fn, (x, np.int64(1234))


def _case_float64(rng):
    x, y = _rand(rng, 5, 6, dtype=np.float64), _rand(rng, 6, 3, dtype=np.float64)

    def fn(x, y):
        return F.log_softmax(x @ y, -1).exp().sum(0), (x.sum(-1, keepdim=True) - x).max()
    return fn, (x, y)


def _case_special_values(rng):
    x = np.array([[0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45],
                  [3e38, -3e38, 1.0, -1.0, 0.5, 88.0]], np.float32)

    def fn(x):
        return (x.exp(), x.log(), x.sqrt(), x / x, x.amax(1), x.amin(0), F.softmax(x, -1),
                x.argmax(-1), x * 0.0, -x, x.abs().rsqrt())
    return fn, (x,)


def _case_outputs_passthrough(rng):
    x, y = _rand(rng, 3, 4), _rand(rng, 4, 3)

    def fn(x, y):
        a = x.exp()
        return x, a, a, y.T, x + 0.0, x.reshape(12), a.T, x[1:], tilefuse.cat([x, x], 0)
    return fn, (x, y)


def _case_diamonds(rng):
    x = _rand(rng, 6, 6)

    def fn(x):
        a = x.exp()
        b = a.tanh()
        c = a.T.sigmoid()                        # same kernel, other index
        d = b + c                                # joins b, reads c
        e = tilefuse.where(a > 1, b, d.T)        # three kernel reads
        s = e.sum(0, keepdim=True)
        return e * s + a.sum(1, keepdim=True) + d.max()
    return fn, (x,)


CASES = {k[len("_case_"):]: v for k, v in sorted(globals().items()) if k.startswith("_case_")}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_op_family(case, target, rng):
    fn, args = CASES[case](rng)
    g = tilefuse.trace(fn, *args)
    check_fused(g, args, target, what=case)


def _loss_of(fn, args, rng):
    """sum over the float outputs of fn of out * W (fixed random W)."""
    outs = flat(tilefuse.trace(fn, *args).interpret(*args))
    weights = [rng.standard_normal(o.shape).astype(o.dtype) if o.dtype.kind == "f" else None
               for o in outs]

    def loss(*xs):
        ys = fn(*xs)
        ys = list(ys) if isinstance(ys, (tuple, list)) else [ys]
        total = 0.0
        for y, w in zip(ys, weights):
            if w is not None:
                total = total + (y * w).sum()
        return total
    return loss


GRAD_CASES = sorted(CASES)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("case", GRAD_CASES)
def test_op_family_value_and_grad(case, target, rng):
    fn, args = CASES[case](rng)
    loss = _loss_of(fn, args, rng)
    wrt = [i for i, a in enumerate(args) if np.asarray(a).dtype.kind == "f"]
    vg = tilefuse.trace(loss, *args).value_and_grad(wrt)
    fused, _ = check_fused(vg, args, target, what=f"grad of {case}")
    check_coverage(fused, lowered_ops(vg, target), case)


@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("op", ["sum", "max", "min", "mean"])
def test_every_reduction_dim_subset(op, keepdim, rng):
    """Every subset of dims of a rank-4 tensor, with a prologue and an
    epilogue that reads the reduced value back at full shape when keepdim."""
    x = _rand(rng, 2, 3, 4, 5)
    subsets = [[d for d in range(4) if m >> d & 1] for m in range(1, 16)]

    def fn(x):
        outs = []
        for dims in subsets:
            r = getattr((x * 1.5).tanh(), {"max": "amax", "min": "amin"}.get(op, op))(dims, keepdim)
            outs.append(r.exp())
            if keepdim:
                outs.append(x * r - r)
        return outs
    g = tilefuse.trace(fn, x)
    check_fused(g, (x,), what=f"{op} keepdim={keepdim}")
    vg = tilefuse.trace(lambda x: sum((o * o).sum() for o in fn(x)), x).value_and_grad([0])
    check_fused(vg, (x,), what=f"grad {op} keepdim={keepdim}")


def test_parsed_primitive_graph():
    """A graph from tilefuse.parse, already in primitive ops."""
    text = textwrap.dedent("""
        func.func @f(%x: tensor<8x4xf32>, %w: tensor<4x3xf32>) -> (tensor<4x8xf32>, tensor<8x3xf32>, tensor<8xf32>) {
          %0 = graph.exp %x : tensor<8x4xf32>
          %1 = graph.transpose %0 {perm = array<i64: 1, 0>} : (tensor<8x4xf32>) -> tensor<4x8xf32>
          %2 = graph.tanh %1 : tensor<4x8xf32>
          %3 = graph.matmul %0, %w : (tensor<8x4xf32>, tensor<4x3xf32>) -> tensor<8x3xf32>
          %4 = graph.reduce_max %3 {dims = array<i64: 1>} : (tensor<8x3xf32>) -> tensor<8xf32>
          %5 = graph.reduce_sum %0 {dims = array<i64: 1>} : (tensor<8x4xf32>) -> tensor<8xf32>
          %6 = graph.add %4, %5 : tensor<8xf32>
          return %2, %3, %6 : tensor<4x8xf32>, tensor<8x3xf32>, tensor<8xf32>
        }
    """)
    g = tilefuse.parse(text)
    rng = np.random.default_rng(0)
    args = (_rand(rng, 8, 4), _rand(rng, 4, 3))
    for target in TARGETS:
        fused, _ = check_fused(g, args, target, what="parsed")
        check_coverage(fused, ops_with_sizes(entry_body(text)), "parsed")


# ---------------------------------------------------------------------------
# report(): kernel counts and kinds
# ---------------------------------------------------------------------------

def _kernels(fused):
    return [r for r in fused.report() if r["kind"] != "library"]


def test_softmax_is_one_row_kernel(rng):
    x = _rand(rng, 16, 50)
    g = tilefuse.trace(lambda x: F.softmax(x, -1), x)
    fused, _ = check_fused(g, (x,))
    rows = fused.report()
    assert len(rows) == 1, rows
    assert rows[0]["kind"] == "reduction" and rows[0]["reduced"] == (1,), rows
    assert rows[0]["domain"] == (16, 50)
    assert Counter(rows[0]["ops"]) >= Counter(["reduce_max", "exp", "reduce_sum", "div"])
    assert rows[0]["inputs"] == 1


def test_layer_norm_forward_is_one_kernel(rng):
    x, w, b = _rand(rng, 16, 64), _rand(rng, 64), _rand(rng, 64)
    g = tilefuse.trace(lambda x, w, b: F.layer_norm(x, 64, w, b), x, w, b)
    fused, _ = check_fused(g, (x, w, b))
    rows = fused.report()
    assert len(rows) == 1, rows
    assert rows[0]["kind"] == "reduction" and rows[0]["reduced"] == (1,), rows


def test_cross_entropy_forward_is_two_kernels(rng):
    x = _rand(rng, 16, 50)
    t = rng.integers(0, 50, size=16).astype(np.int64)
    g = tilefuse.trace(lambda x, t: F.cross_entropy(x, t), x, t)
    fused, _ = check_fused(g, (x, t))
    rows = fused.report()
    # The target check (select of the non-ignored targets, a gather of zero
    # rows: N elements each), then the two reductions over the logits.
    assert [r["kind"] for r in rows] == ["pointwise", "library", "reduction", "reduction"], rows
    assert rows[2]["reduced"] == (1,) and rows[3]["reduced"] == (0,), rows
    assert rows[2]["domain"] == (16, 50) and rows[0]["domain"] == (16,), rows
    check_coverage(fused, lowered_ops(g), "cross_entropy")


def test_layer_norm_backward_kernels(rng):
    """The lit-tested shape: forward, loss sum, dx, dgamma and dbeta in one
    row kernel on the CPU (the column sums folded while it walks the rows:
    x and w read once for all); on a GPU a second kernel reduces over the
    rows for the loss sum, dgamma and dbeta (as column partials)."""
    x, g_, b, w = _rand(rng, 16, 64), _rand(rng, 64), _rand(rng, 64), _rand(rng, 16, 64)
    loss = lambda x, g, b, w: (F.layer_norm(x, 64, g, b) * w).sum()
    vg = tilefuse.trace(loss, x, g_, b, w).value_and_grad([0, 1, 2])
    fused, _ = check_fused(vg, (x, g_, b, w))
    rows = fused.report()
    assert [r["reduced"] for r in rows] == [(1,)], rows
    assert rows[0]["outputs"] == 4, rows
    rows = vg.fuse("cuda:sm_90").report()
    assert [r["reduced"] for r in rows] == [(1,), (0,)], rows
    assert rows[1]["outputs"] == 3, rows


def _one_param_model(w, x):
    return F.silu(w * x).sum()


@pytest.mark.parametrize("opt", [optim.AdamW(lr=1e-2), optim.Adam(lr=1e-2, weight_decay=0.1),
                                 optim.SGD(lr=0.1, momentum=0.9, nesterov=True)],
                         ids=["adamw", "adam", "sgd_nesterov"])
def test_one_parameter_train_step_is_one_kernel(opt, rng):
    """An elementwise 1-parameter model: the loss reduction and the whole
    optimizer update (moments, bias corrections, decay, the step) are one
    kernel that writes the loss, the new parameter and the state."""
    w, x = _rand(rng, 1000), _rand(rng, 1000)
    step = tilefuse.compile_train_step(lambda p, b: _one_param_model(p["w"], b["x"]),
                                       {"w": w}, {"x": x}, opt)
    g = step.graph
    n_state = len(opt.state_names())
    state = [rng.normal(0, 0.1, 1000).astype(np.float32) for _ in range(n_state)]
    if n_state == 2:
        state[1] = np.abs(state[1])
    args = [w] + state + [x, np.int64(4), np.float64(opt.lr)]
    fused, out = check_fused(g, args, what=f"{type(opt).__name__} step")
    rows = fused.report()
    assert len(rows) == 1, rows
    assert rows[0]["kind"] in ("pointwise", "reduction"), rows
    assert rows[0]["outputs"] == 2 + n_state, rows
    check_coverage(fused, lowered_ops(g), "train step")


def test_adamw_update_is_one_kernel_when_it_reads_the_loss(rng):
    """With gradient clipping the update reads the global norm (a full
    reduction): still one kernel holds the whole update of the parameter."""
    w, x = _rand(rng, 256), _rand(rng, 256)
    step = tilefuse.compile_train_step(lambda p, b: _one_param_model(p["w"], b["x"]),
                                       {"w": w}, {"x": x},
                                       optim.AdamW(lr=1e-2, clip_grad_norm=0.5))
    g = step.graph
    args = [w, np.zeros_like(w), np.zeros_like(w), x, np.int64(1), np.float64(1e-2)]
    fused, _ = check_fused(g, args, what="clipped AdamW")
    text = fused.mlir()
    # The three updated tensors come from one kernel.
    ret = [l for l in entry_body(text, fused._graph.entry) if l.strip().startswith("return")][0]
    results = re.findall(r"%\w+(?:#\d+)?", ret)
    producers = {r.split("#")[0] for r in results[1:]}
    assert len(producers) == 1, ret
    check_coverage(fused, lowered_ops(g), "clipped AdamW")


def test_gelu_mlp_kernels_cpu_and_cuda(rng):
    x, w1, b1 = _rand(rng, 16, 32), _rand(rng, 64, 32), _rand(rng, 64)
    w2, b2 = _rand(rng, 8, 64), _rand(rng, 8)

    def mlp(x, w1, b1, w2, b2):
        return F.linear(F.gelu(F.linear(x, w1, b1), "tanh"), w2, b2)
    g = tilefuse.trace(mlp, x, w1, b1, w2, b2)
    args = (x, w1, b1, w2, b2)
    cpu, _ = check_fused(g, args, "cpu")
    assert [r["kind"] for r in cpu.report()] == ["library", "pointwise", "library", "pointwise"]
    cuda, _ = check_fused(g, args, "cuda:sm_90")
    assert [r["kind"] for r in cuda.report()] == ["matmul", "pointwise", "matmul"]
    for r in cuda.report():
        if r["kind"] == "matmul":
            assert r["ops"][0] == "matmul" and "add" in r["ops"], r


def test_cuda_relu_is_not_a_gemm_epilogue(rng):
    """cuBLASLt's ReLU epilogue turns NaN into 0; graph.maximum propagates
    NaN, so on CUDA only the bias goes into the GEMM."""
    x, w, b = _rand(rng, 9, 5), _rand(rng, 5, 7), _rand(rng, 7)
    g = tilefuse.trace(lambda x, w, b: F.relu(x @ w + b), x, w, b)
    fused, _ = check_fused(g, (x, w, b), "cuda:sm_90")
    rows = fused.report()
    assert [r["kind"] for r in rows] == ["matmul", "pointwise"], rows
    assert rows[0]["ops"] == ["matmul", "broadcast_in_dim", "add"], rows
    cpu, _ = check_fused(g, (x, w, b), "cpu")
    assert "matmul" not in [r["kind"] for r in cpu.report()]


def _export_for_cuda(g, path):
    """Writes g's artifact for cuda:sm_90 (NVRTC compiles every kernel);
    skips where this build has no NVRTC."""
    try:
        g.export(path, target="cuda:sm_90")
    except tilefuse.CompileError as e:
        if "no NVRTC" in str(e):
            pytest.skip("this build has no NVRTC (CUDA toolkit not found)")
        raise
    assert path.stat().st_size > 0


@pytest.mark.parametrize("case", ["cast_bias", "summed_biases", "f64"])
def test_cuda_programs_build_where_an_epilogue_cannot_be_a_library_one(case, rng, tmp_path):
    """Epilogues the GEMM library cannot apply (a bias computed in the
    graph, any f64 epilogue) stay in kernels, so the CUDA program builds
    (it used to be refused: "the bias of a GEMM epilogue must be a kernel
    input")."""
    x, w, b, c = _rand(rng, 9, 5), _rand(rng, 5, 7), _rand(rng, 7), _rand(rng, 7)
    if case == "cast_bias":
        args = (x, w, b.astype(np.float16))
        fn = lambda x, w, b: x @ w + b.to(tilefuse.float32)  # noqa: E731
    elif case == "summed_biases":
        args = (x, w, b, c)
        fn = lambda x, w, b, c: x @ w + (b + c)  # noqa: E731
    else:
        args = (x.astype(np.float64), w.astype(np.float64), b.astype(np.float64))
        fn = lambda x, w, b: x @ w + b  # noqa: E731
    g = tilefuse.trace(fn, *args)
    fused, _ = check_fused(g, args, "cuda:sm_90")
    assert "matmul" not in [r["kind"] for r in fused.report()], fused.report()
    _export_for_cuda(g, tmp_path / "m.tfa")


@pytest.mark.parametrize("producer", ["argument", "kernel"])
def test_cuda_bias_epilogue_reads_a_reshape_view(producer, rng, tmp_path):
    """A linear layer on a 3-D input (PyTorch's addmm of a view): the
    matmul reads a reshape of leading dimensions (a view of its operand's
    buffer, no kernel) and on CUDA takes the bias as its epilogue; the view
    stays outside the GEMM kernel, so the program builds."""
    x, w, b = _rand(rng, 4, 8, 16), _rand(rng, 16, 16), _rand(rng, 16)
    if producer == "argument":
        fn = lambda x, w, b: x.reshape(32, 16) @ w + b  # noqa: E731
    else:
        fn = lambda x, w, b: (x * 2).tanh().reshape(32, 16) @ w.T + b  # noqa: E731
    g = tilefuse.trace(fn, x, w, b)
    fused, _ = check_fused(g, (x, w, b), "cuda:sm_90")
    assert [r["kind"] for r in fused.report()][-1] == "matmul", fused.report()
    assert not any(r["ops"] == ["reshape"] for r in fused.report()), fused.report()
    _export_for_cuda(g, tmp_path / "m.tfa")
    check_fused(g, (x, w, b), "cpu")


def test_a_kernel_reads_through_a_reshape_view_in_place(rng):
    """A reshape of leading dimensions that a matmul and an elementwise op
    both read: the elementwise op reads the same elements (no remap), so it
    joins the kernel that computes the reshape's operand."""
    x, w = _rand(rng, 4, 8, 16), _rand(rng, 16, 16)

    def fn(x, w):
        r = x.exp().reshape(32, 16)
        return r @ w, r + r
    fused, _ = check_fused(tilefuse.trace(fn, x, w), (x, w), "cpu")
    assert [r["kind"] for r in fused.report()] == ["pointwise", "library"], fused.report()


@pytest.mark.parametrize("target", ["cuda", "cuda:sm_80", "cuda:sm_90", "cpu"])
def test_known_targets(target, rng):
    x, w = _rand(rng, 4, 3), _rand(rng, 3, 2)
    g = tilefuse.trace(lambda x, w: (x @ w + 1.0).tanh(), x, w)
    check_fused(g, (x, w), target)


@pytest.mark.parametrize("target", ["tpu", "", "CPU", "gpu", "cuda:", "cuda:90", "cuda:sm90",
                                    "cuda:sm_", "cuda:sm_abc", "rocm"])
def test_unknown_target_raises(target):
    g = tilefuse.trace(lambda x: x.exp(), np.ones(3, np.float32))
    with pytest.raises(tilefuse.CompileError):
        g.fuse(target)


def test_fusing_twice_raises(rng):
    x = _rand(rng, 3, 3)
    fused = tilefuse.trace(lambda x: x.exp().sum(), x).fuse()
    with pytest.raises(tilefuse.CompileError, match="already fused"):
        fused.fuse()


def test_fuse_keeps_argument_and_result_structure(rng):
    p = {"b": _rand(rng, 3), "a": _rand(rng, 2, 3)}

    def fn(p, xs):
        return {"y": (p["a"] * p["b"]).sum(-1), "z": [xs[0].exp(), xs[1]]}
    xs = [_rand(rng, 4), _rand(rng, 2)]
    g = tilefuse.trace(fn, p, xs)
    fused = g.fuse()
    got, want = fused.interpret(p, xs), g.interpret(p, xs)
    assert set(got) == {"y", "z"} and len(got["z"]) == 2
    assert_bit_identical(got, want, "pytree")
    assert fused.inputs == g.inputs and fused.outputs == g.outputs


def test_kernel_outputs_are_read_outside_the_kernel(rng):
    """A kernel writes only values something outside it reads (another
    kernel, a library call or the return). A row kernel's max and sum are
    consumed inside the kernel and must not become kernel results."""
    x = _rand(rng, 16, 50)
    for fn in (lambda x: F.softmax(x, -1), lambda x: F.log_softmax(x, -1),
               lambda x: F.layer_norm(x, 50, x[0], x[1])):
        fused, _ = check_fused(tilefuse.trace(fn, x), (x,))
        dead = dead_kernel_results(fused)
        assert not dead, (f"kernel results {dead} are never read outside their kernel "
                          f"(report: {fused.report()})\n{fused.mlir()}")


# ---------------------------------------------------------------------------
# Regressions found by the fuzzer (test_fusion_fuzz.py). Run in a child
# process: a crash there must fail one test, not end the whole run.
# ---------------------------------------------------------------------------

def _run_isolated(code, timeout=60):
    import tilefuse as tf
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [os.path.dirname(os.path.dirname(os.path.abspath(tf.__file__)))]
        + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    try:
        p = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env,
                           capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"timed out after {timeout} s:\n{textwrap.dedent(code)}") from None
    assert p.returncode == 0, (
        f"child exited with {p.returncode}"
        f"{' (signal %d)' % -p.returncode if p.returncode < 0 else ''}\n"
        f"--- code ---\n{textwrap.dedent(code)}\n--- stdout ---\n{p.stdout[-3000:]}\n"
        f"--- stderr ---\n{p.stderr[-3000:]}")
    return p.stdout


def test_regression_sibling_merge_with_a_dependent_third_kernel():
    """select(c, b, exp(b^T)) with c from kernel A and b from kernel B:
    joining select to A merges the sibling B into A, but exp(b^T) is a
    kernel that reads B and is read by select -- the merge must not create
    a cycle between kernels (it crashed with a segmentation fault)."""
    _run_isolated("""
        import numpy as np, tilefuse
        text = '''
        func.func @fn(%x: tensor<4x4xf32>, %y: tensor<4x4xf32>) -> tensor<4x4xf32> {
          %0 = graph.exp %x : tensor<4x4xf32>
          %1 = graph.tanh %y : tensor<4x4xf32>
          %2 = graph.transpose %1 {perm = array<i64: 1, 0>} : (tensor<4x4xf32>) -> tensor<4x4xf32>
          %3 = graph.exp %2 : tensor<4x4xf32>
          %4 = graph.full 1.000000e+00 : tensor<4x4xf32>
          %5 = graph.gt %0, %4 : tensor<4x4xf32>
          %6 = graph.select %5, %1, %3 : (tensor<4x4xi1>, tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
          return %6 : tensor<4x4xf32>
        }
        '''
        g = tilefuse.parse(text)
        rng = np.random.default_rng(0)
        x, y = (rng.standard_normal((4, 4)).astype(np.float32) for _ in range(2))
        for target in ("cpu", "cuda:sm_90"):
            fused = g.fuse(target)
            assert fused.interpret(x, y).tobytes() == g.interpret(x, y).tobytes()
    """)


def test_regression_sibling_merge_with_a_dependent_library_call():
    """The same merge when the third kernel is a matmul of the sibling's
    value (a traced case, and one minimized from fuzz graph seed 0 #2400):
    the kernels in the cycle are never scheduled, so the fused function was
    left with ops outside every kernel (or crashed when a recomputed view
    had been erased under them). The fused IR must be fully fused."""
    _run_isolated("""
        import sys, numpy as np, tilefuse
        sys.path.insert(0, %r)
        from fusion_checks import assert_bit_identical, check_structure
        rng = np.random.default_rng(0)
        x, y, w = (rng.standard_normal((4, 4)).astype(np.float32) for _ in range(3))

        def fn(x, y):
            b = y.tanh()
            return tilefuse.where(x.exp() > 1, b, b @ w)
        g = tilefuse.trace(fn, x, y)
        for target in ("cpu", "cuda:sm_90"):
            fused = g.fuse(target)
            check_structure(fused)
            assert_bit_identical(fused.interpret(x, y), g.interpret(x, y))

        text = '''
        func.func @f(%%a: tensor<4xf32>, %%w: tensor<4x4xf32>, %%c: tensor<4xf32>, %%s: tensor<1xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
          %%0 = graph.broadcast_in_dim %%s {dims = array<i64: 0>} : (tensor<1xf32>) -> tensor<4xf32>
          %%1 = graph.exp %%c : tensor<4xf32>
          %%2 = graph.reshape %%0 : (tensor<4xf32>) -> tensor<1x4xf32>
          %%3 = graph.matmul %%2, %%w : (tensor<1x4xf32>, tensor<4x4xf32>) -> tensor<1x4xf32>
          %%4 = graph.reshape %%3 : (tensor<1x4xf32>) -> tensor<4xf32>
          %%5 = graph.gt %%1, %%a : tensor<4xf32>
          %%6 = graph.select %%5, %%0, %%4 : (tensor<4xi1>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
          return %%6, %%0 : tensor<4xf32>, tensor<4xf32>
        }
        '''
        g = tilefuse.parse(text)
        args = [rng.standard_normal(s).astype(np.float32) for s in [(4,), (4, 4), (4,), (1,)]]
        for target in ("cpu", "cuda:sm_90"):
            fused = g.fuse(target)
            check_structure(fused)
            assert_bit_identical(fused.interpret(*args), g.interpret(*args))
    """ % os.path.dirname(os.path.abspath(__file__)))


def test_regression_recomputed_leaf_chains_are_not_exponential():
    """y = y * y, 30 times, on an input: every step is a cheap op of leaves
    that the pass recomputes; walking the chain must not take 2^30 steps
    (fuse took 6 s at 26 steps, doubling with every step)."""
    _run_isolated("""
        import time, numpy as np, tilefuse
        def fn(x):
            y = x
            for _ in range(30):
                y = y * y
            return y.exp()
        x = np.full(4, 0.999, np.float32)
        g = tilefuse.trace(fn, x)
        t = time.time()
        fused = g.fuse()
        assert time.time() - t < 5
        assert fused.interpret(x).tobytes() == g.interpret(x).tobytes()
    """, timeout=10)


# ---------------------------------------------------------------------------
# The harness itself: the structural checks must reject bad fused IR
# ---------------------------------------------------------------------------

_GOOD = """
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = graph.fusion "kernel0"(%x) {domain = array<i64: 4>, kind = "pointwise", reduced = array<i64>} : (tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%a: tensor<4xf32>):
    %1 = graph.exp %a : tensor<4xf32>
    graph.yield %1 : tensor<4xf32>
  }
  return %0 : tensor<4xf32>
}
"""

_BAD = {
    "outside every kernel": """
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = graph.exp %x : tensor<4xf32>
  return %0 : tensor<4xf32>
}
""",
    "never read outside": """
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0:2 = graph.fusion "kernel0"(%x) {domain = array<i64: 4>, kind = "pointwise", reduced = array<i64>} : (tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  ^bb0(%a: tensor<4xf32>):
    %1 = graph.exp %a : tensor<4xf32>
    %2 = graph.tanh %1 : tensor<4xf32>
    graph.yield %1, %2 : tensor<4xf32>, tensor<4xf32>
  }
  return %0#1 : tensor<4xf32>
}
""",
    "generator results": """
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %c = graph.full 2.0 : tensor<4xf32>
  %0 = graph.fusion "kernel0"(%x, %c) {domain = array<i64: 4>, kind = "pointwise", reduced = array<i64>} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%a: tensor<4xf32>, %b: tensor<4xf32>):
    %1 = graph.mul %a, %b : tensor<4xf32>
    graph.yield %1 : tensor<4xf32>
  }
  return %0 : tensor<4xf32>
}
""",
    "reduction in a pointwise kernel": """
func.func @f(%x: tensor<4xf32>) -> tensor<f32> {
  %0 = graph.fusion "kernel0"(%x) {domain = array<i64: 4>, kind = "pointwise", reduced = array<i64>} : (tensor<4xf32>) -> tensor<f32> {
  ^bb0(%a: tensor<4xf32>):
    %1 = graph.reduce_sum %a {dims = array<i64: 0>} : (tensor<4xf32>) -> tensor<f32>
    graph.yield %1 : tensor<f32>
  }
  return %0 : tensor<f32>
}
""",
}


def test_structure_checks_accept_good_ir():
    check_structure(tilefuse.parse(_GOOD))


@pytest.mark.parametrize("what", sorted(_BAD))
def test_structure_checks_reject_bad_ir(what):
    with pytest.raises(AssertionError, match=what):
        check_structure(tilefuse.parse(_BAD[what]))


def test_bit_comparison_is_strict():
    a = np.array([0.0, np.nan, 1.0], np.float32)
    assert_bit_identical([a], [a.copy()])
    for other in (np.array([-0.0, np.nan, 1.0], np.float32),          # signed zero
                  np.array([0.0, np.nan, np.nextafter(np.float32(1), 2)], np.float32),
                  a.astype(np.float64), a[:2]):
        with pytest.raises(AssertionError):
            assert_bit_identical([other], [a])
    with pytest.raises(AssertionError):
        assert_bit_identical([a, a], [a])
