"""Tracing: IR round trips, explicit broadcasts, dtype promotion, nested
arguments and results, and how Python scalars and numpy arrays enter a graph."""
import re

import numpy as np
import pytest

import tilefuse
import tilefuse.functional as F


def _leaves(x):
    if isinstance(x, dict):
        return [leaf for k in sorted(x) for leaf in _leaves(x[k])]
    if isinstance(x, (list, tuple)):
        return [leaf for item in x for leaf in _leaves(item)]
    return [x]


def assert_same_results(what, got, want):
    g, w = _leaves(got), _leaves(want)
    assert len(g) == len(w), f"{what}: {len(g)} results, want {len(w)}"
    for k, (a, b) in enumerate(zip(g, w)):
        a, b = np.asarray(a), np.asarray(b)
        assert a.dtype == b.dtype and a.shape == b.shape, \
            f"{what}: result {k} is {a.dtype}{a.shape}, want {b.dtype}{b.shape}"
        if not np.array_equal(a, b, equal_nan=True):
            if a.dtype.kind in "iub":
                err = max(abs(int(u) - int(v)) for u, v in zip(a.ravel(), b.ravel()))
            else:
                err = float(np.nanmax(np.abs(a.astype(np.float64) - b.astype(np.float64))))
            raise AssertionError(f"{what}: result {k} differs, max error {err}: got {a!r}, "
                                 f"want {b!r}")


# ---------------------------------------------------------------------------
# g.mlir() -> tilefuse.parse -> the same values
# ---------------------------------------------------------------------------
def _mlp(x, w1, b1, w2, ids, seed):
    h = F.gelu(F.linear(x, w1, b1), approximate="tanh")
    h = F.dropout(h, 0.2, seed=seed)
    logits = F.linear(h, w2)
    return F.cross_entropy(logits, ids), logits.argmax(-1), F.softmax(logits, 0)


def _norms(x, w, b):
    y = F.layer_norm(x, x.shape[-1], w, b)
    m = y.mean(-1, keepdim=True)
    return F.log_softmax(y - m, -1), y.amax(0), y.amin(1, keepdim=True), F.silu(y)


def _layout(x, table, ids):
    e = F.embedding(ids, table)                    # [2, 3, 5]
    z = tilefuse.cat([e, e[:, ::2]], 1)            # [2, 5, 5]
    z = z.permute(2, 0, 1).reshape(5, -1)          # [5, 10]
    s = tilefuse.stack([x[:, 0], x[:, 1]], -1)     # [3, 2]
    w = tilefuse.where(x > 0, x, x.exp() - 1.0)
    return z.sum(0), s, (w.abs() * 10).to("f64").sqrt().to(np.int32), x[None, 1:, ::2].expand(4, 2, 2)


def _integers(a, b):
    return (a * b - a).maximum(b), abs(-a), (a / b), (a >= b), (a == 3).sum()


def _case_inputs(rng):
    f = np.float32
    return {
        "mlp": (_mlp, (rng.standard_normal((4, 7)).astype(f), rng.standard_normal((9, 7)).astype(f),
                       rng.standard_normal(9).astype(f), rng.standard_normal((5, 9)).astype(f),
                       np.array([0, 4, -100, 2]), np.int64(17))),
        "norms": (_norms, (rng.standard_normal((3, 1025)), rng.standard_normal(1025),
                           rng.standard_normal(1025))),
        "layout": (_layout, (rng.standard_normal((3, 4)).astype(f),
                             rng.standard_normal((10334, 5)).astype(f),
                             rng.integers(0, 10334, (2, 3)))),
        "integers": (_integers, (rng.integers(-9, 9, (3, 5)).astype(np.int32),
                                 rng.integers(1, 9, (5,)).astype(np.int32))),
    }


@pytest.mark.parametrize("case", ["mlp", "norms", "layout", "integers"])
def test_mlir_round_trip_interprets_the_same(case, rng):
    fn, args = _case_inputs(rng)[case]
    g = tilefuse.trace(fn, *args)
    text = g.mlir()
    parsed = tilefuse.parse(text)
    assert parsed.mlir() == text, f"{case}: printing the parsed module changed the text"
    assert parsed.inputs == g.inputs and parsed.outputs == g.outputs
    want = g.interpret(*args)
    got = parsed.interpret(*_leaves(list(args)))
    assert_same_results(case, list(got) if isinstance(got, tuple) else [got], _leaves(want))


def test_round_trip_keeps_function_name():
    def my_step(a):
        return a * 2

    x = np.ones(3, np.float32)
    g = tilefuse.trace(my_step, x)
    assert "func.func @my_step(" in g.mlir()
    assert tilefuse.parse(g.mlir(), "my_step").interpret(x).tolist() == [2.0, 2.0, 2.0]


def test_graph_signature_and_summary():
    g = tilefuse.trace(lambda a, b: (a @ b, a.sum()), np.ones((3, 4), np.float32),
                       np.ones((4, 2), np.float64))
    assert g.inputs == (("f32", (3, 4)), ("f64", (4, 2)))
    assert g.outputs == (("f64", (3, 2)), ("f32", ()))
    summary = g.summary()
    assert "graph.matmul x1" in summary and "f32[3, 4]" in summary and "f64[3, 2]" in summary


# ---------------------------------------------------------------------------
# Broadcasts are explicit in the IR
# ---------------------------------------------------------------------------
def _ops(text, name):
    return re.findall(rf"graph\.{name}\b[^\n]*", text)


def test_broadcast_rhs_is_explicit():
    g = tilefuse.trace(lambda a, b: a + b, np.ones((3, 4), np.float32), np.ones(4, np.float32))
    text = g.mlir()
    (bcast,) = _ops(text, "broadcast_in_dim")
    assert "dims = array<i64: 1>" in bcast and "(tensor<4xf32>) -> tensor<3x4xf32>" in bcast
    (add,) = _ops(text, "add")
    assert add.endswith(": tensor<3x4xf32>"), add  # both operands have the result type


def test_broadcast_both_operands():
    g = tilefuse.trace(lambda a, b: a * b, np.ones((3, 1), np.float32),
                       np.ones((1, 4), np.float32))
    bcasts = _ops(g.mlir(), "broadcast_in_dim")
    assert len(bcasts) == 2
    assert any("(tensor<3x1xf32>) -> tensor<3x4xf32>" in b for b in bcasts)
    assert any("(tensor<1x4xf32>) -> tensor<3x4xf32>" in b for b in bcasts)


def test_broadcast_new_leading_dims():
    g = tilefuse.trace(lambda a, b: a - b, np.ones((2, 3, 4), np.float64),
                       np.ones((3, 1), np.float64))
    (bcast,) = _ops(g.mlir(), "broadcast_in_dim")
    assert "dims = array<i64: 1, 2>" in bcast and "-> tensor<2x3x4xf64>" in bcast


def test_no_broadcast_for_equal_shapes():
    g = tilefuse.trace(lambda a, b: a + b, np.ones((3, 4), np.float32),
                       np.ones((3, 4), np.float32))
    assert not _ops(g.mlir(), "broadcast_in_dim")


def test_expand_and_matmul_batch_broadcasts_are_explicit():
    g = tilefuse.trace(lambda a: a.expand(2, 3, 4), np.ones((3, 1), np.float32))
    assert _ops(g.mlir(), "broadcast_in_dim")
    g = tilefuse.trace(lambda a, b: a @ b, np.ones((2, 1, 3, 4), np.float32),
                       np.ones((5, 4, 6), np.float32))
    text = g.mlir()
    assert len(_ops(text, "broadcast_in_dim")) == 2
    (mm,) = _ops(text, "matmul")
    assert "(tensor<2x5x3x4xf32>, tensor<2x5x4x6xf32>) -> tensor<2x5x3x6xf32>" in mm


def test_scalar_operand_becomes_a_fill_of_the_full_shape():
    g = tilefuse.trace(lambda a: a * 2.5, np.ones((3, 4), np.float32))
    text = g.mlir()
    assert not _ops(text, "broadcast_in_dim")
    assert any("2.500000e+00 : tensor<3x4xf32>" in f for f in _ops(text, "full"))


# ---------------------------------------------------------------------------
# dtype promotion
# ---------------------------------------------------------------------------
F32 = np.ones((2, 3), np.float32)
F64 = np.ones((2, 3), np.float64)
I32 = np.arange(6, dtype=np.int32).reshape(2, 3)
I64 = np.arange(6, dtype=np.int64).reshape(2, 3)
B = np.array([[True, False, True], [False, True, False]])

PROMOTION_CASES = {
    "f32 + f64 -> f64": (lambda a, b: a + b, (F32, F64), np.float64),
    "f64 * f32 -> f64": (lambda a, b: a * b, (F64, F32), np.float64),
    "i32 + 1.5 -> f32": (lambda a: a + 1.5, (I32,), np.float32),
    "i64 * 0.5 -> f32": (lambda a: a * 0.5, (I64,), np.float32),
    "2.0 - i32 -> f32": (lambda a: 2.0 - a, (I32,), np.float32),
    "i32 + i64 -> i64": (lambda a, b: a + b, (I32, I64), np.int64),
    "i64 + f32 -> f32": (lambda a, b: a + b, (I64, F32), np.float32),
    "i32 / i32 -> f32": (lambda a, b: a / b, (I32, I32 + 1), np.float32),
    "i32 ** 2 -> f32": (lambda a: a ** 2, (I32,), np.float32),
    "bool + 1 -> i64": (lambda c: c.to("i64") + 1, (B,), np.int64),
    "bool.sum() -> i64": (lambda c: c.sum(), (B,), np.int64),
    "i32.mean() -> f32": (lambda a: a.mean(), (I32,), np.float32),
    "i32.exp() -> f32": (lambda a: a.exp(), (I32,), np.float32),
    "where(bool, i32, f32) -> f32": (lambda c, a, b: tilefuse.where(c, a, b), (B, I32, F32),
                                     np.float32),
    "where(bool, f32, f64) -> f64": (lambda c, a, b: tilefuse.where(c, a, b), (B, F32, F64),
                                     np.float64),
    "cat([f32, f64]) -> f64": (lambda a, b: tilefuse.cat([a, b]), (F32, F64), np.float64),
    "cat([i32, f32]) -> f32": (lambda a, b: tilefuse.cat([a, b], 1), (I32, F32), np.float32),
    "f32 @ f64 -> f64": (lambda a, b: a @ b.T, (F32, F64), np.float64),
    "f32 > f64 -> bool": (lambda a, b: a > b, (F32, F64), np.bool_),
    "i32.argmax() -> i64": (lambda a: a.argmax(), (I32,), np.int64),
}


@pytest.mark.parametrize("case", list(PROMOTION_CASES))
def test_dtype_promotion(case):
    fn, args, want = PROMOTION_CASES[case]
    g = tilefuse.trace(fn, *args)
    out = g.interpret(*args)
    assert out.dtype == np.dtype(want), f"{case}: got {out.dtype}"
    name = {np.dtype(np.float32): "f32", np.dtype(np.float64): "f64", np.dtype(np.int32): "i32",
            np.dtype(np.int64): "i64", np.dtype(np.bool_): "i1"}[np.dtype(want)]
    assert g.outputs[0][0] == name


def test_promotion_inserts_explicit_cast_and_computes_in_the_wider_type(rng):
    a = rng.standard_normal(5).astype(np.float32)
    b = rng.standard_normal(5)
    g = tilefuse.trace(lambda x, y: x + y, a, b)
    text = g.mlir()
    assert _ops(text, "cast") and "(tensor<5xf32>) -> tensor<5xf64>" in _ops(text, "cast")[0]
    assert np.array_equal(g.interpret(a, b), a.astype(np.float64) + b)


def test_traced_tensor_metadata():
    seen = {}

    def fn(a, b):
        c = a + b
        seen.update(dtype=c.dtype, shape=c.shape, ndim=c.ndim, numel=c.numel(), len=len(c),
                    size1=c.size(1), repr=repr(c))
        return c

    tilefuse.trace(fn, np.ones((2, 3), np.float32), np.ones(3, np.float64))
    assert seen == {"dtype": "f64", "shape": (2, 3), "ndim": 2, "numel": 6, "len": 2,
                    "size1": 3, "repr": "Tensor(f64[2, 3])"}


# ---------------------------------------------------------------------------
# Python scalars keep the tensor's dtype
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
def test_python_float_scalar_keeps_tensor_dtype(dtype, rng):
    x = rng.standard_normal((3, 4)).astype(dtype)
    out = tilefuse.trace(lambda a: (a + 0.1, 0.1 * a, a / 3.0, a > 0.1), x).interpret(x)
    # The scalar is rounded to the tensor's dtype first (as numpy's weak scalars).
    s, three = dtype(0.1), dtype(3.0)
    assert_same_results("scalar ops", out, [x + s, s * x, x / three, x > s])


@pytest.mark.parametrize("dtype", [np.int32, np.int64], ids=["i32", "i64"])
def test_python_int_scalar_keeps_integer_dtype(dtype, rng):
    x = rng.integers(-100, 100, (3, 4)).astype(dtype)
    out = tilefuse.trace(lambda a: (a + 7, 3 * a, a - True, a.maximum(0)), x).interpret(x)
    assert_same_results("int scalar ops", out, [x + 7, 3 * x, x - 1, np.maximum(x, 0)])


def test_python_int_scalar_on_float_tensor_keeps_float_dtype():
    x = np.linspace(-2, 2, 7).astype(np.float32)
    out = tilefuse.trace(lambda a: (a * 2, a + 1, 2 ** a), x).interpret(x)
    assert_same_results("int scalar on f32", out, [x * 2, x + 1,
                                                   (2.0 ** x.astype(np.float64)).astype(np.float32)])


def test_numpy_scalar_keeps_tensor_dtype():
    x = np.ones(3, np.float32)
    out = tilefuse.trace(lambda a: (a + np.float64(0.5), a * np.int64(3)), x).interpret(x)
    assert_same_results("numpy scalars", out, [x + np.float32(0.5), x * np.float32(3)])


def test_large_int64_scalar_is_exact():
    x = np.array([1, 2, 3], np.int64)
    out = tilefuse.trace(lambda a: a + (2 ** 60 + 1), x).interpret(x)
    assert_same_results("i64 + (2**60 + 1)", [out], [x + (2 ** 60 + 1)])


def test_numpy_array_constant_keeps_its_values(rng):
    c = rng.standard_normal((3, 4))  # f64 constant
    x = rng.standard_normal((3, 4)).astype(np.float32)
    g = tilefuse.trace(lambda a: a + c, x)
    assert _ops(g.mlir(), "constant")
    assert_same_results("f32 + f64 constant", [g.interpret(x)], [x.astype(np.float64) + c])


# ---------------------------------------------------------------------------
# Nested arguments and results
# ---------------------------------------------------------------------------
def test_nested_dict_and_tuple_arguments_and_outputs(rng):
    params = {
        "w": rng.standard_normal((4, 3)).astype(np.float32),
        "b": rng.standard_normal(4).astype(np.float32),
        "blocks": ({"g": rng.standard_normal(4).astype(np.float32)},
                   [rng.standard_normal(4).astype(np.float32)]),
    }
    batch = (rng.standard_normal((2, 3)).astype(np.float32), np.array([1, 3]))

    def step(p, data):
        x, y = data
        h = F.linear(x, p["w"], p["b"]) * p["blocks"][0]["g"] + p["blocks"][1][0]
        return {"loss": F.cross_entropy(h, y), "aux": (h, [h.sum(), {"y": y * 2}])}

    g = tilefuse.trace(step, params, batch)
    # Leaves are flattened with dict keys sorted: b, blocks.g, blocks[1][0], w, x, y.
    assert g.inputs == (("f32", (4,)), ("f32", (4,)), ("f32", (4,)), ("f32", (4, 3)),
                        ("f32", (2, 3)), ("i64", (2,)))
    out = g.interpret(params, batch)
    assert set(out) == {"loss", "aux"}
    assert isinstance(out["aux"], tuple) and isinstance(out["aux"][1], list)
    assert isinstance(out["aux"][1][1], dict)

    x, y = batch
    h = (x.astype(np.float64) @ params["w"].T + params["b"]) * params["blocks"][0]["g"] \
        + params["blocks"][1][0]
    np.testing.assert_allclose(out["aux"][0], h, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out["aux"][1][0], h.sum(), rtol=1e-5, atol=1e-5)
    assert out["aux"][1][1]["y"].tolist() == [2, 6]
    shifted = h - h.max(-1, keepdims=True)
    logp = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    np.testing.assert_allclose(out["loss"], -logp[[0, 1], y].mean(), rtol=1e-5, atol=1e-6)


def test_single_output_is_returned_bare_and_tuple_of_one_stays_a_tuple():
    x = np.ones(2, np.float32)
    assert isinstance(tilefuse.trace(lambda a: a * 2, x).interpret(x), np.ndarray)
    out = tilefuse.trace(lambda a: (a * 2,), x).interpret(x)
    assert isinstance(out, tuple) and len(out) == 1
    out = tilefuse.trace(lambda a: [a, a + 1], x).interpret(x)
    assert isinstance(out, list) and len(out) == 2


def test_returning_an_argument_unchanged():
    x = np.arange(3, dtype=np.float32)
    out = tilefuse.trace(lambda a, b: (b, a), x, x * 2).interpret(x, x * 2)
    assert_same_results("identity", out, [x * 2, x])


def test_trace_checks_argument_count():
    x = np.ones(2, np.float32)
    with pytest.raises(tilefuse.CompileError, match="argument"):
        tilefuse.trace(lambda a: a, x, x)


# ---------------------------------------------------------------------------
# interpret() accepts any array memory layout
# ---------------------------------------------------------------------------
def test_interpret_accepts_fortran_and_strided_arrays(rng):
    base = rng.standard_normal((4, 6)).astype(np.float32)
    g = tilefuse.trace(lambda a: a * 2 + 1, base[:, ::2])
    for arr in (np.asfortranarray(base[:, ::2]), base[:, ::2], base[:, ::2].copy()):
        assert_same_results("layout", [g.interpret(arr)], [arr * 2 + 1])


def test_interpret_handles_non_native_byte_order():
    x = np.arange(4, dtype=np.float32)
    g = tilefuse.trace(lambda a: a * 2, x)
    assert_same_results("big-endian argument", [g.interpret(x.astype(">f4"))], [x * 2])


def test_non_native_byte_order_constant():
    x = np.arange(4, dtype=np.float32)
    c = x.astype(">f4")
    out = tilefuse.trace(lambda a: a + c, x).interpret(x)
    assert_same_results("big-endian constant", [out], [x * 2])
