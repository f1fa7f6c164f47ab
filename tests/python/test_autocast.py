"""Mixed precision (passes/Autocast.cpp, Graph.autocast, `precision=` of
tilefuse.compile / compile_train_step / train_step_graph and
`tilefuse-compile --precision`).

* IR: under bf16/fp16 matmul and linear read low-precision casts of their
  operands and produce the low precision; softmax, log_softmax, layer_norm,
  exp/log, sums and the losses run in f32; other ops follow their widest
  float operand, splat fills (Python scalars) never widening; arguments and
  results keep their types; f64 is left alone; "fp32" changes nothing.
  `tilefuse.autocast(False)` regions (with `autocast(True)` nested inside
  them turning the policy back on) and `keep_fp32` op kinds stay f32.
* Numerics: the autocast graph's interpreter result is within BF16_VS_F32
  of the f32 one; compiled kernels (which keep bf16 intermediates in f32
  inside a fusion, while the interpreter rounds every op) are within
  BF16_TOLERANCE of the autocast interpreter, and their softmax results
  within a bound relative to each probability (assert_probabilities_close).
  Gradients of f32 parameters come back f32 and close to the f32 gradients.
* Training gpt2_mini and mlp_mnist for 20 steps on one repeated batch,
  which f32 training fits (its loss falls by at least 10x the band below),
  in bf16 (and gpt2_mini in fp16, every step applied by the loss scaling)
  gives losses within 2% of f32 training from the same parameters at every
  step, falling as far, keeps the parameters f32, and needs a smaller
  memory-plan peak.
* Errors: unknown precision or keep_fp32 op names (whatever the precision)
  are CompileErrors with the reason, from Graph.autocast, compile and
  compile_train_step.
* tilefuse-compile --precision=bf16 builds the same function as
  parse(text).autocast("bf16").compile("cpu"), and with --train a step whose
  kept weights stay f32; --precision=bogus fails with the reason.
"""
import functools
import math
import re
import shutil
import subprocess

import numpy as np
import pytest

import tilefuse
import tilefuse.functional as F
from tilefuse import workloads as W

from backend_checks import assert_close_to_scale, bf16
from fusion_checks import assert_compiled_close

# Tolerances, |got - want| <= RTOL * |want| + ATOL * max(1, max |want|)
# elementwise (the absolute part scaled by the result's magnitude, as in
# fusion_checks.COMPILED_TOLERANCES).
#
# Compiled vs interpreted, both under the bf16 policy, for results computed
# from GEMMs (losses, activations, gradients, sums): backend_checks.TOLERANCES
# is keyed by the numpy dtype of the result and has no bf16 entry (numpy has
# no bfloat16; autocast results are f32 anyway, and its f32 entry, 1e-5, is for
# f32 work). A GEMM's bf16 result can round one bf16 ulp apart (2^-7 relative
# at the low end of a binade) between the BLAS f32 accumulation and the
# interpreter's double one, and kernels keep bf16 intermediates in f32 where
# the interpreter rounds them: 2^-7 relative. Where a GEMM's terms cancel,
# its rounding is relative to the terms, not to the result: the absolute
# part, 2^-7 of the result's scale (max(1, max |want|)), stands for that.
# Softmax results are probabilities, whose size says nothing about that
# scale: they are held to assert_probabilities_close instead.
BF16_TOLERANCE = (2.0 ** -7, 2.0 ** -7)
# bf16 policy vs f32 (interpreter vs interpreter): a few bf16 roundings along
# a chain of GEMMs and pointwise ops, ~1e-2 relative to the result's scale.
BF16_VS_F32 = (1e-2, 1e-2)
# The same for gradients (the backward GEMMs round again): 2e-2.
BF16_GRAD_VS_F32 = (2e-2, 2e-2)
# Training losses, bf16 or fp16 vs f32, relative, every step.
LOSS_RTOL = 0.02
TRAIN_STEPS = 20
# The f32 loss falls by at least this fraction over TRAIN_STEPS: a run that
# did not train (lr 0, every step skipped) stays outside LOSS_RTOL of it.
LOSS_DROP = 10 * LOSS_RTOL


def assert_close(got, want, tol, what):
    """Every element within `tol` = (rtol, atol scaled by max(1, max|want|));
    results' dtypes and shapes equal."""
    rtol, atol = tol
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype}, want {want.dtype}"
    assert got.shape == want.shape, f"{what}: shape {got.shape}, want {want.shape}"
    assert_close_to_scale(got, want, rtol, atol, what)


def _results(r):
    return list(r) if isinstance(r, (tuple, list)) else [r]


# ---------------------------------------------------------------------------
# Softmax results: relative bounds from the logits' rounding
# ---------------------------------------------------------------------------
#
# p = softmax(z): logits that differ by at most d (per row) change log p_i
# by dz_i - sum_j p_j dz_j, at most 2d: each probability within a factor
# exp(2d) of the other, however small it is. d follows the roundings that
# can come out differently between the compiled graph and the interpreter,
# with u the unit roundoff of the low precision (2^-8 bf16, 2^-11 fp16):
# * a low-precision GEMM y = a @ b (+ bias): both accumulate in f32 or wider,
#   within K 2^-24 m of exact (K terms, m = |a| @ |b| + |bias|), then round
#   once or twice (the bias add may round again): within 4u|y| + 2K 2^-24 m
#   of each other (_gemm);
# * an elementwise f on the low precision (gelu, |gelu'| <= 1.13): 1.13 times
#   its operand's difference, plus 2u|f| for its rounding on either side;
# * a GEMM of operands that differ by da: da @ |b| more.


def _low(a, precision):
    """`a` rounded to the policy's low precision, as float64."""
    a = np.asarray(a, np.float32)
    low = bf16(a) if precision == "bf16" else a.astype(np.float16)
    return low.astype(np.float64)


def _unit_roundoff(precision):
    return 2.0 ** -8 if precision == "bf16" else 2.0 ** -11


def _gemm(a, b, u, bias=0.0):
    """(a @ b + bias, how far two low-precision evaluations of it can be
    apart), in float64."""
    y = a @ b + bias
    m = np.abs(a) @ np.abs(b) + np.abs(bias)
    return y, 4 * u * np.abs(y) + 2 * a.shape[-1] * 2.0 ** -24 * m


def _gelu(y):
    return 0.5 * y * (1 + np.vectorize(math.erf)(y / math.sqrt(2)))


def assert_probabilities_close(got, want, logit_error, what):
    """Softmax results (last dimension) `got` within a factor exp(2d) of
    `want` elementwise, d the row's largest logit difference bound in
    `logit_error` (same shape): a relative bound only, so a probability
    lost to zero, however small, fails."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape == logit_error.shape, (got.shape, want.shape)
    rel = np.expm1(2 * logit_error.max(-1, keepdims=True))
    bound = (rel + 2.0 ** -20) * np.abs(want)  # + the f32 softmax's own few roundings
    err = np.abs(got - want)
    bad = ~(err <= bound)
    if bad.any():
        at = np.unravel_index(int(np.argmax(np.where(bad, err / bound, 0))), got.shape)
        raise AssertionError(
            f"{what}: {int(bad.sum())} of {got.size} probabilities off by more than a factor "
            f"exp(2d); worst at {[int(i) for i in at]}: got {got[at]!r}, want {want[at]!r}, "
            f"relative error {err[at] / abs(want[at]):.3g}, bound {rel[at[:-1]][0]:.3g}")


def _mlp_logit_error(precision, x, w1, b1, w2, t=None):
    """How far the compiled and interpreted logits of _mlp's softmax can
    be apart under the `precision` policy, per logit."""
    u = _unit_roundoff(precision)
    x, w1, b1, w2 = (_low(a, precision) for a in (x, w1, b1, w2))
    y1, dy1 = _gemm(x, w1.T, u, b1)
    h = _gelu(y1)
    dh = 1.13 * dy1 + 2 * u * np.abs(h)
    _, dz = _gemm(_low(h, precision), w2, u)
    return dz + dh @ np.abs(w2)


# ---------------------------------------------------------------------------
# Reading the IR
# ---------------------------------------------------------------------------

_ELEMENT = re.compile(r"tensor<(?:\d+x)*([a-z]+\d*)>")


def _signature(text):
    """(argument element types+shapes, result ones) of the entry function."""
    m = re.search(r"func\.func @\w+\((.*)\) -> (.*) \{$", text, re.M)
    assert m, text[:1000]
    return re.findall(r"tensor<[^>]*>", m.group(1)), re.findall(r"tensor<[^>]*>", m.group(2))


def _ops(text, name):
    """Lines of the ops `graph.<name>`, in order."""
    return [line.strip() for line in text.splitlines()
            if re.search(rf"= graph\.{name}\b", line)]


def _types(line):
    """Element types of an op line's type signature (after the last ' : ')."""
    return _ELEMENT.findall(line.rsplit(" : ", 1)[1])


def _float_types(line):
    return {t for t in _types(line) if t in ("f16", "bf16", "f32", "f64")}


# ---------------------------------------------------------------------------
# A small MLP with a softmax and a loss
# ---------------------------------------------------------------------------

def _mlp(x, w1, b1, w2, t):
    h = F.gelu(F.linear(x, w1, b1))
    y = h @ w2
    p = F.softmax(y, -1)
    return F.cross_entropy(y, t), p, h * 0.5


def _mlp_loss(x, w1, b1, w2, t):
    return _mlp(x, w1, b1, w2, t)[0]


def _mlp_args(rng, n=16, d=32, hidden=64, classes=10):
    return (rng.standard_normal((n, d)).astype(np.float32),
            (rng.standard_normal((hidden, d)) / np.sqrt(d)).astype(np.float32),
            (0.1 * rng.standard_normal(hidden)).astype(np.float32),
            (rng.standard_normal((hidden, classes)) / np.sqrt(hidden)).astype(np.float32),
            rng.integers(0, classes, n).astype(np.int64))


# ---------------------------------------------------------------------------
# IR
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("precision,low", [("bf16", "bf16"), ("fp16", "f16")])
def test_policy_in_the_ir(rng, precision, low):
    g = tilefuse.trace(_mlp, *_mlp_args(rng))
    text = g.autocast(precision).mlir()
    gemms = _ops(text, "matmul") + _ops(text, "linear")
    assert len(gemms) == 2, text
    for line in gemms:
        assert set(_types(line)) == {low}, line
    # Sensitive ops in f32 (the loss also reads i64 targets).
    for name in ("softmax", "cross_entropy"):
        (line,) = _ops(text, name)
        assert _float_types(line) == {"f32"}, line
    # gelu follows the GEMM; the scale by a Python scalar does not widen it.
    (gelu,) = _ops(text, "gelu")
    assert _float_types(gelu) == {low}, gelu
    (mul,) = _ops(text, "mul")
    assert _float_types(mul) == {low}, mul
    # The arguments (master weights) and the results keep their types; the
    # casts are graph.cast ops.
    assert _signature(text) == _signature(g.mlir()), (text, g.mlir())
    assert _signature(text)[1] == ["tensor<f32>", "tensor<16x10xf32>", "tensor<16x64xf32>"]
    assert _ops(text, "cast"), text
    assert g.autocast(precision).interpret(*_mlp_args(rng))[0].dtype == np.float32


def test_fp32_changes_nothing(rng):
    g = tilefuse.trace(_mlp, *_mlp_args(rng))
    before = g.mlir()
    assert "bf16" in g.autocast("bf16").mlir()
    assert g.mlir() == before  # autocast returns a new graph
    assert g.autocast("fp32").mlir() == g.mlir()
    assert g.autocast("fp32", keep_fp32=("gelu",)).mlir() == g.mlir()
    assert "bf16" not in g.mlir() and "graph.cast" not in g.mlir()


def test_f64_work_is_left_alone(rng):
    args = [a.astype(np.float64) if a.dtype == np.float32 else a for a in _mlp_args(rng)]
    g = tilefuse.trace(_mlp, *args)
    assert g.autocast("bf16").mlir() == g.mlir()


def test_keep_fp32(rng):
    g = tilefuse.trace(_mlp, *_mlp_args(rng))
    text = g.autocast("bf16", keep_fp32=("matmul",)).mlir()
    (mm,) = _ops(text, "matmul")
    assert set(_types(mm)) == {"f32"}, mm
    assert "bf16" not in " ".join(_ops(text, "matmul")), text
    (lin,) = _ops(text, "linear")  # other GEMMs are still low precision
    assert set(_types(lin)) == {"bf16"}, lin
    # gelu forced to f32: it reads an f32 cast of the bf16 GEMM.
    text = g.autocast("bf16", keep_fp32=["gelu"]).mlir()
    (gelu,) = _ops(text, "gelu")
    assert _float_types(gelu) == {"f32"}, gelu
    assert set(_types(_ops(text, "linear")[0])) == {"bf16"}, text
    assert _signature(text) == _signature(g.mlir())


def test_scalars_do_not_widen_tensors_do(rng):
    """A Python scalar (splat fill) takes the bf16 operand's type; an f32
    tensor operand (an argument or a non-splat constant) widens the op."""
    x, w = (rng.standard_normal((4, 8)).astype(np.float32),
            rng.standard_normal((8, 6)).astype(np.float32))
    b = rng.standard_normal(6).astype(np.float32)
    ramp = np.arange(6, dtype=np.float32)

    def f(x, w, b):
        y = x @ w
        return y * 3.0, y + b, y - ramp, 1.0 - y
    text = tilefuse.trace(f, x, w, b).autocast("bf16").mlir()
    (mul,) = _ops(text, "mul")
    assert _float_types(mul) == {"bf16"}, mul
    (add,) = _ops(text, "add")
    assert _float_types(add) == {"f32"}, add
    subs = _ops(text, "sub")
    assert [_float_types(s) for s in subs] == [{"f32"}, {"bf16"}], subs


def _regions(x, w, v):
    a = x @ w                          # on: bf16
    with tilefuse.autocast(False):
        b = x @ v                      # off: f32
        c = F.softmax(a, -1) @ v       # off (softmax f32 anyway): f32
        with tilefuse.autocast(True):
            d = b @ w.transpose(1, 0)  # back on: bf16
        e = x @ w                      # off again after the inner region: f32
    f = e @ v.transpose(1, 0)          # on again: bf16
    return a, b, c, d, e, f


def test_autocast_false_regions_stay_f32(rng):
    x = rng.standard_normal((4, 8)).astype(np.float32)
    w = rng.standard_normal((8, 8)).astype(np.float32)
    v = rng.standard_normal((8, 8)).astype(np.float32)
    g = tilefuse.trace(_regions, x, w, v)
    text = g.autocast("bf16").mlir()
    kinds = [set(_types(m)) for m in _ops(text, "matmul")]
    assert kinds == [{"bf16"}, {"f32"}, {"f32"}, {"bf16"}, {"f32"}, {"bf16"}], text
    assert _signature(text) == _signature(g.mlir())
    # The region is a tracing state only: without a precision nothing changes,
    # and the state is restored after the trace (also after an exception).
    assert g.autocast("fp32").mlir() == g.mlir()
    with pytest.raises(ZeroDivisionError):
        with tilefuse.autocast(False):
            1 / 0
    text = tilefuse.trace(lambda x, w: x @ w, x, w).autocast("bf16").mlir()
    assert set(_types(_ops(text, "matmul")[0])) == {"bf16"}, text
    # A whole trace under autocast(False) stays f32.
    with tilefuse.autocast(False):
        g = tilefuse.trace(lambda x, w: F.gelu(x @ w), x, w)
    assert "bf16" not in g.autocast("bf16").mlir(), g.autocast("bf16").mlir()


def test_autocast_false_inside_checkpoint(rng):
    """The region marker and a checkpoint's marker nest in either order."""
    x = rng.standard_normal((4, 8)).astype(np.float32)
    w = rng.standard_normal((8, 8)).astype(np.float32)

    def block(h, w):
        with tilefuse.autocast(False):
            h = F.gelu(h @ w)
        return h @ w

    def f(x, w):
        h = tilefuse.checkpoint(block, x, w)
        with tilefuse.autocast(False):
            h = tilefuse.checkpoint(lambda h: h @ w, h)
        return (h * h).sum()
    g = tilefuse.trace(f, x, w)
    text = g.autocast("bf16").mlir()
    kinds = [set(_types(m)) for m in _ops(text, "matmul")]
    assert kinds == [{"f32"}, {"bf16"}, {"f32"}], text
    # It differentiates and compiles: the gradient w.r.t. w is f32.
    vg = g.autocast("bf16").value_and_grad((1,))
    want = vg.interpret(x, w)
    got = vg.compile("cpu")(x, w)
    for i, name in enumerate(["loss", "dw"]):
        assert got[i].dtype == want[i].dtype == np.float32, (name, got[i].dtype)
        assert_close(got[i], want[i], BF16_TOLERANCE, f"checkpointed autocast {name}")


# ---------------------------------------------------------------------------
# Numerics
# ---------------------------------------------------------------------------

def test_interpreted_bf16_is_close_to_f32(rng):
    args = _mlp_args(rng)
    g = tilefuse.trace(_mlp, *args)
    want = _results(g.interpret(*args))
    got = _results(g.autocast("bf16").interpret(*args))
    names = ["loss", "softmax", "gelu*0.5"]
    differs = False
    for name, a, b in zip(names, got, want):
        assert_close(a, b, BF16_VS_F32, f"bf16 policy vs f32, {name}")
        differs |= not np.array_equal(a, b)
    # The policy did something: bf16 rounding shows in the results.
    assert differs


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_compiled_matches_the_autocast_interpreter(rng, precision):
    args = _mlp_args(rng)
    g = tilefuse.trace(_mlp, *args)
    a = g.autocast(precision)
    want = _results(a.interpret(*args))
    got = _results(a.compile("cpu")(*args))
    for i in (0, 2):  # the loss, gelu * 0.5
        assert_close(got[i], want[i], BF16_TOLERANCE,
                     f"compiled {precision} result {i} vs interpreter")
    assert got[1].dtype == want[1].dtype == np.float32
    assert_probabilities_close(got[1], want[1], _mlp_logit_error(precision, *args),
                               f"compiled {precision} softmax vs interpreter")
    # tilefuse.compile(precision=) is Graph.autocast + compile.
    same = _results(tilefuse.compile(_mlp, *args, device="cpu", precision=precision)(*args))
    for i, (x, y) in enumerate(zip(same, got)):
        np.testing.assert_array_equal(x, y, err_msg=f"compile(precision=) result {i}")
    # ... and differs from the f32 compile.
    f32 = _results(tilefuse.compile(_mlp, *args, device="cpu")(*args))
    assert any(not np.array_equal(x, y) for x, y in zip(got, f32))


def test_gradients_of_f32_params_are_f32_and_close(rng):
    args = _mlp_args(rng)
    g = tilefuse.trace(_mlp_loss, *args)
    wrt = (1, 2, 3)
    want = g.value_and_grad(wrt).interpret(*args)
    vg = g.autocast("bf16").value_and_grad(wrt)
    got = vg.interpret(*args)
    compiled = vg.compile("cpu")(*args)
    assert len(got) == len(compiled) == 4
    for i, name in enumerate(["loss", "dw1", "db1", "dw2"]):
        assert got[i].dtype == compiled[i].dtype == np.float32, (name, got[i].dtype,
                                                                 compiled[i].dtype)
        assert got[i].shape == want[i].shape == (args[wrt[i - 1]].shape if i else ())
        tol = BF16_VS_F32 if i == 0 else BF16_GRAD_VS_F32
        assert_close(got[i], want[i], tol, f"bf16 {name} vs f32 (interpreted)")
        assert_close(compiled[i], want[i], tol, f"bf16 {name} vs f32 (compiled)")
    assert "bf16" in vg.mlir()


def _tied_lm_loss(emb, ids, y):
    """A language model's ends with its embedding tied to its head: the
    embedding rows gathered, the logits against the whole table."""
    h = F.embedding(ids, emb) * 0.5
    return F.cross_entropy(h @ emb.transpose(0, 1), y)


def test_a_tied_head_reads_its_bf16_weight_in_place(rng):
    # Autocast puts a cast between the head's transposed weight and the GEMM
    # (and between the weight gradient's GEMM and its transpose): the
    # casts move so that both GEMMs read and write the [vocab, d] layout,
    # and no kernel writes a transposed copy of the table or its gradient.
    vocab, d, n = 301, 24, 10
    emb = (rng.standard_normal((vocab, d)) * 0.5).astype(np.float32)
    ids = rng.integers(0, vocab, n).astype(np.int64)
    y = rng.integers(0, vocab, n).astype(np.int64)
    vg = tilefuse.trace(_tied_lm_loss, emb, ids, y).autocast("bf16").value_and_grad((0,))
    fused = vg.fuse("cpu").mlir()
    fused = fused[fused.rindex("func.func"):]  # the value-and-gradient function
    transposes = re.findall(r"graph\.transpose .*", fused)
    assert not [t for t in transposes if f"{vocab}x{d}" in t or f"{d}x{vocab}" in t], fused
    products = re.findall(r"graph\.matmul .*", fused)
    assert len(products) == 3, products  # logits, dh, the table's gradient
    assert all(f"{d}x{vocab}" not in p for p in products), products
    want = vg.interpret(emb, ids, y)
    got = vg.compile("cpu")(emb, ids, y)
    assert_close(got[0], want[0], BF16_TOLERANCE, "tied head loss, compiled vs interpreter")
    assert_close(got[1], want[1], BF16_TOLERANCE, "tied head gradient, compiled vs interpreter")
    f32 = tilefuse.trace(_tied_lm_loss, emb, ids, y).value_and_grad((0,)).interpret(emb, ids, y)
    assert_close(got[0], f32[0], BF16_VS_F32, "tied head loss, bf16 vs f32")
    assert_close(got[1], f32[1], BF16_GRAD_VS_F32, "tied head gradient, bf16 vs f32")


# ---------------------------------------------------------------------------
# Training
# ---------------------------------------------------------------------------

WORKLOADS = {
    "gpt2_mini": dict(config=W.gpt2_mini_config, init=W.gpt2_mini_init,
                      batch=W.gpt2_mini_batch, loss=W.gpt2_mini_loss,
                      optimizer=lambda: tilefuse.optim.AdamW(lr=1e-3, weight_decay=0.01)),
    "mlp_mnist": dict(config=lambda: W.mlp_mnist_config(batch=64), init=W.mlp_mnist_init,
                      batch=W.mlp_mnist_batch, loss=W.mlp_mnist_loss,
                      optimizer=lambda: tilefuse.optim.Adam(lr=1.5e-3)),
}


def _setup(name, steps):
    """(loss function, parameters, `steps` batches, optimizer factory): one
    batch repeated, which training fits, so the loss falls by far more than
    LOSS_RTOL."""
    m = WORKLOADS[name]
    cfg = m["config"]()
    params = m["init"](cfg, seed=0)
    batches = [m["batch"](cfg, seed=1)] * steps
    loss = m["loss"]
    return (lambda p, b, s: loss(p, b, s, cfg, True)), params, batches, m["optimizer"]


@functools.lru_cache(maxsize=None)
def _train(name, precision, steps):
    """(losses, final params, memory-plan peak, step graph IR, initial
    params, updates applied) of `steps` steps from the same parameters and
    batches."""
    loss_fn, params, batches, optimizer = _setup(name, steps)
    step = tilefuse.compile_train_step(loss_fn, params, batches[0], optimizer(),
                                       device="cpu", precision=precision)
    losses = np.array([step(b) for b in batches])
    return (losses, step.params(), step.memory_plan().peak, step.graph.mlir(), params,
            step.applied_steps)


def _assert_tracks_f32(what, got, want):
    """f32 training fitted the batch (its loss fell by LOSS_DROP or more),
    and `got` stays within LOSS_RTOL of it at every step."""
    fell = 1 - want[-1] / want[0]
    assert fell >= LOSS_DROP, (f"{what}: f32 training lowered the loss by {fell:.1%} only "
                               f"(at least {LOSS_DROP:.0%} expected): {want.tolist()}")
    assert np.isfinite(got).all(), f"{what}: losses {got.tolist()}"
    rel = np.abs(got - want) / np.abs(want)
    assert rel.max() <= LOSS_RTOL, (
        f"{what}: losses off f32 by {rel.max():.3%} (step {int(rel.argmax()) + 1}); "
        f"{got.tolist()}, f32 {want.tolist()}")
    assert 1 - got[-1] / got[0] >= LOSS_DROP - LOSS_RTOL, (
        f"{what}: the loss fell by {1 - got[-1] / got[0]:.1%}, f32's by {fell:.1%}")


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_bf16_training_tracks_f32(name):
    want, p32, peak32, text32, init, _ = _train(name, "fp32", TRAIN_STEPS)
    got, p16, peak16, text16, _, applied = _train(name, "bf16", TRAIN_STEPS)
    _assert_tracks_f32(f"{name} bf16", got, want)
    assert applied == TRAIN_STEPS, f"{name} bf16: {applied} of {TRAIN_STEPS} steps applied"
    assert not np.array_equal(got, want), "bf16 training gave the f32 losses bitwise"
    assert "bf16" in text16 and "bf16" not in text32
    # Master weights: f32 parameters (and they trained).
    assert sorted(p16) == sorted(init)
    for k, v in p16.items():
        assert v.dtype == np.float32 and v.shape == init[k].shape, (k, v.dtype, v.shape)
        assert np.isfinite(v).all(), k
    assert any(not np.array_equal(p16[k], init[k]) for k in init)
    # Half the bytes for the GEMMs' activations: a smaller plan.
    assert peak16 < peak32, f"{name}: bf16 step peak {peak16} bytes, f32 {peak32}"


def test_fp16_training_tracks_f32():
    """fp16 turns dynamic loss scaling on: no step of this run overflows, so
    every one is applied (a skipped step would leave the loss behind f32's)."""
    want = _train("gpt2_mini", "fp32", TRAIN_STEPS)[0]
    got, params, _, text, _, applied = _train("gpt2_mini", "fp16", TRAIN_STEPS)
    assert "f16" in text
    assert applied == TRAIN_STEPS, f"fp16 gpt2_mini: {applied} of {TRAIN_STEPS} steps applied"
    _assert_tracks_f32("gpt2_mini fp16", got, want)
    assert all(v.dtype == np.float32 and np.isfinite(v).all() for v in params.values())


def test_train_step_graph_keeps_f32_master_weights():
    loss_fn, params, batches, optimizer = _setup("mlp_mnist", 1)
    f32 = tilefuse.train_step_graph(loss_fn, params, batches[0], optimizer()).mlir()
    bf16 = tilefuse.train_step_graph(loss_fn, params, batches[0], optimizer(),
                                     precision="bf16").mlir()
    assert "bf16" in bf16 and "bf16" not in f32
    args32, res32 = _signature(f32)
    args16, res16 = _signature(bf16)
    assert args16 == args32 and res16 == res32, (args16, args32, res16, res32)
    assert {_ELEMENT.match(t).group(1) for t in args16} <= {"f32", "f64", "i64"}, args16
    # The GEMMs of forward and backward run in bf16.
    assert any("bf16" in line for line in _ops(bf16, "matmul")), bf16


# ---------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("precision", ["int8", "bf32", "", "BF16x"])
def test_unknown_precision_is_refused(rng, precision):
    args = _mlp_args(rng)
    g = tilefuse.trace(_mlp, *args)
    with pytest.raises(tilefuse.CompileError, match="unknown precision"):
        g.autocast(precision)
    with pytest.raises(tilefuse.CompileError, match="unknown precision"):
        tilefuse.compile(_mlp, *args, device="cpu", precision=precision)
    loss_fn, params, batches, optimizer = _setup("mlp_mnist", 1)
    with pytest.raises(tilefuse.CompileError, match="unknown precision"):
        tilefuse.compile_train_step(loss_fn, params, batches[0], optimizer(), device="cpu",
                                    precision=precision)


@pytest.mark.parametrize("precision", ["bf16", "fp16", "fp32"])
def test_unknown_keep_fp32_names_are_refused(rng, precision):
    """A misspelt op kind is an error whatever the precision: with fp32 it
    would otherwise surface only when the precision is switched."""
    args = _mlp_args(rng)
    g = tilefuse.trace(_mlp, *args)
    with pytest.raises(tilefuse.CompileError, match="'gleu' names no graph op"):
        g.autocast(precision, keep_fp32=("gleu",))
    with pytest.raises(tilefuse.CompileError, match="names no graph op"):
        tilefuse.compile(_mlp, *args, device="cpu", precision=precision, keep_fp32=("gleu",))
    loss_fn, params, batches, optimizer = _setup("mlp_mnist", 1)
    with pytest.raises(tilefuse.CompileError, match="names no graph op"):
        tilefuse.compile_train_step(loss_fn, params, batches[0], optimizer(), device="cpu",
                                    precision=precision, keep_fp32=("gleu",))


# ---------------------------------------------------------------------------
# tilefuse-compile --precision
# ---------------------------------------------------------------------------

_CLI_SOURCE = """
func.func @f(%x: tensor<8x64xf32>, %w: tensor<12x64xf32>, %b: tensor<12xf32>) -> (tensor<8x12xf32>, tensor<f32>) {
  %0 = graph.linear %x, %w, %b : (tensor<8x64xf32>, tensor<12x64xf32>, tensor<12xf32>) -> tensor<8x12xf32>
  %1 = graph.gelu %0 : tensor<8x12xf32>
  %2 = graph.softmax %1 {dim = 1 : i64} : (tensor<8x12xf32>) -> tensor<8x12xf32>
  %3 = graph.reduce_sum %1 {dims = array<i64: 0, 1>} : (tensor<8x12xf32>) -> tensor<f32>
  return %2, %3 : tensor<8x12xf32>, tensor<f32>
}
"""

needs_tools = pytest.mark.skipif(shutil.which("tilefuse-compile") is None,
                                 reason="tools not on PATH")


def _run(*args):
    return subprocess.run(list(args), capture_output=True, text=True)


@needs_tools
def test_cli_precision_builds_the_autocast_graph(rng, tmp_path):
    src = tmp_path / "f.mlir"
    src.write_text(_CLI_SOURCE)
    arts = {}
    for precision in ("bf16", "fp32"):
        out = tmp_path / f"f_{precision}.tfa"
        done = _run("tilefuse-compile", str(src), "--target=cpu", f"--precision={precision}",
                    "-o", str(out))
        assert done.returncode == 0, done.stderr
        arts[precision] = tilefuse.load(out)
    args = (rng.standard_normal((8, 64)).astype(np.float32),
            (rng.standard_normal((12, 64)) / 8).astype(np.float32),
            rng.standard_normal(12).astype(np.float32))
    graph = tilefuse.parse(_CLI_SOURCE).autocast("bf16")
    # The GEMM and the gelu after it run in bf16; softmax and the sum in f32.
    assert set(_types(_ops(graph.mlir(), "linear")[0])) == {"bf16"}, graph.mlir()
    assert _float_types(_ops(graph.mlir(), "gelu")[0]) == {"bf16"}, graph.mlir()
    got = _results(arts["bf16"](*args))
    # The same pipeline as Python's compile of the autocast graph ...
    assert_compiled_close(got, _results(graph.compile("cpu")(*args)), "cli bf16 vs compile")
    # ... within the bf16 bounds of its interpretation (softmax: logits
    # gelu(linear) apart by at most 1.13 times the GEMM's difference plus
    # gelu's rounding) ...
    interpreted = _results(graph.interpret(*args))
    u = _unit_roundoff("bf16")
    x, w, b = (_low(a, "bf16") for a in args)
    y, dy = _gemm(x, w.T, u, b)
    assert_probabilities_close(got[0], interpreted[0], 1.13 * dy + 2 * u * np.abs(_gelu(y)),
                               "cli bf16 softmax vs interpreter")
    assert_close(got[1], interpreted[1], BF16_TOLERANCE, "cli bf16 sum vs interpreter")
    # ... and not the f32 function.
    f32 = _results(arts["fp32"](*args))
    assert any(not np.array_equal(a, b) for a, b in zip(got, f32))
    assert_compiled_close(f32, _results(tilefuse.parse(_CLI_SOURCE).interpret(*args)),
                          "cli fp32 vs interpreter")
    for a, b in zip(got, f32):
        assert a.dtype == b.dtype == np.float32


@needs_tools
@pytest.mark.parametrize("flag", ["--precision=bogus", "--precision="])
def test_cli_refuses_an_unknown_precision(tmp_path, flag):
    src = tmp_path / "f.mlir"
    src.write_text(_CLI_SOURCE)
    out = tmp_path / "f.tfa"
    done = _run("tilefuse-compile", str(src), "--target=cpu", flag, "-o", str(out))
    assert done.returncode != 0, (done.returncode, done.stdout, done.stderr)
    assert f"unknown precision '{flag.split('=', 1)[1]}'" in done.stderr, done.stderr
    assert not out.exists()


_CLI_LOSS = """
func.func @loss(%w: tensor<64x10xf32>, %x: tensor<16x64xf32>, %t: tensor<16xi64>) -> tensor<f32> {
  %0 = graph.matmul %x, %w : (tensor<16x64xf32>, tensor<64x10xf32>) -> tensor<16x10xf32>
  %1 = graph.cross_entropy %0, %t : (tensor<16x10xf32>, tensor<16xi64>) -> tensor<f32>
  return %1 : tensor<f32>
}
"""


@needs_tools
def test_cli_precision_with_train(rng, tmp_path):
    """--train --precision=bf16: the loss is autocast before the step is
    built; the kept weights stay f32 and the losses track the f32 step."""
    src = tmp_path / "loss.mlir"
    src.write_text(_CLI_LOSS)
    w = (rng.standard_normal((64, 10)) / 8).astype(np.float32)
    x = rng.standard_normal((16, 64)).astype(np.float32)
    t = rng.integers(0, 10, 16).astype(np.int64)
    losses, finals = {}, {}
    for precision in ("fp32", "bf16"):
        out = tmp_path / f"step_{precision}.tfa"
        done = _run("tilefuse-compile", str(src), "--train", "--num-params=1",
                    "--optimizer=sgd", f"--precision={precision}", "-o", str(out))
        assert done.returncode == 0, done.stderr
        step = tilefuse.load(out)
        assert isinstance(step, tilefuse.LoadedTrainStep)
        assert ("bf16" in step.graph_text) == (precision == "bf16"), step.graph_text[:2000]
        assert step.state_arguments == [0]
        step.set_state([w])
        losses[precision] = np.array([float(step(x, t, np.int64(k), np.float64(0.1)))
                                      for k in (1, 2, 3)])
        (finals[precision],) = step.state()
    assert finals["bf16"].dtype == np.float32 and finals["bf16"].shape == w.shape
    assert not np.array_equal(finals["bf16"], w)
    rel = np.abs(losses["bf16"] - losses["fp32"]) / np.abs(losses["fp32"])
    assert rel.max() <= LOSS_RTOL, (losses["bf16"], losses["fp32"])
    assert not np.array_equal(losses["bf16"], losses["fp32"])
    assert losses["bf16"][-1] < losses["bf16"][0], losses["bf16"]
