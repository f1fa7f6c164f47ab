"""CPU row kernels and column reductions, compiled, against float64 numpy.

What is under test (codegen/tile/FusionToTile.cpp, passes/FuseOps.cpp):

* Row kernels (softmax, log_softmax, cross_entropy, layer_norm: one program
  per row, lanes along the reduced innermost dimension) keep a value that one
  pass over the row computes and a later pass reads again (exp(x - max)) in a
  per-program scratch row of at most 256 KiB; a block divided by one per-row
  value is multiplied by its reciprocal; rows whose length is a multiple of
  the block (32) load and store without masks, other lengths end in a masked
  tail. Row lengths around 32 and 1024, odd ones, and rows too long for the
  scratch row (f32 rows of more than 65536 elements, f64 of more than 32768)
  cover each path.
* Column reductions (layer_norm's dgamma and dbeta, x.sum(0)) split over
  slices of rows: a partial kernel whose programs each walk their rows in
  memory order, with the accumulators of every column in scratch when they
  fit in 256 KiB, else one program per block of columns and slice; then a
  combine kernel.
* Fusion: cross-entropy's gradient is computed by the forward row kernel
  (the count of valid labels is a kernel of its own, not merged into the sum
  of the losses), and layer_norm's dgamma and dbeta are one kernel.

References are float64 numpy from the (already rounded) inputs, cast to the
dtype under test. Tolerances are the project's (never loosened per test):

* float32 / float64: backend_checks.TOLERANCES, elementwise
  |got - want| <= ATOL + RTOL * |want| (f32: 1e-5, 1e-6; f64: 1e-12,
  1e-12), the standard test_compiled_ops.py holds compiled kernels to. For
  results that are sums of terms that cancel (layer_norm's dx and dgamma,
  column sums) the sum of the terms' absolute values replaces |want|
  (`magnitude`, as test_ops_numerics.assert_close does for matmuls): a
  correctly rounded float32 computation is only that accurate there.
* bfloat16 results computed in f32 (BF16_RESULT_TOLERANCE): at most one
  rounding of the f32 result to bf16, 2^-8 relative, plus the f32
  tolerance (1e-5 relative) of the float64 reference computed from the same
  bf16-rounded inputs; no absolute term above f32's smallest normal.
"""
import re

import numpy as np
import pytest

import tilefuse
import tilefuse.functional as F
from backend_checks import TOLERANCES, bf16, out_of_tolerance
from fusion_checks import entry_body, top_level

# (rtol, atol) for a bf16 result computed in f32: one rounding to bf16 is
# within 2^-8 of the f32 value, itself within the f32 tolerance of float64.
# The absolute term is for underflow only: below 2^-126, f32's (and bf16's)
# smallest normal, values are subnormal, with absolute, not relative,
# precision (a kernel flushing them to zero is off by less than 2^-126);
# above it, the bound is purely relative, so a small probability lost to
# zero fails.
BF16_RESULT_TOLERANCE = (2.0 ** -8 + TOLERANCES[np.dtype(np.float32)][0], 2.0 ** -126)

ROW_LENGTHS = [1, 3, 31, 32, 33, 151, 1023, 1024, 1025, 4097]
ROW_COUNTS = [1, 7, 64]


# ---------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------

def assert_close(op, got, want, dtype, seed, shapes, magnitude=None, tol=None):
    """`want` (float64) cast to `dtype`, then |got - want| <= atol + rtol *
    max(|want|, magnitude) elementwise (NaN and infinities matched exactly).
    `tol` defaults to TOLERANCES[dtype]. The message names the op, the
    shapes, the dtype, the seed and the max error."""
    dtype = np.dtype(dtype)
    got = np.asarray(got)
    want = np.asarray(want, np.float64).astype(dtype)
    ctx = (f"{op}: dtype {dtype.name}, input shapes {shapes}, output shape {want.shape}, "
           f"seed {seed}")
    assert got.shape == want.shape, f"{ctx}: got shape {got.shape}"
    assert got.dtype == dtype, f"{ctx}: got dtype {got.dtype}"
    rtol, atol = TOLERANCES[dtype] if tol is None else tol
    w = want.astype(np.float64)
    bad, err, bound = out_of_tolerance(got, want, rtol, atol, magnitude)
    if bad.any():
        g = got.astype(np.float64)
        ratio = np.where(bad, err / bound, 0.0)
        worst = np.unravel_index(int(np.argmax(ratio)), err.shape) if err.ndim else ()
        with np.errstate(divide="ignore", invalid="ignore"):
            rel = np.where(np.isfinite(err) & np.isfinite(w),
                           err / np.maximum(np.abs(w), 1e-300), np.inf)
        raise AssertionError(
            f"{ctx}: {int(bad.sum())} of {bad.size} elements exceed rtol={rtol:g} "
            f"atol={atol:g}; max abs error {float(err.max()):.3e}, max rel error "
            f"{float(rel.max()):.3e}; worst at index {[int(i) for i in worst]}: got "
            f"{float(g[worst])!r}, want {float(w[worst])!r} (bound {float(bound[worst]):.3e})")


def f64(x):
    return np.asarray(x).astype(np.float64)


def np_softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def np_log_softmax(x):
    z = x - x.max(-1, keepdims=True)
    return z - np.log(np.exp(z).sum(-1, keepdims=True))


def logits(rng, shape, kind, dtype=np.float32):
    """'scaled30': N(0, 30^2), exp spans far more than float32's range;
    'dominant': N(0, 3^2) with one logit per row raised to 80 (the others'
    probabilities fall near float32's smallest normals)."""
    if kind == "scaled30":
        return (rng.standard_normal(shape) * 30.0).astype(dtype)
    x = rng.standard_normal(shape) * 3.0
    rows = x.reshape(-1, shape[-1])
    rows[np.arange(rows.shape[0]), rng.integers(0, shape[-1], rows.shape[0])] = 80.0
    return x.astype(dtype)


def kernel_names(compiled):
    return [r["name"] for r in compiled.report()]


# ---------------------------------------------------------------------------
# softmax / log_softmax over the last dimension
# ---------------------------------------------------------------------------

SOFTMAX = {"softmax": (F.softmax, np_softmax), "log_softmax": (F.log_softmax, np_log_softmax)}


@pytest.mark.parametrize("kind", ["scaled30", "dominant"])
@pytest.mark.parametrize("n", ROW_LENGTHS)
@pytest.mark.parametrize("rows", ROW_COUNTS)
@pytest.mark.parametrize("op", list(SOFTMAX))
def test_softmax_rows(op, rows, n, kind, rng, seed):
    traced, ref = SOFTMAX[op]
    x = logits(rng, (rows, n), kind)
    got = tilefuse.compile(lambda t: traced(t, -1), x, device="cpu")(x)
    assert_close(f"{op}(dim=-1) [{kind}]", got, ref(f64(x)), np.float32, seed, [x.shape])


@pytest.mark.parametrize("shape", [(2, 5, 1025), (3, 4, 32), (2, 3, 151)],
                         ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("op", list(SOFTMAX))
def test_softmax_3d(op, shape, rng, seed):
    traced, ref = SOFTMAX[op]
    x = logits(rng, shape, "dominant")
    x[1] *= 10.0  # large magnitudes in some rows
    got = tilefuse.compile(lambda t: traced(t, -1), x, device="cpu")(x)
    assert_close(f"{op}(dim=-1)", got, ref(f64(x)), np.float32, seed, [shape])


# Rows longer than the 256 KiB scratch row (f32 65536, f64 32768 elements):
# exp(x - max) is recomputed instead of loaded. Next to them, rows that just
# fit.
@pytest.mark.parametrize("n,dtype", [(70001, np.float32), (65536, np.float32),
                                     (33000, np.float64), (32768, np.float64),
                                     (1025, np.float64), (4096, np.float64)],
                         ids=["f32-70001", "f32-65536", "f64-33000", "f64-32768",
                              "f64-1025", "f64-4096"])
@pytest.mark.parametrize("op", list(SOFTMAX))
def test_softmax_rows_around_the_scratch_budget(op, n, dtype, rng, seed):
    traced, ref = SOFTMAX[op]
    x = logits(rng, (2, n), "scaled30", dtype)
    x[1, n // 2] = 200.0  # a dominant logit in the middle of a long row
    fn = tilefuse.compile(lambda t: traced(t, -1), x, device="cpu")
    assert_close(f"{op}(dim=-1)", fn(x), ref(f64(x)), dtype, seed, [x.shape])
    if op == "softmax":  # coverage guard: exp(x - max) kept in a scratch row iff it fits
        fits = n * np.dtype(dtype).itemsize <= 256 << 10
        assert ("tile.scratch" in fn.tile_ir) == fits, (
            f"softmax {x.shape} {np.dtype(dtype).name}: expected "
            f"{'a' if fits else 'no'} scratch row in the kernel")


@pytest.mark.parametrize("n", [3, 32, 33, 1024, 1025])
def test_softmax_bf16(n, rng, seed):
    """bf16 logits (cast inside the traced function, as
    test_compile.test_bfloat16_inside_a_kernel does): computed in f32; the
    result, bf16 in the graph, is rounded to bf16 at most once (a kernel
    may keep it in f32 up to the cast back). Every probability, down to
    f32's smallest normal, within BF16_RESULT_TOLERANCE of float64."""
    x = (rng.standard_normal((7, n)) * 8.0).astype(np.float32)
    x[3, n // 2] = 60.0
    fn = tilefuse.compile(lambda t: F.softmax(t.to("bf16") * 2.0, -1).to("f32"), x, device="cpu")
    got = fn(x)
    want = np_softmax(f64(bf16(x)) * 2.0)  # x * 2 is exact in bf16
    assert_close("softmax(bf16(x) * 2, dim=-1)", got, want, np.float32, seed, [x.shape],
                 tol=BF16_RESULT_TOLERANCE)


# ---------------------------------------------------------------------------
# cross_entropy forward + gradient
# ---------------------------------------------------------------------------

def np_cross_entropy(x, target, ignore_index=-100):
    """PyTorch's mean over the non-ignored rows, and its gradient w.r.t. the
    logits (zero on ignored rows; NaN loss and a zero gradient when every row
    is ignored)."""
    x = f64(x)
    valid = target != ignore_index
    count = valid.sum()
    safe = np.where(valid, target, 0)
    p = np_softmax(x)
    logp = np_log_softmax(x)
    onehot = np.zeros_like(x)
    onehot[np.arange(x.shape[0]), safe] = 1.0
    picked = logp[np.arange(x.shape[0]), safe]
    with np.errstate(invalid="ignore", divide="ignore"):
        loss = -(picked * valid).sum() / count
    scale = valid[:, None] / count if count else np.zeros((x.shape[0], 1))
    return np.asarray(loss), (p - onehot) * scale


def ce_inputs(rng, rows, n, kind):
    x = logits(rng, (rows, n), kind)
    t = rng.integers(0, n, rows).astype(np.int64)
    if rows > 1:
        t[1::3] = -100  # some ignored rows
        t[0] = int(np.argmax(x[0]))  # the dominant class: loss ~ 0, p - 1 cancels
    return x, t


def torch_cross_entropy(x, t):
    """(loss, grad) of torch.nn.functional.cross_entropy in float64, or None."""
    try:
        import torch
    except ImportError:
        return None
    xt = torch.tensor(f64(x), requires_grad=True)
    loss = torch.nn.functional.cross_entropy(xt, torch.tensor(t))
    loss.backward()
    return loss.detach().numpy(), xt.grad.numpy()


def check_cross_entropy(x, t, seed, what):
    vg = tilefuse.trace(lambda z, y: F.cross_entropy(z, y), x, t).value_and_grad(wrt=(0,))
    loss, grad = vg.compile("cpu")(x, t)
    want_loss, want_grad = np_cross_entropy(x, t)
    shapes = [x.shape, t.shape]
    ref = torch_cross_entropy(x, t)
    if ref is not None:  # the reference follows PyTorch's semantics
        np.testing.assert_allclose(want_loss, ref[0], rtol=1e-12, atol=0,
                                   err_msg=f"numpy vs torch cross_entropy loss {shapes}")
        np.testing.assert_allclose(want_grad, ref[1], rtol=1e-12, atol=1e-15,
                                   err_msg=f"numpy vs torch cross_entropy grad {shapes}")
    assert_close(f"cross_entropy loss [{what}]", loss, want_loss, np.float32, seed, shapes)
    # Elementwise: p - 1 cancels where p ~ 1, but p's rounding (~6e-8) over
    # the count stays below ATOL.
    assert_close(f"cross_entropy d/dlogits [{what}]", grad, want_grad, np.float32, seed, shapes)


@pytest.mark.parametrize("kind", ["scaled30", "dominant"])
@pytest.mark.parametrize("n", [3, 151, 1024, 1025])
@pytest.mark.parametrize("rows", ROW_COUNTS)
def test_cross_entropy_value_and_grad(rows, n, kind, rng, seed):
    x, t = ce_inputs(rng, rows, n, kind)
    check_cross_entropy(x, t, seed, kind)


@pytest.mark.parametrize("n", [3, 1024, 1025])
def test_cross_entropy_all_ignored(n, rng, seed):
    """PyTorch: the mean over no rows is NaN (0 / 0); the gradient is zero."""
    x = logits(rng, (7, n), "scaled30")
    t = np.full(7, -100, np.int64)
    check_cross_entropy(x, t, seed, "all labels ignored")


# ---------------------------------------------------------------------------
# layer_norm forward + backward
# ---------------------------------------------------------------------------

def np_layer_norm_vjp(x, w, b, dy, eps=1e-5):
    """sum(layer_norm(x) * dy) and its gradients w.r.t. x, w, b, each with
    the magnitude of its terms (sum of their absolute values)."""
    x, w, b, dy = map(f64, (x, w, b, dy))
    n = x.shape[-1]
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    rstd = 1.0 / np.sqrt(var + eps)
    xhat = (x - mu) * rstd
    y = xhat * w + b
    g = dy * w
    dx = rstd * (g - g.mean(-1, keepdims=True) - xhat * (g * xhat).mean(-1, keepdims=True))
    dx_mag = rstd * (np.abs(g) + np.abs(g).sum(-1, keepdims=True) / n
                     + np.abs(xhat) * np.abs(g * xhat).sum(-1, keepdims=True) / n)
    return ((np.asarray((y * dy).sum()), np.asarray(np.abs(y * dy).sum())),
            (dx, dx_mag),
            ((dy * xhat).sum(0), np.abs(dy * xhat).sum(0)),
            (dy.sum(0), np.abs(dy).sum(0)))


def layer_norm_vg(n, x, w, b, dy):
    return tilefuse.trace(lambda x, w, b, dy: (F.layer_norm(x, (n,), w, b) * dy).sum(),
                          x, w, b, dy).value_and_grad(wrt=(0, 1, 2))


def layer_norm_inputs(rng, rows, n):
    x = (rng.standard_normal((rows, n)) * 2.0 + 3.0).astype(np.float32)  # mean far from 0
    w = (rng.standard_normal(n) + 1.0).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    dy = rng.standard_normal((rows, n)).astype(np.float32)
    return x, w, b, dy


# (300 rows: the column partial splits the rows into several slices. 40000
# columns: 625 column programs, more than a split takes (128), so dgamma and
# dbeta run unsplit; note that layer_norm cannot reach the partial's
# no-scratch fallback on the CPU target: a split needs fewer than 128
# programs of 64 columns, and 2 x 8128 f64 accumulators are 130 KB --
# test_many_column_sums_with_and_without_scratch covers it.)
@pytest.mark.parametrize("rows,n", [(r, n) for n in (3, 33, 1024, 1025) for r in (1, 5, 300)]
                         + [(3, 40000)], ids=lambda v: str(v))
def test_layer_norm_value_and_grad(rows, n, rng, seed):
    x, w, b, dy = layer_norm_inputs(rng, rows, n)
    fn = layer_norm_vg(n, x, w, b, dy).compile("cpu")
    got = fn(x, w, b, dy)
    shapes = [x.shape, w.shape, b.shape, dy.shape]
    names = ["sum(layer_norm(x) * dy)", "layer_norm d/dx", "layer_norm d/dweight (dgamma)",
             "layer_norm d/dbias (dbeta)"]
    for name, g, (want, magnitude) in zip(names, got, np_layer_norm_vjp(x, w, b, dy)):
        assert_close(name, g, want, np.float32, seed, shapes, magnitude=magnitude)
    if rows == 300:  # coverage: the column reductions took the split path
        assert any(k.endswith("_partial") for k in kernel_names(fn)), (
            f"layer_norm value_and_grad {shapes}: no column partial kernel in "
            f"{kernel_names(fn)}")


# ---------------------------------------------------------------------------
# Column reductions
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("shape", [(300, 1025), (4097, 64)], ids=["300x1025", "4097x64"])
def test_column_sum_and_mean(shape, rng, seed):
    x = (rng.standard_normal(shape) + 0.5).astype(np.float32)
    fn = tilefuse.compile(lambda t: (t.sum(0), t.mean(0)), x, device="cpu")
    s, m = fn(x)
    x64 = f64(x)
    mag = np.abs(x64).sum(0)
    assert_close("x.sum(0)", s, x64.sum(0), np.float32, seed, [shape], magnitude=mag)
    assert_close("x.mean(0)", m, x64.mean(0), np.float32, seed, [shape],
                 magnitude=mag / shape[0])
    assert any(k.endswith("_partial") for k in kernel_names(fn)), (
        f"x.sum(0) {shape}: no column partial kernel in {kernel_names(fn)}")


# Column sums over [2, T, d] beside a full-size result of the same elements
# in another shape ([2T, d]: a layer norm's widened gradient beside its
# dgamma and dbeta): the kernel still splits, its partial kernel's walk
# storing the reshaped result.
def test_column_sums_beside_a_reshaped_full_size_result(rng, seed):
    x2 = rng.standard_normal((300, 130)).astype(np.float32)
    y = rng.standard_normal((2, 150, 130)).astype(np.float32)

    def f(x2, y):
        xf = x2 * 3.0
        x = xf.reshape(2, 150, 130)
        return x.sum((0, 1)), (x * y).sum((0, 1)), xf
    fn = tilefuse.compile(f, x2, y, device="cpu")
    s, t, xf = fn(x2, y)
    x64 = (f64(x2) * 3.0).reshape(2, 150, 130)
    shapes = [x2.shape, y.shape]
    assert_close("x.sum((0, 1))", s, x64.sum((0, 1)), np.float32, seed, shapes,
                 magnitude=np.abs(x64).sum((0, 1)))
    assert_close("(x * y).sum((0, 1))", t, (x64 * y).sum((0, 1)), np.float32, seed, shapes,
                 magnitude=np.abs(x64 * y).sum((0, 1)))
    assert_close("x2 * 3", xf, x64.reshape(300, 130), np.float32, seed, shapes)
    names = kernel_names(fn)
    assert len(names) == 2 and any(k.endswith("_partial") for k in names), names


# Five column sums in one kernel: f64 accumulators of 4000 columns (160 KB)
# fit the 256 KiB scratch (one program per slice of rows); of 8000 columns
# (320 KB) they do not (one program per block of columns and slice).
@pytest.mark.parametrize("n,by_rows", [(4000, True), (8000, False)],
                         ids=["4000-scratch", "8000-fallback"])
def test_many_column_sums_with_and_without_scratch(n, by_rows, rng, seed):
    rows = 96
    x = rng.standard_normal((rows, n)).astype(np.float32)
    fn = tilefuse.compile(lambda t: (t.sum(0), (t * t).sum(0), (t * 3.0).sum(0),
                                     t.abs().sum(0), (t + 1.0).sum(0)), x, device="cpu")
    got = fn(x)
    x64 = f64(x)
    terms = {"x.sum(0)": x64, "(x * x).sum(0)": x64 * x64, "(x * 3).sum(0)": x64 * 3.0,
             "x.abs().sum(0)": np.abs(x64), "(x + 1).sum(0)": x64 + 1.0}
    for (name, t), g in zip(terms.items(), got):
        assert_close(name, g, t.sum(0), np.float32, seed, [x.shape],
                     magnitude=np.abs(t).sum(0))
    # Coverage guard: a split column reduction, whose partial kernel keeps its
    # accumulators in scratch (tile.scratch) only when they fit.
    partial = [r for r in fn.report() if r["name"].endswith("_partial")]
    assert len(partial) == 1, f"five column sums {x.shape}: kernels {kernel_names(fn)}"
    assert ("tile.scratch" in fn.tile_ir) == by_rows, (
        f"five column sums {x.shape}: expected the "
        f"{'by-rows (scratch)' if by_rows else 'per-column-block (no scratch)'} partial; "
        f"partial grid {partial[0]['grid']}")


# ---------------------------------------------------------------------------
# Fusion structure
# ---------------------------------------------------------------------------

_FUSION = re.compile(r'\s*(%\w+)(?::(\d+))? = graph\.fusion "(\w+)"\(([^)]*)\) \{([^}]*)\} : '
                     r'\((.*?)\) -> (.*) \{\s*$')


def fusions(fused):
    """Top-level kernels of a fused graph's entry function: dicts with the
    kernel name, its result names and types, operand names and attributes;
    and the operands of the return."""
    lines = top_level(entry_body(fused.mlir(), fused._graph.entry))
    kernels = []
    for line in lines:
        m = _FUSION.match(line)
        if not m:
            continue
        name, count, kernel, operands, attrs, _, results = m.groups()
        types = re.findall(r"tensor<[^>]*>", results)
        names = [name] if count is None else [f"{name}#{i}" for i in range(int(count))]
        assert len(names) == len(types), line
        kernels.append({"kernel": kernel, "results": dict(zip(names, types)),
                        "operands": [o.strip() for o in operands.split(",") if o.strip()],
                        "attrs": attrs})
    ret = [l for l in lines if l.strip().startswith("return ")]
    assert len(ret) == 1, "\n".join(lines)
    returned = [o.strip() for o in ret[0].strip()[len("return "):].split(":")[0].split(",")]
    return kernels, returned, lines


def readers(name, lines):
    """Top-level lines that read value `name` (returns included)."""
    pat = re.compile(re.escape(name) + r"(?![\w#])")
    return [l for l in lines if pat.search(l.split("=", 1)[1] if " = " in l else l)]


def test_cross_entropy_gradient_in_the_forward_row_kernel(rng, seed):
    rows, n = 64, 1024
    x, t = ce_inputs(rng, rows, n, "scaled30")
    vg = tilefuse.trace(lambda z, y: F.cross_entropy(z, y), x, t).value_and_grad(wrt=(0,))
    fused = vg.fuse("cpu")
    kernels, returned, lines = fusions(fused)
    what = f"cross_entropy value_and_grad: dtype float32, shapes {[x.shape, t.shape]}, seed {seed}"
    text = "\n".join(lines)
    row_type = f"tensor<{rows}x{n}xf32>"
    # One kernel reads the logits; it computes the gradient.
    logits_readers = [k for k in kernels if "%arg0" in k["operands"]]
    assert len(logits_readers) == 1, f"{what}: kernels reading the logits: {logits_readers}\n{text}"
    row = logits_readers[0]
    grads = [v for v, ty in row["results"].items() if ty == row_type]
    assert grads == [returned[1]], (
        f"{what}: the row kernel {row['kernel']} yields {row['results']}; the gradient returned "
        f"is {returned[1]}\n{text}")
    # No [rows, n] intermediate written by one kernel and read by another.
    for k in kernels:
        for v, ty in k["results"].items():
            if ty == row_type:
                users = [l for l in readers(v, lines) if not l.strip().startswith("return")]
                assert not users, f"{what}: {k['kernel']} writes {v} ({ty}), read by {users}\n{text}"
    # The count of valid labels: a kernel of its own over the labels, read by
    # the row kernel; the sum of the per-row losses: another kernel, after it.
    produced = {v: k for k in kernels for v in k["results"]}
    before = [produced[o] for o in row["operands"] if o in produced]
    count = [k for k in before if k["operands"] == ["%arg1"] and "reduced = array<i64: 0>" in k["attrs"]]
    assert len(count) == 1, (f"{what}: no kernel of its own counting the valid labels feeds "
                             f"{row['kernel']} (its producers: {[k['kernel'] for k in before]})\n{text}")
    loss = produced.get(returned[0])
    assert loss is not None and loss is not row and loss is not count[0], (
        f"{what}: the loss {returned[0]} is not summed by a kernel apart from the row kernel and "
        f"the label count\n{text}")
    assert any(o in row["results"] for o in loss["operands"]), (
        f"{what}: the loss kernel {loss['kernel']} does not read the row kernel's losses\n{text}")


@pytest.mark.parametrize("target", ["cpu", "cuda:sm_90"])
@pytest.mark.parametrize("rows,n", [(300, 1024), (5, 33)], ids=["300x1024", "5x33"])
def test_layer_norm_dgamma_dbeta_in_one_kernel(rows, n, target, rng, seed):
    """dgamma and dbeta come from one kernel. On the CPU it is the row
    kernel computing dx (and the loss): it folds them as column sums while
    it walks the rows, so x and dy are read once. On a GPU (no scratch for
    the accumulator rows) a column kernel reads them again."""
    x, w, b, dy = layer_norm_inputs(rng, rows, n)
    fused = layer_norm_vg(n, x, w, b, dy).fuse(target)
    kernels, returned, lines = fusions(fused)
    what = (f"layer_norm value_and_grad for {target}: dtype float32, shapes "
            f"{[x.shape, w.shape, b.shape]}, seed {seed}")
    text = "\n".join(lines)
    assert len(returned) == 4, f"{what}: returns {returned}\n{text}"
    produced = {v: k for k in kernels for v in k["results"]}
    dgamma, dbeta = produced.get(returned[2]), produced.get(returned[3])
    assert dgamma is not None and dgamma is dbeta, (
        f"{what}: dgamma {returned[2]} and dbeta {returned[3]} come from different kernels "
        f"({dgamma and dgamma['kernel']}, {dbeta and dbeta['kernel']})\n{text}")
    assert dgamma["results"][returned[2]] == dgamma["results"][returned[3]] == f"tensor<{n}xf32>", (
        f"{what}: {dgamma['results']}\n{text}")
    # dx comes from the row kernel and is not read back by another kernel.
    dx = returned[1]
    users = [l for l in readers(dx, lines) if not l.strip().startswith("return")]
    assert dx in produced and not users, f"{what}: dx {dx} read back by {users}\n{text}"
    if target == "cpu":
        assert produced[dx] is dgamma and produced.get(returned[0]) is dgamma, (
            f"{what}: the loss, dx, dgamma and dbeta come from kernels "
            f"{[produced.get(r, {}).get('kernel') for r in returned]}, not one\n{text}")
        assert "reduced = array<i64: 1>" in dgamma["attrs"], f"{what}: {dgamma['attrs']}\n{text}"
    else:
        assert produced[dx] is not dgamma, f"{what}: dx in the column kernel\n{text}"
        assert "reduced = array<i64: 0>" in dgamma["attrs"], f"{what}: {dgamma['attrs']}\n{text}"


# Rows per slice (32 slices): 0 or 1 (1, 5 rows), not a multiple of the
# group of 4 rows (37, 130), many (4099); rows of awkward lengths.
@pytest.mark.parametrize("rows,n", [(1, 64), (5, 1024), (37, 1000), (130, 33), (4099, 1025)],
                         ids=lambda v: str(v))
def test_row_kernel_with_column_sums(rows, n, rng, seed):
    """On the CPU, layer_norm's value and gradients are one row kernel that
    also folds dgamma, dbeta and the loss as column sums (a partial kernel
    over slices of rows, then a combine kernel): every result against the
    float64 reference."""
    x, w, b, dy = layer_norm_inputs(rng, rows, n)
    fn = layer_norm_vg(n, x, w, b, dy).compile("cpu")
    names = kernel_names(fn)
    shapes = [x.shape, w.shape, b.shape, dy.shape]
    assert len(names) == 2 and names[0].endswith("_partial") and names[1].endswith("_combine"), (
        f"layer_norm value_and_grad {shapes}: kernels {names}, expected one row kernel with "
        f"column sums (partial, combine)")
    got = fn(x, w, b, dy)
    labels = ["sum(layer_norm(x) * dy)", "layer_norm d/dx", "layer_norm d/dweight (dgamma)",
              "layer_norm d/dbias (dbeta)"]
    for name, g, (want, magnitude) in zip(labels, got, np_layer_norm_vjp(x, w, b, dy)):
        assert_close(name, g, want, np.float32, seed, shapes, magnitude=magnitude)


def test_row_kernel_with_column_sums_3d(rng, seed):
    """layer_norm over the last dimension of a [3, 70, 33] input: the column
    sums fold the two leading dimensions (rows 3 x 70)."""
    x, w, b, dy = layer_norm_inputs(rng, 210, 33)
    x3, dy3 = x.reshape(3, 70, 33), dy.reshape(3, 70, 33)
    fn = tilefuse.trace(lambda x, w, b, dy: (F.layer_norm(x, (33,), w, b) * dy).sum(),
                        x3, w, b, dy3).value_and_grad(wrt=(0, 1, 2)).compile("cpu")
    names = kernel_names(fn)
    shapes = [x3.shape, w.shape, b.shape, dy3.shape]
    assert len(names) == 2 and names[0].endswith("_partial"), (
        f"layer_norm value_and_grad {shapes}: kernels {names}")
    got = list(fn(x3, w, b, dy3))
    got[1] = np.asarray(got[1]).reshape(210, 33)
    labels = ["sum(layer_norm(x) * dy)", "layer_norm d/dx", "layer_norm d/dweight (dgamma)",
              "layer_norm d/dbias (dbeta)"]
    for name, g, (want, magnitude) in zip(labels, got, np_layer_norm_vjp(x, w, b, dy)):
        assert_close(name, g, want, np.float32, seed, shapes, magnitude=magnitude)


@pytest.mark.parametrize("rows,n", [(37, 1000), (4099, 64)], ids=lambda v: str(v))
def test_rms_norm_value_and_grad(rows, n, rng, seed):
    """RMS-norm (x * rsqrt(mean(x^2) + eps) * w) forward and backward: the
    row kernel also folds d/dw as a column sum (one kernel, split into a
    partial and a combine kernel). Results against float64."""
    eps = 1e-6
    x = (rng.standard_normal((rows, n)) * 2.0 + 1.0).astype(np.float32)
    w = (rng.standard_normal(n) + 1.0).astype(np.float32)
    dy = rng.standard_normal((rows, n)).astype(np.float32)

    def loss(x, w, dy):
        r = ((x * x).mean(-1, keepdim=True) + eps).rsqrt()
        return (x * r * w * dy).sum()
    fn = tilefuse.trace(loss, x, w, dy).value_and_grad(wrt=(0, 1)).compile("cpu")
    names = kernel_names(fn)
    assert len(names) == 2 and names[0].endswith("_partial"), (
        f"rms_norm value_and_grad {[x.shape, w.shape]}: kernels {names}")
    X, W, DY = f64(x), f64(w), f64(dy)
    r = 1.0 / np.sqrt((X * X).mean(-1, keepdims=True) + eps)
    g = DY * W
    want = [((X * r * W * DY).sum(), np.abs(X * r * W * DY).sum()),
            (r * g - X * r ** 3 * (g * X).mean(-1, keepdims=True),
             r * np.abs(g) + np.abs(X) * r ** 3 * np.abs(g * X).mean(-1, keepdims=True)),
            ((DY * X * r).sum(0), np.abs(DY * X * r).sum(0))]
    got = fn(x, w, dy)
    for name, gv, (wv, magnitude) in zip(["sum(rms_norm(x) * dy)", "rms_norm d/dx",
                                          "rms_norm d/dweight"], got, want):
        assert_close(name, gv, wv, np.float32, seed, [x.shape, w.shape, dy.shape],
                     magnitude=magnitude)


def test_long_row_kernel_with_column_sums_walks_one_row_at_a_time(rng, seed):
    """A row kernel with column sums whose body is long (layer_norm followed
    by 25 tanh steps: over half the ops a kernel may take) walks one
    row at a time instead of four (its machine code stays in bounds):
    one row index clamp instead of four. Results against the reference
    interpreter."""
    x, w, b, dy = layer_norm_inputs(rng, 37, 96)

    def fn(x, w, b, dy):
        z = F.layer_norm(x, (96,), w, b)
        for _ in range(25):
            z = (z * 0.9).tanh() * 1.1 + 0.01
        return (z * dy).sum()
    g = tilefuse.trace(fn, x, w, b, dy).value_and_grad(wrt=(0, 1, 2))
    compiled = g.compile("cpu")
    names = kernel_names(compiled)
    assert len(names) == 2 and names[0].endswith("_partial"), names
    partial = compiled.tile_ir.split("func.func")[1]
    clamps = re.findall(r"arith\.minsi %\d+, %\d+ : i64", partial)
    assert len(clamps) == 1, f"{len(clamps)} row clamps in the partial kernel:\n{partial[:3000]}"
    got = compiled(x, w, b, dy)
    want = g.interpret(x, w, b, dy)
    shapes = [x.shape, w.shape, b.shape, dy.shape]
    for name, gv, wv in zip(["value", "d/dx", "d/dweight", "d/dbias"], got, want):
        assert_close(f"layer_norm + 25 steps {name}", gv, wv, np.float32, seed, shapes,
                     magnitude=np.abs(wv).max())


def test_square_layer_norm_keeps_its_column_kernel(rng, seed):
    """96 rows of 96: a row result broadcast and a column broadcast have the
    same shape, so the fusion pass cannot tell the broadcast's direction
    from the reads it sees and leaves the column sums in a kernel of their
    own. Results against the float64 reference."""
    x, w, b, dy = layer_norm_inputs(rng, 96, 96)
    vg = layer_norm_vg(96, x, w, b, dy)
    kernels, returned, lines = fusions(vg.fuse("cpu"))
    produced = {v: k for k in kernels for v in k["results"]}
    assert produced[returned[2]] is not produced[returned[1]], "\n".join(lines)
    got = vg.compile("cpu")(x, w, b, dy)
    shapes = [x.shape, w.shape, b.shape, dy.shape]
    for g, (want, magnitude) in zip(got, np_layer_norm_vjp(x, w, b, dy)):
        assert_close("layer_norm value_and_grad", g, want, np.float32, seed, shapes,
                     magnitude=magnitude)


def test_column_sum_of_a_column_sum_stays_apart(rng, seed):
    """A column sum that reads another column sum back (the variance of
    softmax's columns around their sum) does not join the row kernel that
    took the first one: it would need that sum, which exists only after
    every row, at every element. Results against float64 numpy."""
    x = rng.standard_normal((300, 40)).astype(np.float32)
    fn = lambda x: ((F.softmax(x, -1) - F.softmax(x, -1).sum(0)) ** 2).sum(0)
    g = tilefuse.trace(fn, x)
    kernels, returned, lines = fusions(g.fuse("cpu"))
    produced = {v: k for k in kernels for v in k["results"]}
    assert "reduced = array<i64: 0>" in produced[returned[0]]["attrs"], "\n".join(lines)
    e = np.exp(f64(x) - f64(x).max(-1, keepdims=True))
    p = e / e.sum(-1, keepdims=True)
    want = ((p - p.sum(0)) ** 2).sum(0)
    assert_close("column sum of a column sum", g.compile("cpu")(x), want, np.float32, seed,
                 [x.shape], magnitude=np.abs(want))


@pytest.mark.parametrize("shape", [(300, 1025), (4097, 64), (3, 70, 33)])
def test_total_beside_column_sums(shape, seed):
    """A sum over the whole domain beside column sums of it is one kernel
    (the total folded as column partials, then over the columns): both
    against numpy in float64."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(shape) + 2.0).astype(np.float32)
    y = rng.standard_normal(shape).astype(np.float32)
    lead = tuple(range(len(shape) - 1))

    def stats(x, y):
        return (x * y).sum(lead), x.sum()

    fn = tilefuse.compile(stats, x, y, device="cpu")
    columns, total = fn(x, y)
    want_columns = (x.astype(np.float64) * y).sum(lead)
    want_total = x.astype(np.float64).sum()
    scale_columns = np.abs(x.astype(np.float64) * y).sum(lead)
    err = np.max(np.abs(columns - want_columns) / np.maximum(scale_columns, 1e-30))
    assert err <= 1e-5, f"column sums of x*y, shape {shape}, f32, seed {seed}: max error {err:.3g}"
    rel = abs(float(total) - want_total) / np.abs(x.astype(np.float64)).sum()
    assert rel <= 1e-5, f"total of x, shape {shape}, f32, seed {seed}: relative error {rel:.3g}"
    kernels = [r["name"] for r in fn.report()]
    assert sum(name.endswith("_combine") for name in kernels) == 1, (
        f"shape {shape}: expected the total and the column sums in one split kernel, got {kernels}")


def _one_hot_sum_graph(n, index_dtype):
    return tilefuse.parse(f"""
func.func @f(%x: tensor<{n}xf32>, %k: tensor<{index_dtype}>) -> tensor<f32> {{
  %i = graph.iota {{dim = 0 : i64}} : tensor<{n}x{index_dtype}>
  %kb = graph.broadcast_in_dim %k {{dims = array<i64>}} : (tensor<{index_dtype}>) -> tensor<{n}x{index_dtype}>
  %eq = graph.eq %i, %kb : tensor<{n}x{index_dtype}>
  %z = graph.full 0.0 : tensor<{n}xf32>
  %s = graph.select %eq, %x, %z : (tensor<{n}xi1>, tensor<{n}xf32>, tensor<{n}xf32>) -> tensor<{n}xf32>
  %r = graph.reduce_sum %s {{dims = array<i64: 0>}} : (tensor<{n}xf32>) -> tensor<f32>
  return %r : tensor<f32>
}}""")


@pytest.mark.parametrize("n,index_dtype,k", [
    (1024, "i64", 5), (1024, "i32", 1023), (1024, "i64", -3), (1024, "i64", 1024),
    (1 << 19, "i64", 12345),   # a split full reduction: slices must not each pick
    (1024, "f32", 5.0),        # a float iota: no pick, a real sum
])
def test_one_hot_sums(n, index_dtype, k):
    """sum(select(iota == k, x, 0)) is x[k], or 0 for k outside the row; the
    same in a reduction split over slices and with a float iota."""
    x = (np.arange(n, dtype=np.float32) * 0.5 - 7.0)
    kk = np.array(k, dtype={"i64": np.int64, "i32": np.int32, "f32": np.float32}[index_dtype])
    g = _one_hot_sum_graph(n, index_dtype)
    got = float(g.compile("cpu")(x, kk))
    want = float(x[int(k)]) if 0 <= k < n else 0.0
    assert got == want and float(g.interpret(x, kk)) == want, (
        f"one-hot sum over {n} elements, index {index_dtype} {k}: compiled {got}, want {want}")


def test_cross_entropy_over_one_long_row():
    """Unbatched cross-entropy over 2^19 classes: the full reductions split
    into slices (the pick of the target logit happens once)."""
    c = 1 << 19
    rng = np.random.default_rng(0)
    x = rng.standard_normal(c).astype(np.float32)
    t = np.array(12345, np.int64)
    got = float(tilefuse.compile(lambda a, b: F.cross_entropy(a, b), x, t, device="cpu")(x, t))
    x64 = x.astype(np.float64)
    want = np.log(np.exp(x64 - x64.max()).sum()) + x64.max() - x64[12345]
    assert abs(got - want) <= 1e-5 * abs(want), (
        f"cross_entropy over [{c}] logits, target 12345, f32: {got} vs {want}")


def test_division_by_a_tiny_row_sum():
    """x / x.sum(-1) for subnormal x: the reciprocal of such a sum overflows,
    so only softmax's sum (in [1, n]) is divided by multiplication."""
    x = np.full((4, 4), 1e-44, np.float32)
    got = tilefuse.compile(lambda a: a / a.sum(-1, keepdim=True), x, device="cpu")(x)
    want = x.astype(np.float64) / x.astype(np.float64).sum(-1, keepdims=True)
    assert np.allclose(got, want, rtol=1e-5), f"x / x.sum(-1) for x = 1e-44 [4, 4], f32: {got}"


def test_square_transpose_of_a_row_kernel_result_stays_apart():
    """A materialised transpose of a softmax's result reads it across rows:
    it is its own kernel, not absorbed into the row kernel (which would
    recompute each row's max and sum for every lane)."""
    x = np.random.default_rng(1).standard_normal((64, 64)).astype(np.float32)
    fn = tilefuse.compile(lambda a: F.softmax(a, -1).T, x, device="cpu")
    got = fn(x)
    e = np.exp(x.astype(np.float64) - x.max(-1, keepdims=True))
    want = (e / e.sum(-1, keepdims=True)).T
    assert np.allclose(got, want, rtol=1e-5, atol=1e-7), "softmax(x).T [64, 64], f32"
    kinds = [r["kind"] for r in fn.report()]
    assert kinds == ["reduction", "pointwise"], (
        f"softmax(x).T [64, 64]: expected a row kernel and a transpose kernel, got {kinds}")


# ---------------------------------------------------------------------------
# softmax over a middle dimension (the classes of [N, C, H, W])
# ---------------------------------------------------------------------------
# A reduction over dims other than the innermost whose kept elements stream
# (the innermost dim kept and >= 32 wide, >= 32768 kept elements:
# passes/FusionGraph.cpp ownsWholeReductions) gives each program whole
# reductions for its lanes, so the values computed from them (x - max,
# exp, x - lse) join the same kernel in a second walk of the reduced dim:
# one kernel where there were three (max; exp and sum; the subtraction),
# and no shifted values or exponentials written beside the result. Below
# the threshold the reduction stays a kernel of its own.

def np_channel_softmax(x, log):
    z = x - x.max(1, keepdims=True)
    lse = np.log(np.exp(z).sum(1, keepdims=True))
    return z - lse if log else np.exp(z - lse)


def kernel_count(fn):
    return sum(1 for r in fn.report() if r["kind"] in ("pointwise", "reduction"))


@pytest.mark.parametrize("shape,kernels", [((8, 5, 64, 64), 1), ((2, 151, 128, 128), 1),
                                           ((4, 5, 64, 64), 3), ((64, 7, 16, 16), 3)],
                         ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple) else None)
@pytest.mark.parametrize("op", list(SOFTMAX))
def test_softmax_over_channels(op, shape, kernels, rng, seed):
    traced = SOFTMAX[op][0]
    x = logits(rng, shape, "dominant")
    fn = tilefuse.compile(lambda t: traced(t, 1), x, device="cpu")
    assert kernel_count(fn) == kernels, fn.report()
    assert_close(f"{op}(dim=1)", fn(x), np_channel_softmax(f64(x), op == "log_softmax"),
                 np.float32, seed, [shape])


def test_channel_log_softmax_gradient_in_few_kernels(rng, seed):
    """log_softmax over the classes of [N, C, H, W] weighted by a one-hot
    target (a pixelwise cross-entropy): value and gradient against float64
    numpy; the statistics and the gradient are one kernel."""
    n, c, h, w = 8, 7, 64, 64
    x = logits(rng, (n, c, h, w), "scaled30")
    onehot = np.eye(c, dtype=np.float32)[rng.integers(0, c, (n, h, w))].transpose(0, 3, 1, 2)
    onehot = np.ascontiguousarray(onehot)

    def loss(x, t):
        return -(F.log_softmax(x, 1) * t).sum() / (n * h * w)

    step = tilefuse.trace(loss, x, onehot).value_and_grad(wrt=(0,))
    fn = step.compile("cpu")
    value, grad = fn(x, onehot)
    want_value = -(np_channel_softmax(f64(x), True) * onehot).sum() / (n * h * w)
    want_grad = (np_channel_softmax(f64(x), False) - onehot) / (n * h * w)
    assert_close("channel cross-entropy", value, want_value, np.float32, seed, [x.shape])
    assert_close("channel cross-entropy d/dx", grad, want_grad, np.float32, seed, [x.shape],
                 magnitude=1.0 / (n * h * w))
    # One kernel: max, exp and sum, log, and the gradient (softmax - target)
    # computed in its second walk of the classes.
    first = fn.report()[0]["ops"]
    assert {"graph.reduce_max", "graph.exp", "graph.log", "graph.mul"} <= set(first), \
        fn.report()
