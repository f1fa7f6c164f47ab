"""Convolutions compiled for CUDA: graph.conv, conv_grad_input and
conv_grad_weight become cuDNN steps (runtime/Cudnn.cpp), proven without a
GPU: the program is compiled for sm_90 and run through the real
CudaExecutor against the driver double's cuDNN (tests/unit/fakecuda: it
checks the descriptors, directions and workspace as cuDNN would, and
computes the convolution by its definition), the kernels around the
convolutions under the CUDA emulation. Forward and gradients against
PyTorch in float64, test_conv.py's odd shapes, within test_conv.py's
tolerance."""
import os
import sys

import numpy as np
import pytest
import torch

import tilefuse
import tilefuse.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cuda_emulation import emulate, unavailable_reason  # noqa: E402
from test_conv import CONVS, RTOL, TRANSPOSED, _dims, _inputs, max_rel  # noqa: E402

pytestmark = pytest.mark.skipif(unavailable_reason() is not None,
                                reason=str(unavailable_reason()))

# Every case, 'same' padding with an even kernel included (unequal padding:
# fusion concatenates the unequal part to the input as zeros for cuDNN).
CUDA_CONVS = CONVS


def _torch_case(case, x, w, b, dy, transposed):
    name, _, w_shape, kw = case
    d = _dims(w_shape)
    fn = getattr(torch.nn.functional, f"conv_transpose{d}d" if transposed else f"conv{d}d")
    tx, tw, tb = (torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in (x, w, b))
    y = fn(tx, tw, tb, **kw)
    (y * torch.tensor(dy, dtype=torch.float64)).sum().backward()
    return [y.detach().numpy(), tx.grad.numpy(), tw.grad.numpy(), tb.grad.numpy()]


def test_convolutions_and_their_gradients_run_through_cudnn(tmp_path):
    """Every case in one program (one emulated run): each case's output
    and the gradients of its input, weight and bias."""
    cases = [(c, False) for c in CUDA_CONVS] + [(c, True) for c in TRANSPOSED]
    args, wants, dys = [], [], []
    for i, (case, transposed) in enumerate(cases):
        _, x_shape, w_shape, kw = case
        x, w, _ = _inputs(x_shape, w_shape, seed=i)
        out_channels = w_shape[1] * kw.get("groups", 1) if transposed else w_shape[0]
        b = np.random.default_rng(50 + i).standard_normal(out_channels).astype(np.float32)
        fn = getattr(torch.nn.functional, f"conv_transpose{_dims(w_shape)}d" if transposed
                     else f"conv{_dims(w_shape)}d")
        shape = fn(torch.tensor(x), torch.tensor(w), torch.tensor(b), **kw).shape
        dy = np.random.default_rng(100 + i).standard_normal(tuple(shape)).astype(np.float32)
        args += [x, w, b]
        dys.append(dy)
        wants.append(_torch_case(case, x, w, b, dy, transposed))

    def loss(*a):
        total, outs = 0.0, []
        for i, (case, transposed) in enumerate(cases):
            _, _, w_shape, kw = case
            d = _dims(w_shape)
            fn = getattr(F, f"conv_transpose{d}d" if transposed else f"conv{d}d")
            y = fn(a[3 * i], a[3 * i + 1], a[3 * i + 2], **kw)
            total = total + (y * dys[i]).sum()
            outs.append(y)
        return (total, *outs)

    graph = tilefuse.trace(loss, *args).value_and_grad(wrt=tuple(range(len(args))))
    names = {r["name"] for r in graph.fuse("cuda:sm_90").report()}
    assert {"conv", "conv_grad_input", "conv_grad_weight"} <= names, names
    got = emulate(graph, args, str(tmp_path), repeat=2)
    outs, grads = got[1:1 + len(cases)], got[1 + len(cases):]
    for i, (case, transposed) in enumerate(cases):
        label = f"{'transposed ' if transposed else ''}{case[0]}"
        want = wants[i]
        assert max_rel(outs[i], want[0]) <= RTOL, f"{label} forward: {max_rel(outs[i], want[0])}"
        for what, g, t in zip(("input", "weight", "bias"), grads[3 * i:3 * i + 3], want[1:]):
            err = max_rel(g, t)
            assert err <= RTOL, f"{label}: d{what} max relative error {err:.2e}"


def test_a_small_cnn_training_step_runs_through_cudnn(tmp_path):
    """conv -> batch norm (batch statistics) -> ReLU -> max pool ->
    depthwise conv -> adaptive average pool -> linear -> cross-entropy, and
    every gradient, on CUDA (cuDNN and emulated kernels) against the
    reference interpreter."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((4, 3, 13, 11)).astype(np.float32)
    w1 = (rng.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32)
    w2 = (rng.standard_normal((8, 1, 3, 3)) * 0.3).astype(np.float32)
    fc = (rng.standard_normal((8, 5)) * 0.3).astype(np.float32)
    y = rng.integers(0, 5, 4)

    def loss(x, w1, w2, fc):
        h = F.relu(F.batch_norm(F.conv2d(x, w1, stride=2, padding=1), None, None, training=True))
        h = F.max_pool2d(h, 3, 2, 1)
        h = F.silu(F.conv2d(h, w2, padding=1, groups=8))
        return F.cross_entropy(F.adaptive_avg_pool2d(h, 1).reshape(4, 8) @ fc, y)

    graph = tilefuse.trace(loss, x, w1, w2, fc).value_and_grad(wrt=(0, 1, 2, 3))
    want = graph.interpret(x, w1, w2, fc)
    got = emulate(graph, [x, w1, w2, fc], str(tmp_path))
    for name, g, r in zip(("loss", "dx", "dw1", "dw2", "dfc"), got, want):
        assert max_rel(g, r) <= 2e-5, f"{name}: {max_rel(g, r):.2e}"


def test_cudnn_workspaces_are_buffers_of_the_memory_plan():
    """Each CUDA convolution step's cuDNN workspace is planned like any
    buffer (TargetInfo::convolutionWorkspaceBytes: the largest operand's
    bytes, 16 to 256 MiB), live during its step only, so the plan's peak
    counts it and the steps' workspaces share the arena; the CPU plans
    none (oneDNN's scratch is its own)."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 3, 9, 9)).astype(np.float32)
    w = (rng.standard_normal((4, 3, 3, 3)) * 0.3).astype(np.float32)
    graph = tilefuse.trace(lambda x, w: (F.conv2d(x, w, padding=1) ** 2).sum(),
                           x, w).value_and_grad(wrt=(0, 1))
    plan = graph.memory_plan("cuda:sm_90")
    spaces = [b for b in plan.buffers if b.name.startswith("conv_workspace")]
    assert len(spaces) == 3, [b.name for b in plan.buffers]  # forward, dx, dw
    for b in spaces:
        assert b.dtype == "i1" and b.bytes == 16 << 20 and b.first == b.last, b
        assert b.op.startswith("graph.conv"), b
    assert len({b.offset for b in spaces}) == 1, "one step at a time: one place"
    assert plan.peak >= 16 << 20
    assert not [b for b in graph.memory_plan("cpu").buffers
                if b.name.startswith("conv_workspace")]
