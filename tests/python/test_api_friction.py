"""PyTorch names users reach for on traced tensors and in tilefuse.functional
(& | ^ ~ on masks, .pow/.t/.contiguous/.dim, leaky_relu, rms_norm, pad,
normalize, l1_loss), and the refusals and messages around them (.item(),
boolean-mask indexing, a loss that is not 0-d), reports that print, the
public compile_stages, and a loaded training step's float loss.

Values and gradients are checked against PyTorch (CPU), through the
interpreter and compiled for the CPU. Tolerances: float64 within 1e-10
relative, float32 within 1e-5 relative (max |diff| / max |ref| per tensor);
boolean and integer results exactly.
"""
import os
import re

import numpy as np
import pytest
import torch

import tilefuse
import tilefuse.functional as F

TOL = {np.float32: 1e-5, np.float64: 1e-10}
HERE = os.path.basename(__file__)


def max_rel_err(got, ref):
    got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    assert got.shape == ref.shape, (got.shape, ref.shape)
    scale = np.abs(ref).max() if ref.size else 0.0
    err = np.abs(got - ref).max() if ref.size else 0.0
    return err / scale if scale > 0 else err


def run_both(fn, *args):
    """{"interpreter": results, "compiled": results} of fn on args."""
    g = tilefuse.trace(fn, *args)
    return {"interpreter": g.interpret(*args), "compiled": g.compile("cpu")(*args)}


def assert_matches(what, fn, args, want, dtype, seed):
    for how, got in run_both(fn, *args).items():
        got = np.asarray(got)
        assert got.shape == want.shape and got.dtype == want.dtype, (
            f"{what} ({how}): got {got.dtype}{list(got.shape)}, want "
            f"{want.dtype}{list(want.shape)}")
        if want.dtype.kind in "biu":
            assert np.array_equal(got, want), f"{what} ({how}), seed {seed}: {got} != {want}"
        else:
            err = max_rel_err(got, want)
            assert err <= TOL[dtype], (f"{what} ({how}), {np.dtype(dtype).name}, shapes "
                                       f"{[np.shape(a) for a in args]}, seed {seed}: max error "
                                       f"{err:.3g} > {TOL[dtype]:g}")


def assert_grads_match(what, fn, torch_fn, args, dtype, seed, wrt=(0,)):
    """d/d args[wrt] of sum(fn(*args) * w), a random cotangent w, against
    PyTorch's autograd; the value too."""
    rng = np.random.default_rng(seed + 1)
    t_args = [torch.tensor(a, requires_grad=(i in wrt)) for i, a in enumerate(args)]
    t_out = torch_fn(*t_args)
    w = rng.standard_normal(tuple(t_out.shape)).astype(dtype)
    (t_out * torch.tensor(w)).sum().backward()
    want = [t_args[i].grad.numpy() for i in wrt]
    g = tilefuse.trace(lambda *a: (fn(*a[:-1]) * a[-1]).sum(), *args, w)
    vg = g.value_and_grad(wrt=wrt)
    for how, run in (("interpreter", vg.interpret), ("compiled", vg.compile("cpu"))):
        got = run(*args, w)
        value = float((t_out.detach() * torch.tensor(w)).sum())
        assert abs(float(got[0]) - value) <= TOL[dtype] * max(1.0, abs(value)) * 10, (
            f"{what} ({how}): value {float(got[0])} vs PyTorch {value}, seed {seed}")
        for k, (gr, wa) in enumerate(zip(got[1:], want)):
            assert not np.isnan(gr).any() or np.isnan(wa).any(), f"{what} ({how}): NaN gradient"
            err = max_rel_err(gr, wa)
            assert err <= TOL[dtype], (f"{what} ({how}) d/d arg {wrt[k]}, "
                                       f"{np.dtype(dtype).name}, shapes "
                                       f"{[np.shape(a) for a in args]}, seed {seed}: max error "
                                       f"{err:.3g} > {TOL[dtype]:g}")


def refused(fn, *args, match=()):
    """The CompileError message of tracing fn(*args), checked to contain
    every string in `match`."""
    with pytest.raises(tilefuse.CompileError) as info:
        tilefuse.trace(fn, *args)
    text = str(info.value)
    for m in match:
        assert m in text, f"{m!r} not in the message: {text}"
    return text


# ---------------------------------------------------------------------------
# & | ^ ~ and arithmetic of boolean tensors
# ---------------------------------------------------------------------------

BOOL_CASES = {
    "a & b": (lambda a, b: a & b, lambda a, b: a & b),
    "a | b": (lambda a, b: a | b, lambda a, b: a | b),
    "a ^ b": (lambda a, b: a ^ b, lambda a, b: a ^ b),
    "~a": (lambda a, b: ~a, lambda a, b: ~a),
    "a & ~b | (a ^ True)": (lambda a, b: a & ~b | (a ^ True), lambda a, b: a & ~b | (a ^ True)),
    "False | a, True & b": (lambda a, b: (False | a) ^ (True & b),
                            lambda a, b: (False | a) ^ (True & b)),
    "a + b (or)": (lambda a, b: a + b, lambda a, b: a + b),
    "a * b (and)": (lambda a, b: a * b, lambda a, b: a * b),
    "maximum, minimum": (lambda a, b: a.maximum(b) ^ a.minimum(b),
                         lambda a, b: torch.maximum(a, b) ^ torch.minimum(a, b)),
    "a == b, a < b": (lambda a, b: (a == b) | (a < b), lambda a, b: (a == b) | (a < b)),
    "logical_and/or/xor/not": (
        lambda a, b: a.logical_and(b) ^ a.logical_or(b).logical_not() | a.logical_xor(b),
        lambda a, b: a.logical_and(b) ^ a.logical_or(b).logical_not() | a.logical_xor(b)),
}


@pytest.mark.parametrize("case", list(BOOL_CASES))
def test_boolean_operators_match_torch(case, rng, seed):
    ours, theirs = BOOL_CASES[case]
    a = rng.random((3, 5)) < 0.5
    b = rng.random(5) < 0.5  # broadcasts
    want = theirs(torch.tensor(a), torch.tensor(b)).numpy()
    assert_matches(case, ours, [a, b], want, np.float32, seed)


def test_masks_combine_from_float_comparisons(rng, seed):
    x = rng.standard_normal((4, 6)).astype(np.float32)
    want = torch.tensor(x)
    want = torch.where(((want > 0) & (want < 1)) | ~(want > -0.5), want, 0.0).numpy()
    assert_matches("where((x > 0) & (x < 1) | ~(x > -0.5), x, 0)",
                   lambda t: tilefuse.where(((t > 0) & (t < 1)) | ~(t > -0.5), t, 0.0),
                   [x], want, np.float32, seed)


def test_logical_ops_of_numbers_test_nonzero(rng, seed):
    x = rng.integers(-2, 3, (4, 5)).astype(np.int64)
    y = rng.standard_normal(5)
    y[0] = 0.0
    tx, ty = torch.tensor(x), torch.tensor(y)
    want = (tx.logical_and(ty) ^ tx.logical_or(ty) ^ tx.logical_not()).numpy()
    assert_matches("logical_* of i64 and f64",
                   lambda a, b: a.logical_and(b) ^ a.logical_or(b) ^ a.logical_not(),
                   [x, y], want, np.float64, seed)


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_invert_of_integers_is_bitwise_not(dtype, rng, seed):
    info = np.iinfo(dtype)
    x = np.concatenate([rng.integers(-1000, 1000, 9), [0, -1, info.min, info.max]]).astype(dtype)
    assert_matches(f"~x ({np.dtype(dtype).name})", lambda t: ~t, [x],
                   torch.bitwise_not(torch.tensor(x)).numpy(), np.float32, seed)


def test_bitwise_ops_without_a_graph_op_are_refused():
    i = np.arange(6).reshape(2, 3)
    f = np.ones((2, 3), np.float32)
    b = np.ones((2, 3), bool)
    text = refused(lambda x: x & 3, i, match=("&", "tensor<2x3xi64>", "boolean", HERE))
    assert "(x > 0) & (y < 1)" in text
    refused(lambda x, m: m | x, i, b, match=("|", "tensor<2x3xi64>", "tensor<2x3xi1>"))
    refused(lambda x: x ^ x, f, match=("^", "tensor<2x3xf32>"))
    refused(lambda x: ~x, f, match=("~", "floating-point", "tensor<2x3xf32>"))
    refused(lambda m: m - m, b, match=("subtraction", "boolean", "~mask", HERE))
    refused(lambda m: -m, b, match=("negation", "boolean", "~mask"))


# ---------------------------------------------------------------------------
# .pow .t .contiguous .dim .item
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_pow_matches_torch_with_gradients(dtype, rng, seed):
    x = (rng.random((3, 4)) + 0.5).astype(dtype)
    e = (rng.random(4) * 2).astype(dtype)
    tx, te = torch.tensor(x), torch.tensor(e)
    assert_matches("x.pow(3)", lambda t: t.pow(3), [x], tx.pow(3).numpy(), dtype, seed)
    assert_matches("x.pow(0.5)", lambda t: t.pow(0.5), [x], tx.pow(0.5).numpy(), dtype, seed)
    assert_matches("x.pow(e)", lambda t, u: t.pow(u), [x, e], tx.pow(te).numpy(), dtype, seed)
    assert_grads_match("x.pow(e)", lambda t, u: t.pow(u), lambda t, u: t.pow(u), [x, e], dtype,
                       seed, wrt=(0, 1))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_t_transposes_up_to_two_dims(dtype, rng, seed):
    m = rng.standard_normal((3, 5)).astype(dtype)
    v = rng.standard_normal(4).astype(dtype)
    s = np.array(2.5, dtype)
    assert_matches("m.t()", lambda t: t.t(), [m], torch.tensor(m).t().numpy(), dtype, seed)
    assert_matches("v.t()", lambda t: t.t(), [v], torch.tensor(v).t().numpy(), dtype, seed)
    assert_matches("s.t()", lambda t: t.t(), [s], torch.tensor(s).t().numpy(), dtype, seed)
    assert_grads_match("m.t() @ m", lambda t: t.t() @ t, lambda t: t.t() @ t, [m], dtype, seed)
    refused(lambda t: t.t(), np.ones((2, 3, 4), dtype),
            match=("t()", "<= 2 dimensions", "tensor<2x3x4x", "transpose", HERE))


def test_contiguous_and_dim(rng, seed):
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    seen = {}

    def fn(t):
        seen["dim"] = (t.dim(), t[0].dim(), t.sum().dim())
        c = t.contiguous()
        seen["same"] = c is t
        return c.permute(2, 0, 1).contiguous() * 2

    assert_matches("permute().contiguous()", fn, [x],
                   (torch.tensor(x).permute(2, 0, 1).contiguous() * 2).numpy(), np.float32, seed)
    assert seen == {"dim": (3, 2, 0), "same": True}


@pytest.mark.parametrize("call", ["item", "float", "int"])
def test_reading_a_value_while_tracing_is_refused_with_advice(call):
    fn = {"item": lambda t: t.sum() * t.amax().item(),
          "float": lambda t: t * float(t.sum()),
          "int": lambda t: t * int(t.sum())}[call]
    text = refused(fn, np.ones((2, 3), np.float32),
                   match=("no value while tracing", "tilefuse.where", "return the tensor", HERE))
    assert {"item": "x.item()", "float": "float(x)", "int": "int(x)"}[call] in text


# ---------------------------------------------------------------------------
# Boolean-mask indexing
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("key", ["x > 0", "[:, mask]", "numpy mask"])
def test_boolean_mask_indexing_is_refused_clearly(key):
    x = np.arange(12.0, dtype=np.float32).reshape(3, 4) - 5
    fn = {"x > 0": lambda t: t[t > 0],
          "[:, mask]": lambda t: t[:, t[0] > 0],
          "numpy mask": lambda t: t[x > 0]}[key]
    text = refused(fn, x, match=("boolean mask", "depends on", "static shapes",
                                 "tilefuse.where(mask, x, 0)", "tensor<3x4xf32>", HERE))
    assert "gather" not in text and "i1 index" not in text


def test_the_suggested_where_computes_the_masked_sum(rng, seed):
    x = rng.standard_normal((5, 7)).astype(np.float32)
    want = np.asarray(torch.tensor(x)[torch.tensor(x) > 0].sum())
    assert_matches("where(x > 0, x, 0).sum()", lambda t: tilefuse.where(t > 0, t, 0).sum(), [x],
                   want, np.float32, seed)


# ---------------------------------------------------------------------------
# tilefuse.functional: leaky_relu, rms_norm, pad, normalize, l1_loss
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("slope", [0.01, 0.2])
def test_leaky_relu_matches_torch(dtype, slope, rng, seed):
    x = rng.standard_normal((4, 9)).astype(dtype)
    x[0, :3] = 0.0  # the gradient at 0 is the slope's, as PyTorch
    tx = torch.tensor(x)
    kwargs = {} if slope == 0.01 else {"negative_slope": slope}
    assert_matches("leaky_relu", lambda t: F.leaky_relu(t, **kwargs), [x],
                   torch.nn.functional.leaky_relu(tx, **kwargs).numpy(), dtype, seed)
    assert_grads_match("leaky_relu", lambda t: F.leaky_relu(t, **kwargs),
                       lambda t: torch.nn.functional.leaky_relu(t, **kwargs), [x], dtype, seed)


RMS_CASES = {
    "last dim, weight": ((4, 6), 6, True, None),
    "last dim, no weight": ((4, 6), (6,), False, None),
    "two dims, eps": ((2, 3, 5), (3, 5), True, 1e-3),
    "1-d": ((7,), 7, True, None),
}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", list(RMS_CASES))
def test_rms_norm_matches_torch(case, dtype, rng, seed):
    shape, normalized, with_weight, eps = RMS_CASES[case]
    x = rng.standard_normal(shape).astype(dtype)
    x[..., 0] *= 1e-3  # small values: eps matters
    wshape = (normalized,) if isinstance(normalized, int) else normalized
    w = (rng.standard_normal(wshape) + 1).astype(dtype)

    def ours(t, u):
        return F.rms_norm(t, normalized, u if with_weight else None, eps=eps)

    def theirs(t, u):
        return torch.nn.functional.rms_norm(t, list(wshape), u if with_weight else None, eps=eps)

    want = theirs(torch.tensor(x), torch.tensor(w)).numpy()
    assert_matches(f"rms_norm {case}", ours, [x, w], want, dtype, seed)
    assert_grads_match(f"rms_norm {case}", ours, theirs, [x, w], dtype, seed,
                       wrt=(0, 1) if with_weight else (0,))


def test_rms_norm_default_eps_is_the_dtypes_machine_epsilon():
    """With all-zero rows the result is 0 / sqrt(eps) = 0 either way; a row of
    1e-4 tells eps=finfo.eps (f32: 1.19e-7) from e.g. 1e-5 or 1e-6."""
    x = np.full((2, 4), 1e-4, np.float32)
    got = tilefuse.trace(lambda t: F.rms_norm(t, 4), x).interpret(x)
    want = torch.nn.functional.rms_norm(torch.tensor(x), [4]).numpy()
    assert max_rel_err(got, want) <= 1e-6, (got, want)


def test_rms_norm_refuses_a_mismatched_shape():
    refused(lambda t: F.rms_norm(t, 3), np.ones((2, 4), np.float32),
            match=("rms_norm", "normalized_shape [3]", "[2, 4]"))
    refused(lambda t: F.rms_norm(t, 4, np.ones(3, np.float32)), np.ones((2, 4), np.float32),
            match=("rms_norm", "weight", "[3]"))


PAD_CASES = {
    "constant, last dim": ((2, 3, 5), (1, 2), "constant", None),
    "constant, two dims, value": ((2, 3, 5), (2, 0, 1, 3), "constant", 1.5),
    "constant, crop and pad": ((2, 4, 6), (-1, 2, 1, -2), "constant", None),
    "constant, three dims": ((2, 3, 4), (1, 1, 0, 2, 1, 0), "constant", -2.0),
    "reflect 1d": ((2, 3, 6), (2, 3), "reflect", None),
    "reflect 2d": ((1, 2, 4, 5), (1, 2, 3, 1), "reflect", None),
    "replicate 1d": ((2, 3, 4), (3, 1), "replicate", None),
    "replicate 2d": ((1, 2, 3, 4), (2, 2, 1, 3), "replicate", None),
    "circular 1d": ((2, 3, 5), (2, 5), "circular", None),
    "circular 2d": ((1, 2, 3, 4), (1, 3, 2, 1), "circular", None),
}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", list(PAD_CASES))
def test_pad_matches_torch(case, dtype, rng, seed):
    shape, amounts, mode, value = PAD_CASES[case]
    x = rng.standard_normal(shape).astype(dtype)
    kwargs = {"mode": mode} if value is None else {"mode": mode, "value": value}

    def theirs(t):
        return torch.nn.functional.pad(t, amounts, **kwargs)

    assert_matches(f"pad {case}", lambda t: F.pad(t, amounts, **kwargs), [x],
                   theirs(torch.tensor(x)).numpy(), dtype, seed)
    assert_grads_match(f"pad {case}", lambda t: F.pad(t, amounts, **kwargs), theirs, [x],
                       dtype, seed)


def test_pad_of_integers_keeps_the_dtype(seed):
    x = np.arange(6, dtype=np.int64).reshape(2, 3)
    want = torch.nn.functional.pad(torch.tensor(x), (1, 2), value=7).numpy()
    assert_matches("pad i64", lambda t: F.pad(t, (1, 2), value=7), [x], want, np.float32, seed)


def test_pad_refusals_name_the_problem():
    x = np.ones((2, 3, 4), np.float32)
    refused(lambda t: F.pad(t, (1, 2, 3)), x, match=("pad", "divisible by 2"))
    refused(lambda t: F.pad(t, (1,) * 8), x, match=("pad", "4 dims", "[2, 3, 4]"))
    refused(lambda t: F.pad(t, (4, 0), mode="reflect"), x,
            match=("reflect", "smaller than", "size 4"))
    refused(lambda t: F.pad(t, (-1, 0), mode="replicate"), x, match=("replicate", ">= 0"))
    refused(lambda t: F.pad(t, (1, 0), mode="wrap"), x, match=("mode", "'wrap'", "circular"))
    refused(lambda t: F.pad(t, (-3, -2)), x, match=("negative size",))


NORMALIZE_CASES = {
    "p=2, dim=1": ((4, 6), 2.0, 1),
    "p=1, dim=-1": ((3, 2, 5), 1.0, -1),
    "p=3, dim=0": ((4, 5), 3.0, 0),
    "p=inf": ((3, 7), float("inf"), 1),
}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", list(NORMALIZE_CASES))
def test_normalize_matches_torch(case, dtype, rng, seed):
    shape, p, dim = NORMALIZE_CASES[case]
    x = rng.standard_normal(shape).astype(dtype)

    def theirs(t):
        return torch.nn.functional.normalize(t, p=p, dim=dim)

    assert_matches(f"normalize {case}", lambda t: F.normalize(t, p=p, dim=dim), [x],
                   theirs(torch.tensor(x)).numpy(), dtype, seed)
    assert_grads_match(f"normalize {case}", lambda t: F.normalize(t, p=p, dim=dim), theirs,
                       [x], dtype, seed)


def test_normalize_of_a_zero_row_has_zero_values_and_gradients(seed):
    x = np.array([[0.0, 0.0, 0.0], [3.0, 0.0, 4.0]])
    assert_matches("normalize zero row", F.normalize, [x],
                   torch.nn.functional.normalize(torch.tensor(x)).numpy(), np.float64, seed)
    assert_grads_match("normalize zero row", F.normalize, torch.nn.functional.normalize, [x],
                       np.float64, seed)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_l1_loss_matches_torch(reduction, dtype, rng, seed):
    x = rng.standard_normal((5, 3)).astype(dtype)
    y = rng.standard_normal((5, 3)).astype(dtype)
    y[0] = x[0]  # |x - y| at 0: gradient 0, as PyTorch's sign

    def theirs(a, b):
        return torch.nn.functional.l1_loss(a, b, reduction=reduction)

    def ours(a, b):
        return F.l1_loss(a, b, reduction=reduction)

    assert_matches(f"l1_loss {reduction}", ours, [x, y],
                   theirs(torch.tensor(x), torch.tensor(y)).numpy(), dtype, seed)
    assert_grads_match(f"l1_loss {reduction}", ours, theirs, [x, y], dtype, seed, wrt=(0, 1))


# ---------------------------------------------------------------------------
# Short errors for a loss that is not 0-d
# ---------------------------------------------------------------------------

def _not_a_loss(x):
    y = x * 2.0  # NOT_A_LOSS_LINE
    return y


def _line_of(marker):
    with open(__file__) as f:
        for n, line in enumerate(f, 1):
            if marker in line and "_line_of" not in line:
                return n
    raise AssertionError(marker)


def assert_short(text):
    assert "func.func" not in text and "graph.mul" not in text and "%arg0" not in text, text
    assert len(text) < 600, f"{len(text)} characters: {text}"


def test_value_and_grad_of_a_non_scalar_names_the_line_and_the_fix():
    x = np.ones((3, 4), np.float32)
    g = tilefuse.trace(_not_a_loss, x)
    with pytest.raises(tilefuse.CompileError) as info:
        g.value_and_grad(wrt=(0,))
    text = str(info.value)
    assert_short(text)
    for part in ("value_and_grad", "_not_a_loss", "tensor<3x4xf32>", "0-d",
                 f"{HERE}:{_line_of('NOT_A_LOSS_LINE')}", "loss.mean()"):
        assert part in text, f"{part!r} not in: {text}"


def test_value_and_grad_argument_errors_are_short():
    x, ids = np.ones((3, 4), np.float32), np.arange(3)
    g = tilefuse.trace(lambda a, i: a[i].sum(), x, ids)
    for wrt, parts in (((2,), ("argument index 2", "out of range", "0..1")),
                       ((1,), ("argument 1", "tensor<3xi64>", "floating-point", "wrt"))):
        with pytest.raises(tilefuse.CompileError) as info:
            g.value_and_grad(wrt=wrt)
        assert_short(str(info.value))
        for part in parts + (HERE,):
            assert part in str(info.value), f"{part!r} not in: {info.value}"


def test_compile_train_step_with_a_vector_loss_names_the_line():
    def loss_fn(params, batch):
        return batch["x"] @ params["w"]  # VECTOR_LOSS_LINE

    params = {"w": np.ones((4, 2), np.float32)}
    with pytest.raises(tilefuse.CompileError) as info:
        tilefuse.compile_train_step(loss_fn, params, {"x": np.ones((3, 4), np.float32)},
                                    tilefuse.optim.SGD(lr=0.1), device="cpu")
    text = str(info.value)
    assert_short(text)
    for part in ("compile_train_step", "loss_fn", "tensor<3x2xf32>",
                 f"{HERE}:{_line_of('VECTOR_LOSS_LINE')}", "loss.mean()"):
        assert part in text, f"{part!r} not in: {text}"


def test_diagnostics_of_the_compiler_lose_their_ir_listing():
    """What the compiler itself reports (here: a parsed graph, asked below
    the Python checks) keeps the reason and drops MLIR's listing of the op
    (TILEFUSE_ERROR_IR=1 keeps it)."""
    from tilefuse._tracing import _short_errors
    g = tilefuse.trace(_not_a_loss, np.ones((3, 4), np.float32))
    with pytest.raises(tilefuse.CompileError) as info:
        _short_errors(g._graph.value_and_grad, [0])
    text = str(info.value)
    assert_short(text)
    assert "must be a 0-d floating-point loss" in text and "TILEFUSE_ERROR_IR" in text
    os.environ["TILEFUSE_ERROR_IR"] = "1"
    try:
        with pytest.raises(tilefuse.CompileError) as info:
            _short_errors(g._graph.value_and_grad, [0])
    finally:
        del os.environ["TILEFUSE_ERROR_IR"]
    assert "func.func" in str(info.value)


# ---------------------------------------------------------------------------
# Reports print; compile_stages; a loaded step's loss is a float
# ---------------------------------------------------------------------------

def _mlp(x, w1, w2):
    return F.relu(x @ w1) @ w2


def test_reports_print_as_tables_and_stay_lists(rng):
    args = [rng.standard_normal(s).astype(np.float32) for s in ((4, 8), (8, 16), (16, 3))]
    fn = tilefuse.compile(_mlp, *args, device="cpu")
    report = fn.report()
    assert isinstance(report, list) and all(isinstance(r, dict) for r in report)
    assert repr(report) == str(report)
    assert re.search(r"kernel\s+kind\s+fused ops", str(report)), str(report)
    for row in report:
        assert row["name"] in str(report)
    fused = tilefuse.trace(_mlp, *args).fuse("cpu").report()
    assert isinstance(fused, list) and fused == [dict(r) for r in fused]
    text = str(fused)
    assert repr(fused) == text and text.splitlines()[0] == f"{len(fused)} kernels"
    assert re.search(r"kernel\s+kind\s+domain\s+reduced\s+fused ops", text), text
    for row in fused:
        assert row["name"] in text and row["kind"] in text


def _linear_loss(params, batch):
    return F.mse_loss(batch["x"] @ params["w"], batch["y"])


def test_compile_stages_are_public(rng):
    args = [rng.standard_normal(s).astype(np.float32) for s in ((4, 8), (8, 16), (16, 3))]
    fn = tilefuse.compile(_mlp, *args, device="cpu")
    stages = fn.compile_stages
    assert stages == list(fn._exe.compile_stages) and stages
    assert all(isinstance(n, str) and isinstance(s, float) and s >= 0 for n, s in stages)
    assert tilefuse.CompiledFunction.compile_stages.__doc__
    params = {"w": rng.standard_normal((4, 2)).astype(np.float32)}
    batch = {"x": rng.standard_normal((8, 4)).astype(np.float32),
             "y": rng.standard_normal((8, 2)).astype(np.float32)}
    step = tilefuse.compile_train_step(_linear_loss, params, batch, tilefuse.optim.SGD(lr=0.1),
                                       device="cpu")
    assert step.compile_stages == list(step.compiled._exe.compile_stages)


def test_a_loaded_train_step_returns_a_float_like_the_train_step(rng, tmp_path):
    params = {"w": rng.standard_normal((4, 2)).astype(np.float32)}
    batch = {"x": rng.standard_normal((8, 4)).astype(np.float32),
             "y": rng.standard_normal((8, 2)).astype(np.float32)}
    opt = tilefuse.optim.Adam(lr=1e-2)
    step = tilefuse.compile_train_step(_linear_loss, params, batch, opt, device="cpu")
    step.export(tmp_path / "step.tfa")
    loaded = tilefuse.load(tmp_path / "step.tfa")
    loaded.load_state_dict(step.kept_state())
    for t in (1, 2, 3):
        want = step(batch)
        got = loaded(batch, np.int64(t), np.float64(opt.lr))
        assert type(got) is float and type(want) is float, (type(got), type(want))
        assert got == want, f"step {t}: loaded {got!r}, compiled {want!r}"
