"""graph.attention, the fused attention op: F.scaled_dot_product_attention
traces to it, its CPU kernels (FlashAttention-2: online softmax forward,
backward recomputing the probabilities from the saved log-sum-exp) match
PyTorch, its gradient rule matches float64 finite differences, and the
memory plan holds no queries x keys buffer. (The interpreter runs the ops
written out, as CUDA fusion does: passes/ExpandAttention.cpp; PyTorch in
float64 is the independent reference for the kernels.)

Tolerances: compiled f32 against PyTorch in float64,
max|got - want| / max|want| <= 1e-5 for outputs and gradients (the kernels
accumulate in f32 over blocks; observed ~1e-6). The interpreter (float64)
against finite differences: test_autodiff's bounds.
"""
import numpy as np
import pytest
import torch

import tilefuse
import tilefuse.functional as F
from tilefuse._tracing import Tensor
from test_autodiff import check_gradients

RTOL = 1e-5

# (B, H, Hkv, L, S, E, Ev, causal, mask): odd sizes (no multiple of a
# block), head sizes 40/80/128, one query row, grouped-query heads, value
# size != head size, causal with L != S (aligned top-left, as PyTorch),
# masks broadcast over batch or heads, rows with every key masked.
CASES = [
    (1, 2, 2, 37, 53, 40, 40, False, None),
    (2, 3, 3, 70, 70, 80, 80, True, None),
    (1, 2, 2, 1, 33, 128, 128, False, None),
    (1, 6, 2, 45, 45, 64, 32, True, None),
    (2, 2, 2, 29, 41, 16, 16, True, None),
    (2, 2, 2, 41, 29, 16, 16, True, None),
    (2, 2, 2, 19, 23, 8, 8, False, "bool rows masked"),
    (2, 4, 4, 17, 17, 8, 8, False, "float [B,1,L,S]"),
    (1, 3, 3, 13, 300, 24, 24, False, "bool [L,S]"),
    (1, 2, 2, 333, 333, 64, 64, True, None),
]


def _ids(case):
    b, h, hk, l, s, e, ev, causal, mask = case
    return f"B{b}-H{h}/{hk}-L{l}-S{s}-E{e}/{ev}" + ("-causal" if causal else "") + \
        (f"-{mask}" if mask else "")


def _inputs(case, seed=0):
    b, h, hk, l, s, e, ev, causal, mask = case
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((b, h, l, e)).astype(np.float32)
    k = rng.standard_normal((b, hk, s, e)).astype(np.float32)
    v = rng.standard_normal((b, hk, s, ev)).astype(np.float32)
    m = None
    if mask == "bool rows masked":
        m = rng.random((b, h, l, s)) > 0.3
        m[:, :, 3] = False            # every key of query row 3 masked
        m[1, 0, 7] = False
    elif mask == "float [B,1,L,S]":
        m = (rng.standard_normal((b, 1, l, s)) * 2).astype(np.float32)
        m[0, 0, :, 5] = -np.inf
    elif mask == "bool [L,S]":
        m = rng.random((l, s)) > 0.5
        m[:, 0] = True
    return q, k, v, m


def _torch_reference(q, k, v, m, causal, dout):
    """PyTorch's SDPA in float64: (out, dq, dk, dv) for the cotangent dout.
    Rows with every key masked: out 0 and no gradient, as PyTorch's CPU
    flash kernel gives (its math kernel gives NaN)."""
    tq, tk, tv = (torch.tensor(x, dtype=torch.float64, requires_grad=True) for x in (q, k, v))
    heads, kv = q.shape[1], k.shape[1]
    kx = tk.repeat_interleave(heads // kv, 1)
    vx = tv.repeat_interleave(heads // kv, 1)
    s = tq @ kx.transpose(-2, -1) / np.sqrt(q.shape[-1])
    if m is not None:
        tm = torch.tensor(m)
        s = s.masked_fill(~tm, float("-inf")) if tm.dtype == torch.bool else s + tm.double()
    if causal:
        keep = torch.ones(q.shape[2], k.shape[2], dtype=torch.bool).tril()
        s = s.masked_fill(~keep, float("-inf"))
    dead = torch.isinf(s).all(-1, keepdim=True)
    p = torch.where(dead, 0.0, torch.softmax(s.masked_fill(dead, 0.0), -1))
    out = p @ vx
    out.backward(torch.tensor(dout, dtype=torch.float64))
    return out.detach().numpy(), tq.grad.numpy(), tk.grad.numpy(), tv.grad.numpy()


def max_rel(got, want):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape, (got.shape, want.shape)
    return float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-30))


def _sdpa(causal, mask):
    def fn(q, k, v, *m):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=m[0] if m else None,
                                              is_causal=causal)
    return fn


@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_forward_and_gradients_match_pytorch(case):
    q, k, v, m = _inputs(case)
    causal = case[7]
    args = [q, k, v] + ([m] if m is not None else [])
    fn = _sdpa(causal, m)
    graph = tilefuse.trace(fn, *args)
    assert "graph.attention" in graph.mlir(), "SDPA did not become the fused op"
    dout = np.random.default_rng(1).standard_normal(
        q.shape[:-1] + (v.shape[-1],)).astype(np.float32)
    want, dq, dk, dv = _torch_reference(q, k, v, m, causal, dout)
    got = tilefuse.compile(fn, *args, device="cpu")(*args)
    assert max_rel(got, want) <= RTOL, f"{_ids(case)} forward: {max_rel(got, want):.2e}"

    def loss(q, k, v, *m):
        return (fn(q, k, v, *m) * dout).sum()

    step = tilefuse.trace(loss, *args).value_and_grad(wrt=(0, 1, 2)).compile("cpu")
    grads = step(*args)[1:]
    for name, g, w in zip(("dq", "dk", "dv"), grads, (dq, dk, dv)):
        err = max_rel(g, w)
        assert err <= RTOL, f"{_ids(case)} {name}: max rel error {err:.2e}"


def _op(scale, causal):
    """graph.attention itself (the tracer's entry), in any float type:
    F.scaled_dot_product_attention writes f64 attention out instead."""
    def fn(q, k, v, *m):
        out, _ = q._tracer.attention(q._id, k._id, v._id, m[0]._id if m else -1, scale, causal)
        return Tensor(q._tracer, out)
    return fn


@pytest.mark.parametrize("causal,mask", [(False, None), (True, None), (False, "bool"),
                                         (True, "float")])
def test_gradient_rule_matches_finite_differences(rng, causal, mask):
    """graph.attention_grad (the VJP rule) against fourth-order central
    differences of graph.attention, both as the interpreter runs them in
    float64 (written out: passes/ExpandAttention.cpp), with grouped heads
    and a value size unlike the head size."""
    q, k, v = rng.standard_normal((1, 4, 5, 3)), rng.standard_normal((1, 2, 6, 3)), \
        rng.standard_normal((1, 2, 6, 2))
    args = [q, k, v]
    if mask == "bool":
        m = rng.random((1, 1, 5, 6)) > 0.3
        m[..., 0] = True
        args.append(m)
    elif mask == "float":
        args.append(rng.standard_normal((1, 4, 5, 6)))
    check_gradients(f"attention causal={causal} mask={mask}", _op(0.45, causal), args, rng,
                    wrt=[0, 1, 2])


def test_memory_plan_holds_no_scores_buffer():
    """Forward + backward at T = 1024: the planned peak stays within 4x the
    bytes of q, k, v and dO (the written-out attention holds B*H*T*T
    scores, probabilities and their gradients: 48 MiB each here)."""
    b, h, t, d = 1, 4, 1024, 64
    rng = np.random.default_rng(0)
    q, k, v, w = (rng.standard_normal((b, h, t, d)).astype(np.float32) for _ in range(4))

    def loss(q, k, v, w):
        return (F.scaled_dot_product_attention(q, k, v, is_causal=True) * w).sum()

    graph = tilefuse.trace(loss, q, k, v, w).value_and_grad(wrt=(0, 1, 2))
    plan = graph.memory_plan("cpu")
    qkvdo = 4 * q.nbytes
    assert plan.peak <= 4 * qkvdo, f"planned peak {plan.peak} > 4 x {qkvdo}"
    step = graph.compile("cpu")
    rows = {r["name"]: r for r in step.report()}
    assert "attention" in rows and "attention_grad" in rows, list(rows)
    for name in ("attention", "attention_grad"):  # named after the user's line
        assert any("test_attention.py" in line for line in rows[name]["source"]), rows[name]


def test_a_learned_mask_gets_its_gradient(rng):
    """A float mask that a differentiated argument reaches (a learned bias):
    that attention is differentiated written out (its mask's cotangent is
    the L x S score gradient), matching PyTorch in float64 for q and the
    bias."""
    q, k, v = (rng.standard_normal((1, 2, 5, 3)).astype(np.float32) for _ in range(3))
    bias = rng.standard_normal((1, 2, 5, 5)).astype(np.float32)

    def loss(q, k, v, bias):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias * 2.0).sum()

    _, dq, dbias = tilefuse.trace(loss, q, k, v, bias).value_and_grad(wrt=(0, 3)).compile(
        "cpu")(q, k, v, bias)
    tq, tbias = (torch.tensor(x, dtype=torch.float64, requires_grad=True) for x in (q, bias))
    torch.nn.functional.scaled_dot_product_attention(
        tq, torch.tensor(k, dtype=torch.float64), torch.tensor(v, dtype=torch.float64),
        attn_mask=tbias * 2.0).sum().backward()
    assert max_rel(dq, tq.grad.numpy()) <= RTOL, max_rel(dq, tq.grad.numpy())
    assert max_rel(dbias, tbias.grad.numpy()) <= RTOL, max_rel(dbias, tbias.grad.numpy())


def _wider_heads(case, e, ev):
    return case[:5] + (e, ev) + case[7:]


# Heads past the CUDA kernels' 256: grouped heads, causal with L > S, fully
# masked rows, a broadcast float mask.
WIDE_CASES = [_wider_heads(CASES[3], 264, 40), _wider_heads(CASES[5], 288, 288),
              _wider_heads(CASES[6], 40, 320), _wider_heads(CASES[7], 264, 264)]


@pytest.mark.parametrize("case", WIDE_CASES, ids=_ids)
def test_heads_past_the_cuda_kernels_are_written_out_for_cuda(case):
    """The CUDA attention kernels take head and value dimensions up to 256:
    fusion for CUDA writes wider graph.attention and graph.attention_grad out
    again (matmul, exp, reductions). The written-out forward and gradients,
    run by the interpreter, match PyTorch: grouped heads, causal with L > S,
    fully masked rows (0, no gradient), a broadcast float mask."""
    q, k, v, m = _inputs(case)
    causal = case[7]
    args = [q, k, v] + ([m] if m is not None else [])
    fn = _sdpa(causal, m)
    dout = np.random.default_rng(1).standard_normal(
        q.shape[:-1] + (v.shape[-1],)).astype(np.float32)
    want, dq, dk, dv = _torch_reference(q, k, v, m, causal, dout)

    def loss(q, k, v, *m):
        return (fn(q, k, v, *m) * dout).sum(), fn(q, k, v, *m)

    fused = tilefuse.trace(loss, *args).value_and_grad(wrt=(0, 1, 2)).fuse("cuda:sm_90")
    assert not any("attention" in r["name"] for r in fused.report())
    _, out, *grads = fused.interpret(*args)
    assert max_rel(out, want) <= RTOL, f"{_ids(case)} forward: {max_rel(out, want):.2e}"
    for name, g, w in zip(("dq", "dk", "dv"), grads, (dq, dk, dv)):
        assert max_rel(g, w) <= RTOL, f"{_ids(case)} {name}: {max_rel(g, w):.2e}"


def _written_out(p, also_probs):
    """gpt2_mini's attention: matmul, scale, causal select against -1e9,
    softmax, F.dropout, matmul. Returning the dropped probabilities too keeps
    the chain written out (they are used twice)."""
    def fn(q, k, v, seed):
        t = q.shape[-2]
        scores = (q @ k.transpose(-2, -1)) * (1.0 / np.sqrt(q.shape[-1]))
        scores = tilefuse.where(np.tril(np.ones((t, t), dtype=bool)), scores, -1e9)
        probs = F.dropout(F.softmax(scores, dim=-1), p, True, seed=seed)
        out = probs @ v
        return (out, probs) if also_probs else out
    return fn


def test_dropout_inside_the_fused_kernels_drops_what_the_written_out_form_drops():
    """The fused op draws graph.dropout's Philox bits element by element: its
    output and gradients equal the written-out chain's (same seed, same
    stream) within f32 rounding, and dropout is active."""
    rng = np.random.default_rng(3)
    q, k, v, w = (rng.standard_normal((2, 3, 37, 16)).astype(np.float32) for _ in range(4))
    seed, p = np.int64(11), 0.25
    fused, written = _written_out(p, False), _written_out(p, True)
    lowered = tilefuse.trace(fused, q, k, v, seed)._graph.primitive().mlir()
    assert "graph.attention" in lowered and "dropout_p = 2.5" in lowered, lowered
    assert "graph.attention" not in tilefuse.trace(written, q, k, v, seed)._graph.primitive().mlir()
    got = tilefuse.compile(fused, q, k, v, seed, device="cpu")(q, k, v, seed)
    want = tilefuse.compile(written, q, k, v, seed, device="cpu")(q, k, v, seed)[0]
    assert max_rel(got, want) <= RTOL, f"forward: {max_rel(got, want):.2e}"
    undropped = tilefuse.compile(_written_out(0.0, False), q, k, v, seed, device="cpu")(
        q, k, v, seed)
    assert max_rel(got, undropped) > 1e-2, "dropout dropped nothing"

    def loss_of(fn):
        def loss(q, k, v, w, seed):
            out = fn(q, k, v, seed)
            return ((out[0] if isinstance(out, tuple) else out) * w).sum(), out
        return loss

    def grads(fn):
        graph = tilefuse.trace(loss_of(fn), q, k, v, w, seed).value_and_grad(wrt=(0, 1, 2))
        results = graph.compile("cpu")(q, k, v, w, seed)
        return results[-3:]

    for name, g, want_g in zip(("dq", "dk", "dv"), grads(fused), grads(written)):
        assert max_rel(g, want_g) <= RTOL, f"{name}: {max_rel(g, want_g):.2e}"


def test_gpt2_mini_trains_on_the_fused_attention_kernels():
    """gpt2_mini's training step (dropout 0.1 on the attention probabilities
    included): every attention runs in the fused kernels, forward and
    backward (test_workloads checks its losses against the float64
    reference)."""
    from tilefuse import workloads as W
    cfg = W.gpt2_mini_config(n_layer=2, d_model=32, n_head=4, seq=16, vocab=64, batch=2)
    params = W.gpt2_mini_init(cfg, seed=0)
    batch = W.gpt2_mini_batch(cfg, seed=2)
    step = tilefuse.compile_train_step(lambda p, b, s: W.gpt2_mini_loss(p, b, s, cfg), params,
                                       batch, optimizer=tilefuse.optim.AdamW(lr=1e-3),
                                       device="cpu")
    names = [r["name"] for r in step.report()]
    assert names.count("attention") == 2 and names.count("attention_grad") == 2, names
    losses = [float(step(batch)) for _ in range(3)]
    assert all(np.isfinite(losses)) and losses[-1] < losses[0], losses


def test_fused_attention_can_be_switched_off(monkeypatch):
    """TILEFUSE_FUSED_ATTENTION=0 keeps attention written out, in the traced
    API and in the recognition pass, with the same values."""
    rng = np.random.default_rng(5)
    q, k, v = (rng.standard_normal((1, 2, 9, 8)).astype(np.float32) for _ in range(3))
    seed = np.int64(3)
    sdpa = _sdpa(True, None)
    written = _written_out(0.2, False)
    on = [tilefuse.compile(sdpa, q, k, v, device="cpu"),
          tilefuse.compile(written, q, k, v, seed, device="cpu")]
    monkeypatch.setenv("TILEFUSE_FUSED_ATTENTION", "0")
    off = [tilefuse.compile(sdpa, q, k, v, device="cpu"),
           tilefuse.compile(written, q, k, v, seed, device="cpu")]
    for fn in off:
        assert not any("attention" in r["name"] for r in fn.report())
    for fn in on:
        assert any(r["name"] == "attention" for r in fn.report())
    assert max_rel(off[0](q, k, v), on[0](q, k, v)) <= RTOL
    assert max_rel(off[1](q, k, v, seed), on[1](q, k, v, seed)) <= RTOL
