"""The per-kernel numerics report (tilefuse.numerics, Graph.numerics_report,
CompiledFunction.numerics_report, TrainStep.numerics_report,
`tilefuse-compile --numerics-report`; frontend/NumericsProbe.cpp and
frontend/NumericsReport.cpp).

Each row is one kernel output of the fused program: the real kernel, fed
the f32 shadow's values for its inputs (rounded to the dtype it reads),
against the shadow's own output. error = max|out - ref| / max|ref|,
bound = u * (4 + sqrt(K)), u = 2^-8 (bf16), 2^-11 (f16), 2^-24 otherwise,
over = not error <= bound.

* f32 graphs: the shadow and the program are the same kernels, so every
  error is exactly 0; the rows are exactly the kernel outputs of the
  compiled function's fused IR, in program order.
* bf16 graphs (an MLP, gpt2_mini's loss and gradients, a whole SGD step):
  within their bounds, with nonzero errors wherever a bf16 value is
  produced, the bound formula exact, matmul rows' K the contraction length.
* Detection: a kernel that cancels catastrophically in bf16 is over its
  bound, with the error recomputed here in numpy, OVER and its source line
  in the table. The same kernel on benign inputs is not.
* Known finding (AdamW, bf16): Adam's first step turns gradients that are
  noise (the key projection's bias: exactly zero in exact arithmetic) or
  near zero into +-lr updates; when the gradient is reduced inside the
  update kernel from bf16 inputs, the signs flip and the update kernel is
  over its bound. Documented with the parameters it happens to.
* f16 with the default initial loss scale 65536: the backward kernels
  overflow (infinite errors) and a finite flag computed from f16 gradients
  disagrees with the shadow's; with init_scale=1 the same step is ok.
* The CLI prints the table and still writes the artifact.

No tolerance here is loosened to make a test pass: bounds are the report's
own, computed by the formula; "exact" checks are exact.
"""
import inspect
import math
import re
import shutil
import subprocess

import numpy as np
import pytest

import tilefuse
import tilefuse.functional as F
from tilefuse import workloads as W

UNIT_ROUNDOFF = {"bf16": 2.0 ** -8, "f16": 2.0 ** -11, "": 2.0 ** -24}
ROW_KEYS = {"kernel", "output", "ops", "location", "dtype", "lowest", "reduction_length",
            "error", "bound", "over"}
SUMMARY = re.compile(r"^(\d+) kernel outputs, (\d+) kernels over their bound(?:: (.*))?$")
THIS_FILE = "test_numerics_report.py"


# ---------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------

def _describe(row):
    ops = ",".join(row["ops"])
    return (f"{row['kernel']}.{row['output']} [{row['dtype']}, lowest {row['lowest'] or '-'}, "
            f"K {row['reduction_length']}, ops {ops[:80]}, at {row['location']}]: "
            f"error {row['error']:.4g}, bound {row['bound']:.4g}")


def _bound(lowest, k):
    return UNIT_ROUNDOFF[lowest] * (4.0 + math.sqrt(max(1, k)))


def _check_consistent(report):
    """What holds for every report: the row fields, the bound formula
    (exactly), over == not error <= bound, ok/over/len, and the table's
    summary line."""
    assert len(report) == len(report.rows) > 0
    for row in report.rows:
        assert set(row) == ROW_KEYS, f"row fields {sorted(row)}"
        assert row["lowest"] in UNIT_ROUNDOFF, _describe(row)
        assert row["reduction_length"] >= 1, _describe(row)
        want = _bound(row["lowest"], row["reduction_length"])
        assert row["bound"] == want, f"{_describe(row)}: bound should be {want!r}"
        assert row["over"] == (not row["error"] <= row["bound"]), _describe(row)
    assert report.over == [r for r in report.rows if r["over"]]
    assert report.ok == (not report.over)
    text = str(report)
    lines = text.rstrip("\n").splitlines()
    assert lines[0].startswith("kernel.output"), lines[0]
    assert len(lines) == len(report) + 2, text
    m = SUMMARY.match(lines[-1])
    assert m, f"summary line {lines[-1]!r}"
    over_kernels = sorted({r["kernel"] for r in report.over})
    assert int(m.group(1)) == len(report) and int(m.group(2)) == len(over_kernels), lines[-1]
    assert (m.group(3) or "") == ", ".join(over_kernels), lines[-1]
    assert text.count(" OVER ") == len(report.over), text
    for line, row in zip(lines[1:-1], report.rows):
        assert line.startswith(f"{row['kernel']}.{row['output']} "), (line, _describe(row))


_KERNEL_DEF = re.compile(
    r'^  (%\w+)(?::(\d+))? = graph\.(?:fusion "(\w+)"|(matmul|gather|scatter_add)\b)', re.M)
# Attention's results print under their names: %result, %logsumexp = ...
_ATTENTION_DEF = re.compile(r'^  ((?:%\w+, )+%\w+) = graph\.(attention_grad|attention)\b', re.M)


def _kernel_defs(fused_ir):
    """[(position, [result names], kernel)] of the top-level kernels."""
    defs = []
    for m in _KERNEL_DEF.finditer(fused_ir):
        n = int(m.group(2) or 1)
        names = [m.group(1)] if n == 1 else [f"{m.group(1)}#{i}" for i in range(n)]
        defs.append((m.start(), names, m.group(3) or m.group(4)))
    for m in _ATTENTION_DEF.finditer(fused_ir):
        defs.append((m.start(), m.group(1).split(", "), m.group(2)))
    return sorted(defs)


def _kernel_outputs(fused_ir):
    """[(kernel, output)] of the top-level kernels of a fused function, in
    program order: what the report has one row for."""
    return [(kernel, i) for _, names, kernel in _kernel_defs(fused_ir)
            for i in range(len(names))]


def _returned_kernel_outputs(fused_ir):
    """The fused function's results: for each, (kernel, output) of the
    kernel that computes it, or None."""
    defs = {}
    for _, names, kernel in _kernel_defs(fused_ir):
        for i, name in enumerate(names):
            defs[name] = (kernel, i)
    (ret,) = re.findall(r"^  return (.*?) : ", fused_ir, re.M)
    return [defs.get(v.strip()) for v in ret.split(",")]


def _state_copy(step):
    return {k: np.array(v) for k, v in step.state_dict().items()}


def _assert_same_state(before, after, what):
    assert sorted(before) == sorted(after), (what, sorted(before), sorted(after))
    for k in before:
        a, b = before[k], np.asarray(after[k])
        assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes(), (
            f"{what}: {k} changed")


def _bf16(a):
    """float32 -> the nearest bfloat16 (ties to even), as float32."""
    bits = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return bits.astype(np.uint32).view(np.float32)


# ---------------------------------------------------------------------------
# A small MLP
# ---------------------------------------------------------------------------

def _mlp(x, w1, b1, w2, t):
    h = F.gelu(F.linear(x, w1, b1))
    y = h @ w2
    return F.cross_entropy(y, t), F.softmax(y, -1), h * 0.5


D, HIDDEN = 32, 64


def _mlp_args(rng, n=16, classes=10):
    return (rng.standard_normal((n, D)).astype(np.float32),
            (rng.standard_normal((HIDDEN, D)) / np.sqrt(D)).astype(np.float32),
            (0.1 * rng.standard_normal(HIDDEN)).astype(np.float32),
            (rng.standard_normal((HIDDEN, classes)) / np.sqrt(HIDDEN)).astype(np.float32),
            rng.integers(0, classes, n).astype(np.int64))


def test_f32_graph_every_kernel_matches_its_shadow_exactly(rng):
    args = _mlp_args(rng)
    g = tilefuse.trace(_mlp, *args)
    compiled = g.compile("cpu")
    for how, report in [("Graph.numerics_report", g.numerics_report(*args, device="cpu")),
                        ("CompiledFunction.numerics_report", compiled.numerics_report(*args))]:
        _check_consistent(report)
        assert report.ok, f"{how}:\n{report}"
        for row in report.rows:
            assert row["lowest"] == "", f"{how}: {_describe(row)}"
            assert row["error"] <= row["bound"], f"{how}: {_describe(row)}"
            # The shadow and the program are the same f32 kernels.
            assert row["error"] == 0.0, f"{how}: {_describe(row)}"
        # One row per kernel output of the compiled program, in order ...
        want = _kernel_outputs(compiled.fused_ir)
        got = [(r["kernel"], r["output"]) for r in report.rows]
        assert got == want, f"{how}: rows {got}, fused IR kernel outputs {want}"
        # ... one kernel (output 0) per computing step of report().
        steps = [s for s in compiled.report() if s["kind"] != "copy"]
        firsts = [r for r in report.rows if r["output"] == 0]
        assert len(firsts) == len(steps), (how, [s["name"] for s in steps], got)
        fusions = [s["name"] for s in steps if s["kind"] in ("pointwise", "reduction")]
        names = [r["kernel"] for r in firsts if r["kernel"].startswith("kernel")]
        assert len(fusions) == len(names) and all(
            a.endswith("_" + b) for a, b in zip(fusions, names)), (fusions, names)
        # Integer kernel outputs are rows too (the targets' ignore_index mask).
        ints = [r for r in report.rows if r["dtype"] in ("i64", "i32", "i1")]
        assert ints, f"{how}: no integer row\n{report}"
        lines = str(report).splitlines()
        assert lines[-1] == f"{len(report)} kernel outputs, 0 kernels over their bound", lines[-1]
        assert "OVER" not in str(report)
        # Matmul rows carry the contraction length and their source line.
        mm = [r for r in report.rows if r["kernel"] == "matmul"]
        assert [r["reduction_length"] for r in mm] == [D, HIDDEN], [_describe(r) for r in mm]
        assert all(THIS_FILE in r["location"] for r in mm), [_describe(r) for r in mm]


def test_bf16_mlp_is_within_its_bounds(rng):
    args = _mlp_args(rng)
    g = tilefuse.trace(_mlp, *args).autocast("bf16")
    report = g.numerics_report(*args, device="cpu")
    _check_consistent(report)
    assert report.ok, f"bf16 MLP over its bounds:\n{report}"
    via_compile = tilefuse.compile(_mlp, *args, device="cpu", precision="bf16").numerics_report(*args)
    _check_consistent(via_compile)
    assert via_compile.rows == report.rows, f"{via_compile}\nvs\n{report}"
    bf16 = [r for r in report.rows if r["lowest"] == "bf16"]
    assert bf16 and any(r["dtype"] == "f32" for r in bf16), str(report)
    for row in report.rows:
        if row["dtype"] == "bf16":
            assert row["lowest"] == "bf16", _describe(row)
        if row["lowest"] == "bf16" and row["dtype"] == "bf16":
            # A bf16 value of random data is never the f32 one: the report
            # measures something.
            assert row["error"] > 0, _describe(row)
        if row["lowest"] == "":
            # An f32 kernel fed the shadow's values is the shadow's kernel.
            assert row["error"] == 0.0, _describe(row)
        if row["lowest"] == "bf16":
            assert row["bound"] == 2.0 ** -8 * (4 + math.sqrt(row["reduction_length"])), \
                _describe(row)
        assert row["error"] <= row["bound"], _describe(row)
    # Some errors are well above f32 roundoff: the bf16 rounding shows.
    assert max(r["error"] for r in bf16) > 2.0 ** -10, str(report)
    mm = [r for r in report.rows if r["kernel"] == "matmul"]
    assert [(r["reduction_length"], r["dtype"], r["lowest"]) for r in mm] == [
        (D, "bf16", "bf16"), (HIDDEN, "bf16", "bf16")], [_describe(r) for r in mm]


# ---------------------------------------------------------------------------
# Detection: catastrophic cancellation in bf16
# ---------------------------------------------------------------------------

def _cancel(x, y):
    return (x.to(tilefuse.bfloat16) - y.to(tilefuse.bfloat16)).to(tilefuse.float32)


def test_bf16_cancellation_is_over_its_bound(rng):
    x = (1 + 1e-3 * rng.standard_normal((8, 16))).astype(np.float32)
    y = np.ones((8, 16), np.float32)
    g = tilefuse.trace(_cancel, x, y)
    report = g.numerics_report(x, y, device="cpu")
    _check_consistent(report)
    (row,) = [r for r in report.rows if "sub" in r["ops"]]
    assert row["lowest"] == "bf16" and row["reduction_length"] == 1, _describe(row)
    # The error, recomputed: f32 x - y against bf16(x) - bf16(y) (exact in
    # f32, a bf16 value).
    ref = (x - y).astype(np.float64)
    out = (_bf16(x) - _bf16(y)).astype(np.float64)
    want = np.abs(out - ref).max() / np.abs(ref).max()
    assert want > 0.1, want
    assert row["error"] == pytest.approx(want, rel=1e-9), f"{_describe(row)}; numpy {want:.6g}"
    assert row["over"], f"catastrophic cancellation not flagged: {_describe(row)}"
    assert not report.ok and report.over == [row], str(report)
    text = str(report)
    line = inspect.getsourcelines(_cancel)[1] + 1  # the return line
    assert "OVER" in text and f"{THIS_FILE}:{line}" in text, text
    assert row["location"].endswith(f"{THIS_FILE}:{line}"), _describe(row)
    assert text.rstrip().splitlines()[-1] == \
        f"{len(report)} kernel outputs, 1 kernels over their bound: {row['kernel']}", text
    # The same kernel without cancellation (y = 0): only rounding, in bound.
    z = np.zeros_like(y)
    benign = g.numerics_report(x, z, device="cpu")
    _check_consistent(benign)
    assert benign.ok, f"benign inputs flagged:\n{benign}"
    (b,) = [r for r in benign.rows if "sub" in r["ops"]]
    assert 0 < b["error"] <= 2.0 ** -8, _describe(b)


# ---------------------------------------------------------------------------
# gpt2_mini training in bf16
# ---------------------------------------------------------------------------

GPT_CFG = W.gpt2_mini_config(dropout=0.0, n_layer=2, d_model=32, n_head=2, seq=16, vocab=64,
                             batch=2)


def _gpt2():
    params = W.gpt2_mini_init(GPT_CFG, seed=0)
    batch = W.gpt2_mini_batch(GPT_CFG, seed=1)
    return (lambda p, b, s: W.gpt2_mini_loss(p, b, s, GPT_CFG, True)), params, batch


def test_gpt2_mini_bf16_sgd_step_is_within_its_bounds():
    loss, params, batch = _gpt2()

    def compile_step():
        return tilefuse.compile_train_step(loss, params, batch, tilefuse.optim.SGD(lr=1e-2),
                                           precision="bf16", device="cpu")
    step = compile_step()
    before, params_before = _state_copy(step), step.params()
    report = step.numerics_report(batch)
    _check_consistent(report)
    assert report.ok, f"gpt2_mini bf16 SGD step over its bounds:\n{report}"
    assert [(r["kernel"], r["output"]) for r in report.rows] == \
        _kernel_outputs(step.compiled.fused_ir)
    assert sum(r["lowest"] == "bf16" for r in report.rows) > len(report) // 2, str(report)
    for row in report.rows:
        if row["kernel"] == "matmul":
            assert row["lowest"] == "bf16", _describe(row)
    # The report leaves the step as it was ...
    assert step.step_count == 0
    _assert_same_state(before, step.state_dict(), "state_dict after numerics_report")
    _assert_same_state(params_before, step.params(), "params after numerics_report")
    # ... and the next step is the one a fresh step takes.
    twin = compile_step()
    assert step(batch) == twin(batch)
    _assert_same_state(twin.state_dict(), step.state_dict(), "after a step")
    assert step.step_count == 1
    # Again after a step (nonzero state, step 2).
    again = step.numerics_report(batch)
    assert again.ok, f"after one step:\n{again}"
    assert step.step_count == 1


def test_gpt2_mini_bf16_value_and_grad_is_within_its_bounds():
    loss, params, batch = _gpt2()
    names = sorted(params)
    g = tilefuse.trace(loss, params, batch, np.int64(0)).autocast("bf16")
    vg = g.value_and_grad(tuple(range(len(names))))
    flat = [params[k] for k in names] + [batch[k] for k in sorted(batch)] + [np.int64(0)]
    report = vg.numerics_report(*flat, device="cpu")
    _check_consistent(report)
    assert report.ok, f"gpt2_mini bf16 value_and_grad over its bounds:\n{report}"
    assert any(r["lowest"] == "bf16" and r["error"] > 0 for r in report.rows), str(report)


def _f64_gradients(loss, params, batch):
    names = sorted(params)
    p64 = {k: v.astype(np.float64) for k, v in params.items()}
    vg = tilefuse.trace(loss, p64, batch, np.int64(0)).value_and_grad(tuple(range(len(names))))
    flat = [p64[k] for k in names] + [batch[k] for k in sorted(batch)] + [np.int64(0)]
    return dict(zip(names, vg.compile("cpu")(*flat)[1:]))


def test_adamw_first_step_flags_bias_updates_of_noise_gradients():
    """Known finding. With AdamW, step 1's update is -lr * g / (|g| + eps):
    +-lr whatever |g|. The key projection's bias has an exactly zero
    gradient (softmax is invariant to shifting all scores of a row), so its
    f32 and bf16 gradients are roundoff noise of different signs, and each
    layer's qkv-bias update kernel (which reduces the gradient from bf16
    inputs itself) is over its bound, by up to 2 (a flipped +-lr against
    max|ref| = lr). Any other over row must be the same mechanism: a bias
    update whose exact gradient has an element within the bf16 noise of
    zero. The weights' updates read their gradient from a GEMM (fed the
    shadow's, which rounding cannot flip), so they are never flagged."""
    loss, params, batch = _gpt2()
    step = tilefuse.compile_train_step(loss, params, batch, tilefuse.optim.AdamW(lr=1e-3),
                                       precision="bf16", device="cpu")
    report = step.numerics_report(batch)
    _check_consistent(report)
    print(report)
    fused = step.compiled.fused_ir
    assert [(r["kernel"], r["output"]) for r in report.rows] == _kernel_outputs(fused)
    # The step's results: the loss, then parameters, exp_avg, exp_avg_sq (in
    # sorted name order).
    names = sorted(params)
    returned = _returned_kernel_outputs(fused)
    assert len(returned) == 1 + 3 * len(names), len(returned)
    result_name = {}
    for i, ko in enumerate(returned[1:]):
        if ko is not None:
            result_name[ko] = ["params", "exp_avg", "exp_avg_sq"][i // len(names)] + \
                "/" + names[i % len(names)]
    over = {result_name.get((r["kernel"], r["output"]), "?"): r for r in report.over}
    # Every layer's qkv bias update is flagged.
    for i in range(GPT_CFG["n_layer"]):
        name = f"params/h{i}.attn.qkv.b"
        assert name in over, f"{name} not flagged:\n{report}"
    assert len(over) <= 2 * GPT_CFG["n_layer"], f"{sorted(over)}\n{report}"
    grads = None
    for name, row in over.items():
        what = f"{name}: {_describe(row)}"
        assert name.startswith("params/") and name.endswith(".b"), f"unexplained: {what}"
        assert "sqrt" in row["ops"], f"not an Adam update kernel: {what}"
        assert row["dtype"] == "f32" and row["lowest"] == "bf16", what
        assert row["reduction_length"] > 1, f"gradient not reduced in the kernel: {what}"
        # At most a flip of every +-lr (zero-initialised biases).
        assert row["error"] <= 2.0 + 1e-3, what
        if name.endswith(".attn.qkv.b"):
            continue
        # Another bias: explained only if its exact gradient has an element
        # within the bf16 noise (the row's bound, relative) of zero.
        if grads is None:
            grads = _f64_gradients(loss, params, batch)
        g = np.abs(grads[name.split("/", 1)[1]])
        assert g.min() <= row["bound"] * g.max(), (
            f"unexplained: {what}; exact gradient min|g|/max|g| = {g.min() / g.max():.3g}")
    # The key part of the qkv bias gradient is zero in exact arithmetic.
    if grads is None:
        grads = _f64_gradients(loss, params, batch)
    d = GPT_CFG["d_model"]
    for i in range(GPT_CFG["n_layer"]):
        gb = grads[f"h{i}.attn.qkv.b"]
        assert np.abs(gb[d:2 * d]).max() <= 1e-12 * np.abs(gb).max(), gb
    # Weights are never flagged.
    assert not [n for n in over if n.endswith(".w") or n in ("params/wte", "params/wpe")]


# ---------------------------------------------------------------------------
# f16 and loss scaling
# ---------------------------------------------------------------------------

def _f16_loss(p, b):
    # x 32: gradients of the logits up to ~4, ~2^18 at the scale 2^16,
    # past f16's 65504.
    return F.cross_entropy(b["x"] @ p["w"], b["t"]) * 32.0


def test_f16_default_loss_scale_overflows_and_scale_one_does_not(rng):
    """One parameter, so that the finite check reads the f16 gradient of its
    GEMM itself (fed the shadow's, which overflows when rounded to f16): the
    i1 flag then disagrees with the shadow's. (With several parameters the
    check can read f32 partial results of other kernels, fed the shadow's
    finite values, and agree.)"""
    params = {"w": (rng.standard_normal((64, 10)) / 8).astype(np.float32)}
    batch = {"x": rng.standard_normal((16, 64)).astype(np.float32),
             "t": rng.integers(0, 10, 16).astype(np.int64)}
    reports = {}
    for label, scale in [("default", "auto"), ("one", tilefuse.optim.LossScale(init_scale=1.0))]:
        step = tilefuse.compile_train_step(_f16_loss, params, batch, tilefuse.optim.SGD(lr=1e-2),
                                           precision="fp16", device="cpu", loss_scale=scale)
        before = _state_copy(step)
        reports[label] = step.numerics_report(batch)
        _assert_same_state(before, step.state_dict(), f"{label}: state after numerics_report")
        _check_consistent(reports[label])
    big, one = reports["default"], reports["one"]
    assert one.ok, f"f16 step at loss scale 1 over its bounds:\n{one}"
    assert [(r["kernel"], r["output"], r["ops"]) for r in big.rows] == \
        [(r["kernel"], r["output"], r["ops"]) for r in one.rows]
    assert not big.ok, f"no overflow at the scale 65536:\n{big}"
    inf = [r for r in big.rows if math.isinf(r["error"])]
    assert inf, f"no infinite error at the scale 65536:\n{big}"
    first = big.rows.index(inf[0])
    for r in inf:
        assert r["lowest"] == "f16" and r["over"], _describe(r)
    # Everything before the first overflow (the forward pass and the loss)
    # is within bound, and the same as at scale 1 (the scale is a power of 2).
    for a, b in zip(big.rows[:first], one.rows[:first]):
        assert not a["over"] and a["error"] == b["error"], (_describe(a), _describe(b))
    assert first > 0 and any(r["kernel"] == "matmul" for r in big.rows[:first])
    # The backward GEMM overflows; at scale 1 it is within bound.
    assert any(r["kernel"] == "matmul" for r in inf), str(big)
    for a, b in zip(big.rows, one.rows):
        if math.isinf(a["error"]):
            assert math.isfinite(b["error"]) and not b["over"], (_describe(a), _describe(b))
    # The finite flag: not finite in the program, finite in the shadow.
    flags = [r for r in big.rows if r["dtype"] == "i1"]
    assert flags, f"no i1 row:\n{big}"
    assert any(r["over"] and r["error"] == 1.0 for r in flags), [_describe(r) for r in flags]
    assert all(r["error"] == 0.0 for r in one.rows if r["dtype"] == "i1"), str(one)


# ---------------------------------------------------------------------------
# tilefuse-compile --numerics-report
# ---------------------------------------------------------------------------

_CLI_LOSS = """
func.func @loss(%w: tensor<64x10xf32>, %x: tensor<16x64xf32>, %t: tensor<16xi64>) -> tensor<f32> {
  %0 = graph.matmul %x, %w : (tensor<16x64xf32>, tensor<64x10xf32>) -> tensor<16x10xf32>
  %1 = graph.cross_entropy %0, %t : (tensor<16x10xf32>, tensor<16xi64>) -> tensor<f32>
  return %1 : tensor<f32>
}
"""

_TABLE_ROW = re.compile(r"^(\w+\.\d+)\s+(\w+)\s+(\S+)\s+(\d+)\s+(\S+)\s+(\S+)\s+(\S+)(  OVER .*)?$")


def _parse_table(stdout):
    lines = stdout.rstrip("\n").splitlines()
    assert lines and lines[0].startswith("kernel.output"), stdout
    m = SUMMARY.match(lines[-1])
    assert m, f"no summary line:\n{stdout}"
    rows = []
    for line in lines[1:-1]:
        r = _TABLE_ROW.match(line)
        assert r, f"table line {line!r}"
        rows.append(r.groups())
    assert int(m.group(1)) == len(rows), stdout
    assert int(m.group(2)) == len({r[0].split(".")[0] for r in rows if r[7]}), stdout
    for name, dtype, low, k, error, bound, ops, over in rows:
        want = _bound("" if low == "-" else low, int(k))
        assert float(bound) == pytest.approx(want, rel=5e-3), (name, bound, want)
        # (printed to 3 digits: an OVER row's error is not below its bound,
        # another row's not above it)
        if over:
            assert not float(error) < float(bound), (name, error, bound)
        else:
            assert float(error) <= float(bound), (name, error, bound)
    return rows


@pytest.mark.skipif(shutil.which("tilefuse-compile") is None, reason="tools not on PATH")
@pytest.mark.parametrize("train", [True, False], ids=["train", "forward"])
def test_cli_numerics_report(tmp_path, rng, train):
    src = tmp_path / "model.mlir"
    src.write_text(_CLI_LOSS)
    out = tmp_path / "out.tfa"
    extra = ["--train", "--num-params=1", "--optimizer=adam"] if train else []
    done = subprocess.run(["tilefuse-compile", str(src), "--precision=bf16", *extra,
                           "--numerics-report", "-o", str(out)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert out.exists() and out.stat().st_size > 0
    rows = _parse_table(done.stdout)
    assert any(r[2] == "bf16" for r in rows), done.stdout
    loaded = tilefuse.load(out)
    assert isinstance(loaded, tilefuse.LoadedTrainStep) == train
    if not train:
        # The same kernels as the Python report of the same autocast graph
        # (errors differ: the CLI draws its own inputs).
        args = (rng.standard_normal((64, 10)).astype(np.float32),
                rng.standard_normal((16, 64)).astype(np.float32),
                rng.integers(0, 10, 16).astype(np.int64))
        py = tilefuse.parse(_CLI_LOSS).autocast("bf16").numerics_report(*args, device="cpu")
        assert [(f"{r['kernel']}.{r['output']}", r["dtype"], r["lowest"] or "-",
                 str(r["reduction_length"])) for r in py.rows] == [r[:4] for r in rows], (
            f"{py}\nvs\n{done.stdout}")
        # Without --numerics-report nothing is printed.
        quiet = subprocess.run(["tilefuse-compile", str(src), "--precision=bf16", "-o",
                                str(tmp_path / "q.tfa")], capture_output=True, text=True)
        assert quiet.returncode == 0 and quiet.stdout == "", quiet
