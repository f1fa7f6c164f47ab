"""PyTorch's scaled dot product attention through tilefuse: the CPU SDPA
ops (`_scaled_dot_product_flash_attention_for_cpu` and its backward op)
convert with exactly PyTorch's outputs, the torch.compile backend and
from_torch train attention models as eager does, and a forward computed
on one side of a partition boundary always pairs with a backward that
reads what it saved.

Tolerances (float32): outputs, log-sum-exp and gradients
max|got - eager| / max|eager| <= 1e-5 (RTOL; the reductions run in another
order than PyTorch's kernels, observed ~1e-7); losses relative 1e-5.
"""
import pytest
import torch
import torch.nn.functional as TF

import tilefuse
from tilefuse import aten_import
from tilefuse.torch_integration import stats

RTOL = 1e-5
aten = torch.ops.aten


pytestmark = pytest.mark.usefixtures("fresh_torch_backend")


def max_rel(got, want):
    got, want = torch.as_tensor(got).double(), torch.as_tensor(want).double()
    assert got.shape == want.shape, f"shape {tuple(got.shape)} vs {tuple(want.shape)}"
    return ((got - want).abs().max() / want.abs().max().clamp_min(1e-30)).item()


def assert_converted_whole(graphs):
    assert stats.compiled == graphs and stats.partitioned == 0 and stats.eager == 0, stats
    assert not stats.unsupported, stats


# (B, H, Hkv, L, S, E, causal, mask kind)
CASES = [
    (2, 4, 4, 16, 16, 8, False, None),
    (2, 4, 4, 16, 16, 8, True, None),
    (1, 3, 3, 7, 11, 5, False, "bool"),
    (2, 2, 2, 9, 9, 16, False, "float"),
    (1, 6, 2, 12, 12, 8, True, None),        # grouped-query heads
    (2, 4, 1, 5, 13, 4, False, "bool"),      # one key/value head
]


def _inputs(case, seed):
    b, h, hk, l, s, e, causal, mask = case
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, h, l, e, generator=g)
    k = torch.randn(b, hk, s, e, generator=g)
    v = torch.randn(b, hk, s, e, generator=g)
    attn_mask = None
    if mask == "bool":  # as SDPA hands a boolean mask to the op: -inf where False
        keep = torch.rand(l, s, generator=g) > 0.3
        keep[:, 0] = True  # no row fully masked
        attn_mask = torch.zeros(l, s).masked_fill(~keep, float("-inf"))
    elif mask == "float":
        attn_mask = torch.randn(b, 1, l, s, generator=g)
    return q, k, v, causal, attn_mask


@pytest.mark.parametrize("case", CASES, ids=[str(c) for c in CASES])
def test_flash_forward_op_gives_pytorchs_output_and_logsumexp(case, seed):
    """Both outputs of the forward op, log-sum-exp included: the backward
    op that PyTorch may run reads it."""
    q, k, v, causal, mask = _inputs(case, seed)

    def fwd(q, k, v):
        return aten._scaled_dot_product_flash_attention_for_cpu(
            q, k, v, 0.0, causal, attn_mask=mask, scale=0.3)

    want = fwd(q, k, v)
    got = torch.compile(fwd, backend="tilefuse")(q, k, v)
    assert_converted_whole(1)
    for name, g_, w in zip(("output", "logsumexp"), got, want):
        assert max_rel(g_, w) <= RTOL, f"{case}: {name}: {max_rel(g_, w):.3g}"


@pytest.mark.parametrize("case", CASES, ids=[str(c) for c in CASES])
def test_flash_backward_op_gives_pytorchs_gradients(case, seed):
    q, k, v, causal, mask = _inputs(case, seed)
    out, lse = aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, causal,
                                                                attn_mask=mask)
    dout = torch.randn_like(out)

    def bwd(dout, q, k, v, out, lse):
        return aten._scaled_dot_product_flash_attention_for_cpu_backward(
            dout, q, k, v, out, lse, 0.0, causal, attn_mask=mask)

    want = bwd(dout, q, k, v, out, lse)
    got = torch.compile(bwd, backend="tilefuse")(dout, q, k, v, out, lse)
    assert_converted_whole(1)
    for name, g_, w in zip(("dq", "dk", "dv"), got, want):
        assert max_rel(g_, w) <= RTOL, f"{case}: {name}: {max_rel(g_, w):.3g}"


class Block(torch.nn.Module):
    """A transformer encoder layer (nn.MultiheadAttention inside: SDPA on
    the CPU) with a projection before it, whose gradient flows back through
    the attention's backward."""

    def __init__(self, d=16, heads=4):
        super().__init__()
        self.proj = torch.nn.Linear(d, d)
        self.layer = torch.nn.TransformerEncoderLayer(d, heads, 32, dropout=0.0,
                                                      batch_first=True)
        # A loss that depends on the input (the mean square of a layer norm's
        # output does not: its gradients would be rounding noise).
        self.register_buffer("r", torch.randn(d))

    def forward(self, x):
        return (self.layer(self.proj(x)) * self.r).square().mean()


def _grads(model, x, run=None):
    """(loss, {parameter: gradient}) of `run` (default: model) on x."""
    model.zero_grad()
    loss = (run if run is not None else model)(x)
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}


def test_backend_gradients_through_sdpa_are_eagers():
    """Every parameter before the attention gets eager's gradient (a
    decomposed forward paired with PyTorch's backward op made these 1-5x
    off)."""
    torch.manual_seed(0)
    model = Block().train()
    x = torch.randn(3, 10, 16)
    want_loss, want = _grads(model, x)
    got_loss, got = _grads(model, x, torch.compile(model, backend="tilefuse"))
    assert abs(got_loss - want_loss) <= RTOL * abs(want_loss)
    bad = {n: max_rel(got[n], want[n]) for n in want if max_rel(got[n], want[n]) > RTOL}
    assert not bad, f"gradients off: {bad}"
    assert_converted_whole(2)


@pytest.mark.parametrize("side", ["forward", "backward"])
def test_a_partition_at_sdpa_pairs_the_right_outputs(side, monkeypatch):
    """With one of the two SDPA ops left to PyTorch (no conversion), the
    other, converted, still gives or reads exactly what PyTorch's does:
    eager's gradients."""
    op = {"forward": aten._scaled_dot_product_flash_attention_for_cpu,
          "backward": aten._scaled_dot_product_flash_attention_for_cpu_backward}[side]
    monkeypatch.delitem(aten_import.CONVERSIONS, op)
    torch.manual_seed(1)
    model = Block().train()
    x = torch.randn(2, 7, 16)
    want_loss, want = _grads(model, x)
    got_loss, got = _grads(model, x, torch.compile(model, backend="tilefuse"))
    assert str(op.default) in stats.unsupported, stats
    assert abs(got_loss - want_loss) <= RTOL * abs(want_loss)
    bad = {n: max_rel(got[n], want[n]) for n in want if max_rel(got[n], want[n]) > RTOL}
    assert not bad, f"{side} left to PyTorch: gradients off: {bad}"


class CausalLM(torch.nn.Module):
    """Embedding, one causal grouped-query attention block written with
    F.scaled_dot_product_attention, LM head, cross-entropy."""

    def __init__(self, vocab=32, d=16, heads=4, kv_heads=2):
        super().__init__()
        self.heads, self.kv_heads = heads, kv_heads
        self.emb = torch.nn.Embedding(vocab, d)
        self.q = torch.nn.Linear(d, d)
        self.kv = torch.nn.Linear(d, 2 * d * kv_heads // heads)
        self.out = torch.nn.Linear(d, vocab)

    def forward(self, idx, targets):
        x = self.emb(idx)
        b, t, d = x.shape
        e = d // self.heads
        q = self.q(x).view(b, t, self.heads, e).transpose(1, 2)
        k, v = self.kv(x).view(b, t, 2, self.kv_heads, e).permute(2, 0, 3, 1, 4)
        y = TF.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        y = y.transpose(1, 2).reshape(b, t, d) + x
        return TF.cross_entropy(self.out(y).flatten(0, 1), targets.flatten())


def test_from_torch_trains_an_sdpa_model_like_eager():
    torch.manual_seed(2)
    model = CausalLM()
    twin = CausalLM()
    twin.load_state_dict(model.state_dict())
    idx = torch.randint(0, 32, (2, 9))
    targets = torch.randint(0, 32, (2, 9))
    opt = torch.optim.SGD(twin.parameters(), lr=0.1)
    step = tilefuse.from_torch(model, (idx, targets), torch.optim.SGD(model.parameters(),
                                                                      lr=0.1))
    for i in range(5):
        opt.zero_grad()
        want = twin(idx, targets)
        want.backward()
        opt.step()
        got = step(idx, targets)
        assert abs(got - want.item()) <= RTOL * abs(want.item()), (i, got, want.item())
    params = step.state_dict()
    for n, p in twin.state_dict().items():
        assert max_rel(params[n], p) <= 1e-4, n


def test_attention_with_boolean_masks_and_dropout_converts_whole():
    """F.scaled_dot_product_attention with a boolean mask trains through the
    backend like eager; with dropout (PyTorch's math path: dropout is one
    more op, its backward derived from the pieces) it converts whole."""
    torch.manual_seed(4)
    q, k, v = (torch.randn(2, 3, 6, 4, requires_grad=True) for _ in range(3))
    keep = torch.rand(6, 6) > 0.4
    keep[:, 0] = True

    def f(q, k, v):
        return TF.scaled_dot_product_attention(q, k, v, attn_mask=keep).square().sum()

    f(q, k, v).backward()
    want = [t.grad.clone() for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    torch.compile(f, backend="tilefuse")(q, k, v).backward()
    for name, g_, w in zip("qkv", (q.grad, k.grad, v.grad), want):
        assert max_rel(g_, w) <= RTOL, name
    assert_converted_whole(2)

    torch._dynamo.reset()
    stats.reset()

    def g(q, k, v):
        return TF.scaled_dot_product_attention(q, k, v, dropout_p=0.25).sum()

    torch.compile(g, backend="tilefuse")(q, k, v).backward()
    assert_converted_whole(2)


def test_from_torch_fuses_attention_with_dropout():
    """from_torch captures F.scaled_dot_product_attention with dropout as
    one op (PyTorch writes it out on the CPU, the L x S scores in memory)
    and makes it the fused op with dropout in its kernels. Its loss and
    gradients equal PyTorch's computation in float64 given tilefuse's keep
    mask (graph.random_uniform's bits for the op's seed and stream) within
    1e-5 (loss) and 1e-4 (gradients, read back as the difference of f32
    parameters before and after an SGD step with lr 1)."""
    import re

    import numpy as np

    torch.manual_seed(0)
    b, t, d, heads, p = 2, 12, 16, 2, 0.2

    class Attention(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv = torch.nn.Linear(d, 3 * d)

        def forward(self, x):
            q, k, v = (z.view(b, t, heads, d // heads).transpose(1, 2)
                       for z in self.qkv(x).split(d, -1))
            return TF.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)

    model = Attention()
    x = torch.randn(b, t, d)
    before = {n: w.detach().clone() for n, w in model.named_parameters()}
    step = tilefuse.from_torch(model, (x,), torch.optim.SGD(model.parameters(), lr=1.0),
                               loss_fn=lambda m, x: m(x).square().mean(), seed=5)
    text = step.train_step.graph.mlir()
    fused = re.search(r"graph\.attention .*dropout_p = 2\.0+e-01.*stream = (\d+)", text)
    assert fused, "SDPA with dropout did not become the fused op"
    names = [r["name"] for r in step.report()]
    assert "attention" in names and "attention_grad" in names, names
    loss = step(x)

    shape = f"tensor<{b}x{heads}x{t}x{t}xf32>"
    uniform = tilefuse._core.parse(
        f"func.func @u(%s: tensor<i64>) -> {shape} {{\n"
        f"  %0 = graph.random_uniform %s {{stream = {fused.group(1)} : i64}} : "
        f"(tensor<i64>) -> {shape}\n  return %0 : {shape}\n}}\n")
    keep = torch.from_numpy(np.asarray(uniform.interpret([np.int64(5)])[0]) >= p)
    assert 0 < keep.double().mean() < 1
    twin = {n: w.double().requires_grad_() for n, w in before.items()}
    q, k, v = (z.view(b, t, heads, d // heads).transpose(1, 2) for z in TF.linear(
        x.double(), twin["qkv.weight"], twin["qkv.bias"]).split(d, -1))
    scores = (q @ k.transpose(-2, -1)) / (d // heads) ** 0.5
    scores = scores.masked_fill(~torch.ones(t, t, dtype=torch.bool).tril(), float("-inf"))
    probs = torch.where(keep, scores.softmax(-1) / (1 - p), 0.0)
    want = (probs @ v).square().mean()
    want.backward()
    assert abs(loss - want.item()) <= RTOL * abs(want.item()), (loss, want.item())
    after = step.state_dict()
    for n, w in twin.items():
        assert max_rel(before[n] - after[n], w.grad) <= 1e-4, n


class _CausalBlock(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = torch.nn.Linear(32, 96)
        self.proj = torch.nn.Linear(32, 10)

    def forward(self, x, y):
        b, t, _ = x.shape
        q, k, v = self.qkv(x).reshape(b, t, 3, 2, 16).permute(2, 0, 3, 1, 4)
        o = TF.scaled_dot_product_attention(q, k, v, is_causal=True)
        logits = self.proj(o.transpose(1, 2).reshape(b, t, 32))
        return TF.cross_entropy(logits.reshape(-1, 10).float(), y.reshape(-1))


def test_backend_runs_sdpa_under_bf16_autocast_in_bf16(compiled_graphs):
    """Under PyTorch's CPU autocast, SDPA's bf16 ops convert to tilefuse's
    bf16 attention (q, k, v and the result bf16, the log-sum-exp f32),
    forward and backward, the graphs whole; loss and gradients follow eager
    autocast within bf16's 1e-2."""
    import copy
    torch.manual_seed(0)
    model = _CausalBlock()
    twin = copy.deepcopy(model)
    x, y = torch.randn(2, 64, 32), torch.randint(0, 10, (2, 64))
    compiled = torch.compile(model, backend="tilefuse")
    losses = []
    for run in (compiled, twin):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = run(x, y)
        loss.backward()
        losses.append(loss.item())
    assert_converted_whole(2)
    assert abs(losses[0] - losses[1]) <= 1e-2 * abs(losses[1]), losses
    for (name, p), q in zip(model.named_parameters(), twin.parameters()):
        assert max_rel(p.grad, q.grad) <= 1e-2, name
    attention = [line for g in compiled_graphs for line in g.fuse("cpu").mlir().splitlines()
                 if "= graph.attention" in line]
    assert len(attention) == 2 and all("xbf16>" in line for line in attention), attention
