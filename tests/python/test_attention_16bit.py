"""16-bit attention: graph.attention and graph.attention_grad on bf16 (or
f16) q, k, v with an f32 log-sum-exp, from F.scaled_dot_product_attention on
16-bit tensors and from autocast. On the CPU bf16 runs in the fused kernels
(16-bit products, f32 accumulation and softmax statistics), f16 is widened
to f32 around them; CUDA's kernels take both (test_attention_cuda.py); the
reference is f32 math on the 16-bit inputs.

Tolerances, against PyTorch in float64 on the same bf16-rounded inputs (and
cotangent): the output and each gradient within 1e-2 of its largest |value|
(bf16 keeps 8 bits: one rounding of a result is up to 2^-9 relative), or no
more than twice as far from float64 as PyTorch's own bf16 SDPA.
"""
import numpy as np
import pytest

import tilefuse
import tilefuse.functional as F

torch = pytest.importorskip("torch")
TF = torch.nn.functional

TOL = 1e-2

# (batch, heads, kv heads, L, S, E, Ev, causal, mask). The last two have
# one key/value head group, too few to share among threads by groups: the
# CPU backward then runs by query blocks, then key blocks (several of each:
# blocks are 256 queries x 512 keys).
CASES = [
    (1, 4, 4, 77, 77, 64, 64, True, None),
    (2, 6, 2, 33, 50, 40, 40, False, "bool"),
    (1, 2, 2, 1, 19, 80, 48, False, "additive"),
    (1, 1, 1, 600, 600, 64, 64, True, None),
    (1, 3, 1, 530, 530, 32, 32, False, None),
]
IDS = ["causal", "gqa-bool-mask", "one-row-additive", "one-head-long-causal",
       "one-group-gqa-long"]


def _rounded(a, dtype=torch.bfloat16):
    """`a` as the 16-bit values a user's tensors hold, back in f32."""
    return torch.from_numpy(a).to(dtype).float().numpy()


def _inputs(case, seed=0):
    b, h, hk, L, S, E, Ev, causal, mask = case
    rng = np.random.default_rng(seed)
    q = _rounded(rng.standard_normal((b, h, L, E)).astype(np.float32))
    k = _rounded(rng.standard_normal((b, hk, S, E)).astype(np.float32))
    v = _rounded(rng.standard_normal((b, hk, S, Ev)).astype(np.float32))
    do = _rounded(rng.standard_normal((b, h, L, Ev)).astype(np.float32))
    m = None
    if mask == "bool":
        m = rng.random((L, S)) > 0.3
        m[:, 0] = True
    elif mask == "additive":
        m = _rounded(rng.standard_normal((b, 1, L, S)).astype(np.float32))
    return q, k, v, do, m


def _torch(q, k, v, do, m, causal, dtype):
    """(out, dq, dk, dv) of PyTorch's SDPA in `dtype`, as float64 arrays."""
    t = [torch.tensor(a, dtype=dtype, requires_grad=True) for a in (q, k, v)]
    mask = None if m is None else torch.tensor(m) if m.dtype == bool else \
        torch.tensor(m, dtype=dtype)
    group = q.shape[1] // k.shape[1]
    kk, vv = (x.repeat_interleave(group, dim=1) for x in t[1:])
    out = TF.scaled_dot_product_attention(t[0], kk, vv, attn_mask=mask, is_causal=causal)
    (out * torch.tensor(do, dtype=dtype)).sum().backward()
    return [x.detach().double().numpy() for x in (out, *(x.grad for x in t))]


def _attention_lines(module_text, function):
    """The attention ops of `function` in a printed module."""
    body = module_text.split(f"func.func @{function}(")[1].split("func.func @")[0]
    return [line for line in body.splitlines()
            if "= graph.attention " in line or "= graph.attention_grad " in line]


def _err(got, want):
    return float(np.abs(np.asarray(got, dtype=np.float64) - want).max())


def case_graph(case, dtype):
    """(graph, args, PyTorch's float64 and `dtype` references) of case:
    sum(sdpa(q, k, v, mask) * dO) in `dtype`, the output too, with the
    gradients of q, k, v; the inputs f32 arrays of 16-bit values."""
    causal, mask_kind = case[7], case[8]
    torch_dtype = torch.bfloat16 if dtype == "bf16" else torch.float16
    q, k, v, do, m = _inputs(case)
    exact = _torch(q, k, v, do, m, causal, torch.float64)
    theirs = _torch(q, k, v, do, m, causal, torch_dtype)

    def loss(q, k, v, do, *mask):
        q16, k16, v16 = (t.to(dtype) for t in (q, k, v))
        attn_mask = None
        if mask:
            attn_mask = mask[0] if mask_kind == "bool" else mask[0].to(dtype)
        out = F.scaled_dot_product_attention(q16, k16, v16, attn_mask=attn_mask,
                                             is_causal=causal)
        out = out.to("f32")
        return (out * do).sum(), out

    args = (q, k, v, do) + (() if m is None else (m,))
    graph = tilefuse.trace(loss, *args).value_and_grad(wrt=(0, 1, 2))
    return graph, args, exact, theirs


def check_against_pytorch(results, exact, theirs, dtype):
    """out, dq, dk, dv within TOL of max|value| of float64, or twice as
    far as PyTorch's own `dtype` SDPA."""
    for name, got, want, torch16 in zip(("out", "dq", "dk", "dv"), results, exact, theirs):
        err, theirs_err = _err(got, want), float(np.abs(torch16 - want).max())
        bound = max(TOL * float(np.abs(want).max()), 2 * theirs_err)
        assert err <= bound, f"{name}: max error {err:.3g} (PyTorch {dtype}: {theirs_err:.3g})"


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_16bit_attention_and_its_gradients(case, dtype):
    graph, args, exact, theirs = case_graph(case, dtype)
    attention = _attention_lines(graph.fuse("cpu").mlir(), "loss_value_and_grad")
    assert len(attention) == 2, attention
    # bf16 runs in the CPU's kernels as it is; f16 is widened to f32 there.
    kept = "bf16" if dtype == "bf16" else "f32"
    assert all(f"x{kept}>" in line and "xf32>" in line for line in attention), attention
    _, out, dq, dk, dv = graph.compile("cpu")(*args)
    check_against_pytorch((out, dq, dk, dv), exact, theirs, dtype)


def test_autocast_runs_attention_in_bf16(monkeypatch):
    """precision="bf16": attention takes bf16 q, k, v like the matmuls
    around it (its statistics f32), and the step stays within bf16's
    tolerance of the f32 one."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 64, 32)).astype(np.float32)
    w = rng.standard_normal((32, 96)).astype(np.float32) * 0.2

    def fn(x, w):
        qkv = (x @ w).reshape(2, 64, 3, 2, 16).permute(2, 0, 3, 1, 4)
        out = F.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], is_causal=True)
        return (out * out).sum()

    graph = tilefuse.trace(fn, x, w).value_and_grad(wrt=(1,))
    low = graph.autocast("bf16")
    attention = _attention_lines(low.fuse("cpu").mlir(), "fn_value_and_grad")
    assert len(attention) == 2 and all("xbf16>" in line for line in attention), attention
    want = graph.compile("cpu")(x, w)
    got = low.compile("cpu")(x, w)
    for g, t in zip(got, want):
        assert _err(g, np.asarray(t, dtype=np.float64)) <= 3e-2 * float(np.abs(t).max())
    # TILEFUSE_ATTENTION_16BIT=0 keeps attention f32 under autocast (to
    # compare), the matmuls still bf16.
    monkeypatch.setenv("TILEFUSE_ATTENTION_16BIT", "0")
    fused = graph.autocast("bf16").fuse("cpu").mlir()
    attention = _attention_lines(fused, "fn_value_and_grad")
    assert len(attention) == 2 and not any("bf16" in line for line in attention), attention
    assert "xbf16>" in fused


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
def test_16bit_attention_on_cuda_stays_16bit(dtype):
    """CUDA's attention kernels take bf16 and f16 as they are (their numbers
    under emulation: test_attention_cuda.py): fusion for CUDA keeps the
    16-bit ops, with no casts around them."""
    q, k, v, do, m = _inputs(CASES[0])

    def fn(q, k, v):
        out = F.scaled_dot_product_attention(q.to(dtype), k.to(dtype), v.to(dtype),
                                             is_causal=True)
        return out.to("f32").sum()

    fused = tilefuse.trace(fn, q, k, v).value_and_grad(wrt=(0,)).fuse("cuda:sm_90").mlir()
    attention = _attention_lines(fused, "fn_value_and_grad")
    assert len(attention) == 2 and all(f"x{dtype}>" in line for line in attention), attention


def test_bf16_attention_with_dropout_drops_what_f32_drops():
    """Dropout inside the bf16 kernels draws the same Philox bits as the f32
    ones (the same probabilities dropped): the autocast step's loss and
    gradients stay within bf16's tolerance of the f32 step's, and far from
    the undropped attention's."""
    from test_attention import _written_out

    rng = np.random.default_rng(3)
    q, k, v, w = (rng.standard_normal((2, 3, 37, 16)).astype(np.float32) for _ in range(4))
    seed = np.int64(11)

    def loss_of(p):
        fn = _written_out(p, False)
        return lambda q, k, v, w, seed: (fn(q, k, v, seed) * w).sum()

    graph = tilefuse.trace(loss_of(0.25), q, k, v, w, seed).value_and_grad(wrt=(0, 1, 2))
    low = graph.autocast("bf16")
    attention = _attention_lines(low.fuse("cpu").mlir(), "main_value_and_grad")
    assert len(attention) == 2 and all("xbf16>" in line and "dropout_p = 2.5" in line
                                       for line in attention), attention
    want = graph.compile("cpu")(q, k, v, w, seed)
    got = low.compile("cpu")(q, k, v, w, seed)
    undropped = tilefuse.trace(loss_of(0.0), q, k, v, w, seed).value_and_grad(
        wrt=(0, 1, 2)).compile("cpu")(q, k, v, w, seed)
    for name, g, t, u in zip(("loss", "dq", "dk", "dv"), got, want, undropped):
        scale = float(np.abs(t).max())
        assert _err(g, np.asarray(t, np.float64)) <= 3e-2 * scale, name
        assert _err(u, np.asarray(t, np.float64)) > 1e-1 * scale, f"{name}: nothing dropped"


def test_written_out_attention_under_autocast_fuses_in_bf16(monkeypatch):
    """Autocast before differentiation (compile_train_step's order): the
    written-out chain (bf16 products, the softmax in f32 between casts) is
    recognised as a bf16 attention, not an f32 one between casts; the
    gradients stay within bf16's tolerance of the f32 step's.
    TILEFUSE_ATTENTION_16BIT=0 recognises the f32 op (to compare)."""
    from test_attention import _written_out

    rng = np.random.default_rng(5)
    q, k, v, w = (rng.standard_normal((2, 3, 40, 16)).astype(np.float32) for _ in range(4))
    seed = np.int64(3)
    fn = _written_out(0.0, False)

    def loss(q, k, v, w, seed):
        return (fn(q, k, v, seed) * w).sum()

    def step():
        return tilefuse.trace(loss, q, k, v, w, seed).autocast("bf16").value_and_grad(
            wrt=(0, 1, 2))

    attention = _attention_lines(step().fuse("cpu").mlir(), "loss_value_and_grad")
    assert len(attention) == 2 and all("xbf16>" in line for line in attention), attention
    want = tilefuse.trace(loss, q, k, v, w, seed).value_and_grad(wrt=(0, 1, 2)).compile("cpu")(
        q, k, v, w, seed)
    got = step().compile("cpu")(q, k, v, w, seed)
    for name, g, t in zip(("loss", "dq", "dk", "dv"), got, want):
        assert _err(g, np.asarray(t, np.float64)) <= 3e-2 * float(np.abs(t).max()), name
    monkeypatch.setenv("TILEFUSE_ATTENTION_16BIT", "0")
    attention = _attention_lines(step().fuse("cpu").mlir(), "loss_value_and_grad")
    assert len(attention) == 2 and not any("bf16" in line for line in attention), attention
