"""Convolutions: graph.conv, graph.conv_grad_input and graph.conv_grad_weight
(oneDNN on the CPU) through tilefuse.functional and the PyTorch importer.

Forward and gradients against PyTorch in float64 on odd shapes (stride 2
with odd sizes, dilation 2, depthwise groups, 1x1 and 7x7 kernels, padding
beyond the kernel, 'same' padding with an even kernel, unbatched inputs,
1-d and 3-d), transposed convolutions with output padding; the gradient
rules against float64 finite differences; the errors a user can hit.
Tolerance: f32 results within 1e-5 of max|PyTorch| (the sums run in
another order; observed ~1e-7).
"""
import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import tilefuse
import tilefuse.functional as F
from tilefuse._tracing import Tensor
from test_autodiff import check_gradients

RTOL = 1e-5


def max_rel(got, want):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape, (got.shape, want.shape)
    return float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-30))


# (name, input shape, weight shape, keyword arguments of F.convNd)
CONVS = [
    ("stride2-odd", (2, 3, 9, 11), (4, 3, 3, 3), dict(stride=2, padding=1)),
    ("dilation2", (1, 2, 12, 10), (3, 2, 3, 3), dict(dilation=2, padding=(2, 1))),
    ("depthwise", (2, 6, 7, 7), (6, 1, 3, 3), dict(padding=1, groups=6)),
    ("groups2-stride", (2, 4, 8, 9), (6, 2, 2, 3), dict(stride=(2, 1), groups=2)),
    ("1x1", (3, 5, 4, 4), (7, 5, 1, 1), {}),
    ("7x7-stem", (1, 3, 17, 15), (4, 3, 7, 7), dict(stride=2, padding=3)),
    ("padding-beyond-kernel", (1, 2, 3, 3), (2, 2, 2, 2), dict(padding=3)),
    ("same-even-kernel", (2, 2, 6, 5), (3, 2, 4, 2), dict(padding="same")),
    ("unbatched", (3, 8, 8), (2, 3, 3, 3), dict(padding=1)),
    ("1d", (2, 3, 20), (4, 3, 5), dict(stride=3, padding=2, dilation=2)),
    ("3d", (1, 2, 5, 6, 4), (3, 2, 3, 2, 3), dict(stride=(1, 2, 1), padding=1)),
]


def _inputs(x_shape, w_shape, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = rng.standard_normal(w_shape).astype(np.float32)
    b = rng.standard_normal(w_shape[0]).astype(np.float32)
    return x, w, b


def _dims(w_shape):
    return len(w_shape) - 2


@pytest.mark.parametrize("case", CONVS, ids=[c[0] for c in CONVS])
def test_conv_forward_and_gradients_match_pytorch(case):
    name, x_shape, w_shape, kw = case
    d = _dims(w_shape)
    x, w, b = _inputs(x_shape, w_shape)
    ours = getattr(F, f"conv{d}d")
    theirs = getattr(TF, f"conv{d}d")
    tx, tw, tb = (torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in (x, w, b))
    want = theirs(tx, tw, tb, **kw)
    dy = np.random.default_rng(1).standard_normal(want.shape).astype(np.float32)
    (want * torch.tensor(dy, dtype=torch.float64)).sum().backward()

    def loss(x, w, b):
        y = ours(x, w, b, **kw)
        return (y * dy).sum(), y

    graph = tilefuse.trace(loss, x, w, b).value_and_grad(wrt=(0, 1, 2))
    names = [r["name"] for r in graph.fuse("cpu").report()]
    # The forward adds its bias inside oneDNN's call (graph.conv_bias_act),
    # except a 1x1 stride-1 one (plain layouts, where a kernel is faster).
    forward = "conv" if name == "1x1" else "conv_bias_act"
    assert forward in names and "conv_grad_input" in names, names
    assert "conv_grad_weight" in names, names
    _, y, *grads = graph.compile("cpu")(x, w, b)
    assert max_rel(y, want.detach().numpy()) <= RTOL, f"{name} forward"
    for what, g, t in zip(("input", "weight", "bias"), grads, (tx, tw, tb)):
        err = max_rel(g, t.grad.numpy())
        assert err <= RTOL, f"{name}: d{what} max relative error {err:.2e}"


# (name, input shape, weight shape, keyword arguments of F.conv_transposeNd)
TRANSPOSED = [
    ("stride2-output-padding", (2, 4, 5, 6), (4, 3, 3, 3),
     dict(stride=2, padding=1, output_padding=1)),
    ("groups-dilation", (1, 4, 5, 5), (4, 2, 3, 2), dict(groups=2, dilation=2)),
    ("1d", (2, 3, 7), (3, 5, 4), dict(stride=3, padding=1, output_padding=2)),
]


@pytest.mark.parametrize("case", TRANSPOSED, ids=[c[0] for c in TRANSPOSED])
def test_transposed_conv_matches_pytorch(case):
    """A transposed convolution is graph.conv_grad_input; its gradients are
    a convolution and a weight gradient with the roles swapped."""
    name, x_shape, w_shape, kw = case
    d = _dims(w_shape)
    groups = kw.get("groups", 1)
    x, w, _ = _inputs(x_shape, w_shape)
    b = np.random.default_rng(2).standard_normal(w_shape[1] * groups).astype(np.float32)
    tx, tw, tb = (torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in (x, w, b))
    want = getattr(TF, f"conv_transpose{d}d")(tx, tw, tb, **kw)
    dy = np.random.default_rng(1).standard_normal(want.shape).astype(np.float32)
    (want * torch.tensor(dy, dtype=torch.float64)).sum().backward()
    ours = getattr(F, f"conv_transpose{d}d")

    def loss(x, w, b):
        y = ours(x, w, b, **kw)
        return (y * dy).sum(), y

    _, y, *grads = tilefuse.trace(loss, x, w, b).value_and_grad(wrt=(0, 1, 2)).compile("cpu")(
        x, w, b)
    assert max_rel(y, want.detach().numpy()) <= RTOL, f"{name} forward"
    for what, g, t in zip(("input", "weight", "bias"), grads, (tx, tw, tb)):
        assert max_rel(g, t.grad.numpy()) <= RTOL, f"{name}: d{what}"


def _grad_weight(kernel, stride, padding, dilation, groups):
    """graph.conv_grad_weight itself (the tracer's entry), whose own VJP
    rule a second derivative of a convolution runs."""
    def fn(x, gy):
        d = len(kernel)
        return Tensor(x._tracer, x._tracer.conv("grad_weight", x._id, gy._id, [stride] * d,
                                                [padding] * d, [padding] * d, [dilation] * d,
                                                groups, list(kernel)))
    return fn


@pytest.mark.parametrize("kw", [dict(stride=2, padding=(1, 0)), dict(groups=2, dilation=2)],
                         ids=["stride-asymmetric", "groups-dilation"])
def test_gradient_rules_match_finite_differences(rng, kw):
    """The VJP rules of graph.conv (through F.conv2d), graph.conv_grad_input
    (F.conv_transpose2d) and graph.conv_grad_weight against central
    differences, the interpreter in float64."""
    groups = kw.get("groups", 1)
    x, w = rng.standard_normal((2, 4, 7, 6)), rng.standard_normal((4, 4 // groups, 3, 2))
    check_gradients(f"conv2d {kw}", lambda x, w: F.conv2d(x, w, **kw), [x, w], rng)
    t = rng.standard_normal((2, 4, 3, 4))
    check_gradients(f"conv_transpose2d {kw}", lambda t, w: F.conv_transpose2d(t, w, **kw),
                    [t, w], rng)
    stride, dilation = kw.get("stride", 1), kw.get("dilation", 1)
    padding = 1 if dilation == 1 else 0
    x2 = rng.standard_normal((2, 4, 9, 6))
    out = [(n + 2 * padding - dilation * (k - 1) - 1) // stride + 1 for n, k in ((9, 3), (6, 2))]
    gy = rng.standard_normal((2, 4, *out))
    fn = _grad_weight((3, 2), stride, padding, dilation, groups)
    check_gradients(f"conv_grad_weight {kw}", fn, [x2, gy], rng)


@pytest.mark.parametrize("call,message", [
    (lambda x, w: F.conv2d(x, w[:, :2]), r"expects input channels \(3\) and output channels \(4\) "
     "divisible by the groups"),
    (lambda x, w: F.conv2d(x, w, stride=2, padding="same"), "padding='same' needs stride 1"),
    (lambda x, w: F.conv2d(x, w, np.zeros(3, np.float32)), r"bias \[3\] must be \[4\]"),
    (lambda x, w: F.conv_transpose2d(x, w[:3], stride=2, output_padding=2),
     "output_padding .* must be smaller than the stride"),
    (lambda x, w: F.conv2d(x, w, dilation=5), "the kernel of 3 dilated by 5 spans more than"),
    (lambda x, w: F.conv2d(x[0, 0], w), r"expects an input \[N, C, \*S\] or \[C, \*S\]"),
])
def test_bad_convolutions_say_what_is_wrong(call, message):
    x, w, _ = _inputs((1, 3, 8, 8), (4, 3, 3, 3))
    with pytest.raises(tilefuse.CompileError, match=message):
        tilefuse.trace(call, x, w)


def test_cuda_targets_write_unequal_padding_out(monkeypatch):
    """CUDA runs convolutions through cuDNN (test_conv_cuda.py), which pads
    both sides of a dimension alike: 'same' padding with an even kernel
    keeps the common padding and concatenates the rest to the input as
    zeros for CUDA (its values through cuDNN: test_conv_cuda.py), where the
    CPU's oneDNN takes it as it is; under TILEFUSE_LIBRARY_CONV=0 the
    importer writes convolutions out (im2col gathers and matmuls), which
    CUDA compiles too, with the same values."""
    x, w, _ = _inputs((2, 3, 8, 8), (4, 3, 2, 2))
    same = tilefuse.trace(lambda x, w: F.conv2d(x, w, padding="same"), x, w)
    cuda = same.fuse("cuda:sm_90")
    assert any(r["name"] == "conv" for r in cuda.report())
    assert "graph.concat" in cuda.mlir() and "graph.concat" not in same.fuse("cpu").mlir()
    graph = tilefuse.trace(lambda x, w: F.conv2d(x, w, padding=1), x, w)
    assert any(r["name"] == "conv" for r in graph.fuse("cuda:sm_90").report())
    from torch.fx.experimental.proxy_tensor import make_fx

    from tilefuse.aten_import import run_fx
    gm = make_fx(lambda x, w: TF.conv2d(x, w, padding=1))(torch.tensor(x), torch.tensor(w))
    monkeypatch.setenv("TILEFUSE_LIBRARY_CONV", "0")
    written = tilefuse.trace(lambda x, w: run_fx(gm, [x, w]), x, w)
    assert "graph.conv" not in written.mlir()
    assert not any(r["name"].startswith("conv") for r in written.fuse("cuda:sm_90").report())
    assert max_rel(written.interpret(x, w), graph.interpret(x, w)) <= RTOL


def test_weight_gradient_reads_the_blocked_output_gradient_the_input_gradient_made(monkeypatch):
    """The second of an output gradient's two backward convolutions reads
    the blocked copy the first made (no second reorder):
    two 3x3 convolutions (blocked layouts) trained twice on new data, every
    gradient against PyTorch in float64 each time, so a copy left from the
    other convolution or the last run would show. Channels-first
    convolutions (TILEFUSE_CHANNELS_LAST=0): channels-last ones make no
    blocked copy of their activations."""
    monkeypatch.setenv("TILEFUSE_CHANNELS_LAST", "0")
    core = tilefuse._core
    rng = np.random.default_rng(3)
    w1 = rng.standard_normal((16, 16, 3, 3)).astype(np.float32) * 0.2
    w2 = rng.standard_normal((16, 16, 3, 3)).astype(np.float32) * 0.2

    def loss(x, w1, w2):
        return (F.conv2d(F.relu(F.conv2d(x, w1, padding=1)), w2, padding=1) ** 2).sum()

    x0 = rng.standard_normal((2, 16, 12, 12)).astype(np.float32)
    step = tilefuse.trace(loss, x0, w1, w2).value_and_grad(wrt=(0, 1, 2)).compile("cpu")
    for run in range(2):
        x = rng.standard_normal((2, 16, 12, 12)).astype(np.float32)
        before = core.onednn_conv_reorders_reused()
        _, *grads = step(x, w1, w2)
        reused = core.onednn_conv_reorders_reused() - before
        t = [torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in (x, w1, w2)]
        (TF.conv2d(TF.relu(TF.conv2d(t[0], t[1], padding=1)), t[2], padding=1) ** 2).sum().backward()
        for what, g, want in zip(("x", "w1", "w2"), grads, t):
            err = max_rel(g, want.grad.numpy())
            assert err <= RTOL, f"run {run}: d{what} max relative error {err:.2e}"
        if core.onednn_status() == "loaded":
            assert reused >= 1, f"run {run}: no reorder reused"


def test_blocked_copies_share_one_buffer_sized_for_the_largest_convolution():
    """oneDNN's blocked copies of a convolution's operands live in one
    buffer for every convolution (they run one at a time), not one set per
    primitive kept for the process's life: running many convolutions of
    different shapes grows it to the largest one's operands, not their sum.
    Runs in a fresh process (the buffer is process-wide)."""
    import subprocess
    import sys
    import textwrap
    code = textwrap.dedent("""
        import numpy as np, tilefuse, tilefuse.functional as F
        core = tilefuse._core
        rng = np.random.default_rng(0)
        total, largest = 0, 0
        for c in (16, 32, 48, 64, 80, 96):
            x = rng.standard_normal((4, c, 24, 24)).astype(np.float32)
            w = rng.standard_normal((c, c, 3, 3)).astype(np.float32)
            y = tilefuse.compile(lambda x, w: F.conv2d(x, w, padding=1), x, w, device="cpu")(x, w)
            operands = x.nbytes + w.nbytes + y.nbytes
            total += operands
            largest = max(largest, operands)
        print(core.onednn_status() == "loaded", core.onednn_conv_scratch_bytes(), total, largest)
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    loaded, scratch, total, largest = r.stdout.split()[-4:]
    if loaded != "True":
        pytest.skip("oneDNN is not loaded in this process: convolutions run the reference loops")
    scratch, total, largest = int(scratch), int(total), int(largest)
    # Blocked layouts pad channels to the vector width: up to 2x here.
    assert 0 < scratch <= 2 * largest < total, (scratch, largest, total)


@pytest.mark.parametrize("precision,tol", [("bf16", 1e-2), ("fp16", 2e-3)])
def test_convolutions_run_in_16_bit_under_autocast(precision, tol):
    """Autocast makes convolutions GEMM-class: graph.conv and its gradients
    take 16-bit operands (oneDNN's bf16 convolutions accumulate in f32; f16
    is widened to f32 on the CPU), within the dtype's tolerance of float64
    PyTorch (bf16 1e-2, f16 2e-3 of max|value|)."""
    x, w, _ = _inputs((4, 16, 13, 11), (32, 16, 3, 3))
    w = w * np.float32(0.1)
    dy = np.random.default_rng(1).standard_normal((4, 32, 7, 6)).astype(np.float32)

    def loss(x, w):
        y = F.conv2d(x, w, stride=2, padding=1)
        return (y * dy).sum(), y

    graph = tilefuse.trace(loss, x, w).autocast(precision).value_and_grad(wrt=(0, 1))
    low = "bf16" if precision == "bf16" else "f16"
    fused = graph.fuse("cpu").mlir()
    for op in ("graph.conv ", "graph.conv_grad_input", "graph.conv_grad_weight"):
        line = next(line for line in fused.splitlines() if op in line)
        assert f"x{low}>" in line.split("->")[-1], line
    # (The loss, a sum of 5376 products that cancel to ~1% of their size,
    # is not compared: its 16-bit rounding is relative to the terms.)
    _, y, *grads = graph.compile("cpu")(x, w)
    tx, tw = (torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in (x, w))
    want = TF.conv2d(tx, tw, stride=2, padding=1)
    (want * torch.tensor(dy, dtype=torch.float64)).sum().backward()
    for name, g, t in zip(("y", "dx", "dw"), [y] + grads, (want.detach(), tx.grad, tw.grad)):
        assert max_rel(g, t.numpy()) <= tol, f"{precision} {name}: {max_rel(g, t.numpy()):.2e}"


def test_programs_with_convolutions_run_their_grids_on_onednns_openmp_threads():
    """oneDNN runs convolutions on the process's OpenMP threads, which spin
    after each: loading a program with convolutions moves tilefuse's CPU
    grids onto those threads (where the process can: one OpenMP runtime, no
    TILEFUSE_THREAD_POOL), instead of a second set of threads competing for
    the same cores. A fresh process: the team is process-wide."""
    import subprocess
    import sys
    import textwrap
    code = textwrap.dedent("""
        import os, numpy as np, tilefuse, tilefuse.functional as F
        core = tilefuse._core
        possible = core.cpu_thread_team("openmp") == "openmp" and \\
            "TILEFUSE_THREAD_POOL" not in os.environ
        core.cpu_thread_team("own")
        x, w = np.ones((1, 2, 5, 5), np.float32), np.ones((3, 2, 3, 3), np.float32)
        tilefuse.compile(lambda x: F.relu(x) * 2, x, device="cpu")(x)
        before = core.cpu_thread_team()
        y = tilefuse.compile(lambda x, w: F.conv2d(x, w), x, w, device="cpu")(x, w)
        assert float(y.max()) == 18.0
        print(possible and core.onednn_status() == "loaded", before, core.cpu_thread_team())
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    can, before, after = r.stdout.split()[-3:]
    assert before == "own", r.stdout
    if can != "True":
        pytest.skip("no OpenMP team or no oneDNN in this process: the team stays tilefuse's own")
    assert after == "openmp", r.stdout
