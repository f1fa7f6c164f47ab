"""How a kernel's lanes read values that are not laid out like its result:
paddings and concatenations that split a block (each input's lanes a range
of the block, read contiguously), zeros or values interleaved along the
lanes (lane l reads element l / s: half a block spread over the lanes),
nearest upsampling, the gradients of strided slices and pooling; and full
reductions that also write domain-sized results (split over programs, the
results stored by the partial kernel's walk). Every case is compared with
numpy (exact: these only move values) and the CPU kernels are checked for
the layout they should get (no per-lane gather); the CUDA ones run under
emulation against the interpreter where it is available."""
import os
import sys

import numpy as np
import pytest

import tilefuse
import tilefuse.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cuda_emulation import check_emulated, unavailable_reason  # noqa: E402


def _rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _pad(x):
    z = np.zeros((x.shape[0], 5), np.float32)
    w = np.zeros((x.shape[0], 7), np.float32)
    return tilefuse.cat([z, x, w], 1) * 2.0


def _pad_np(x):
    return np.concatenate([np.zeros((x.shape[0], 5)), x, np.zeros((x.shape[0], 7))], 1) * 2.0


def _strided_concat(x):
    return tilefuse.cat([x, x * 0.5], 1)[:, 1::2] + 1.0


def _strided_concat_np(x):
    return np.concatenate([x, x * 0.5], 1)[:, 1::2] + 1.0


def _interleave_zeros(x):
    n, w = x.shape
    z = np.zeros((n, w, 1), np.float32)
    return tilefuse.cat([x.reshape(n, w, 1), z], 2).reshape(n, 2 * w) * 3.0


def _interleave_zeros_np(x):
    n, w = x.shape
    return np.stack([x, np.zeros_like(x)], 2).reshape(n, 2 * w) * 3.0


def _interleave_two(x):
    n, w = x.shape
    return tilefuse.stack([x, x * x], 2).reshape(n, 2 * w) * 3.0


def _interleave_two_np(x):
    n, w = x.shape
    return np.stack([x, x * x], 2).reshape(n, 2 * w) * 3.0


def _upsample(x):
    n, c, h, w = x.shape
    y = x.reshape(n, c, h, 1, w, 1).expand(n, c, h, 2, w, 2).reshape(n, c, 2 * h, 2 * w)
    return y + 1.0


def _upsample_np(x):
    return np.repeat(np.repeat(x, 2, 2), 2, 3) + 1.0


# (name, function, numpy reference, input shape, layout the CPU kernel reads with)
MOVES = [
    ("padding", _pad, _pad_np, (3, 37), " from "),
    ("padding_wide", _pad, _pad_np, (2, 301), " from "),
    ("strided_concat", _strided_concat, _strided_concat_np, (4, 75), " from "),
    ("interleave_zeros", _interleave_zeros, _interleave_zeros_np, (4, 13), "div = 2"),
    ("interleave_zeros_long", _interleave_zeros, _interleave_zeros_np, (3, 100), "div = 2"),
    ("interleave_two", _interleave_two, _interleave_two_np, (5, 56), "div = 2"),
    ("upsample_nearest", _upsample, _upsample_np, (2, 3, 5, 56), "div = 2"),
]


@pytest.mark.parametrize("name,fn,ref,shape,layout", MOVES, ids=[m[0] for m in MOVES])
def test_moves_are_exact_and_read_without_gathers(name, fn, ref, shape, layout):
    x = _rand(*shape)
    compiled = tilefuse.compile(fn, x, device="cpu")
    np.testing.assert_array_equal(compiled(x), ref(x).astype(np.float32), err_msg=name)
    assert "tile.gather" not in compiled.tile_ir, name
    assert layout in compiled.tile_ir, name


def _grad_of_slices(x):
    # Starts below and above the stride: the gradient's groups are shifted
    # by start // stride groups (zeros ahead of a spread value), the
    # element put at place start % stride of its group.
    return (x[:, 1::2] ** 2).sum() + (x[:, 2::3] * 3.0).sum() + (x[:, 5::2] * x[:, 5::2]).sum()


def _grad_of_slices_np(x):
    g = np.zeros_like(x, np.float64)
    g[:, 1::2] += 2.0 * x[:, 1::2]
    g[:, 2::3] += 3.0
    g[:, 5::2] += 2.0 * x[:, 5::2]
    return g


def _grad_of_2d_slices(x):
    return (x[:, :, 2::3, 1::2] * x[:, :, 2::3, 1::2].exp()).sum()


def _grad_of_2d_slices_np(x):
    g = np.zeros_like(x, np.float64)
    s = x[:, :, 2::3, 1::2].astype(np.float64)
    g[:, :, 2::3, 1::2] = (1.0 + s) * np.exp(s)
    return g


@pytest.mark.parametrize("fn,ref,shape", [
    (_grad_of_slices, _grad_of_slices_np, (6, 129)),
    (_grad_of_slices, _grad_of_slices_np, (700, 400)),
    (_grad_of_2d_slices, _grad_of_2d_slices_np, (2, 3, 17, 130)),
], ids=["odd_starts", "large", "two_dims"])
def test_gradients_of_strided_slices(fn, ref, shape):
    """A strided slice's gradient interleaves zeros; its groups start at
    the operand's first element, so the lanes read the slice's gradient at
    l / stride (no gather) whatever the slice's start."""
    x = _rand(*shape)
    g = tilefuse.trace(fn, x).value_and_grad(wrt=(0,))
    compiled = g.compile("cpu")
    _, grad = compiled(x)
    np.testing.assert_allclose(grad, ref(x), rtol=1e-6, atol=1e-6)
    assert "tile.gather" not in compiled.tile_ir


def test_max_pool_gradient_reads_without_gathers_and_splits_its_loss():
    """ResNet's stem pooling (3x3, stride 2, padding 1) and a loss over it:
    the forward kernel sums the loss over programs while storing the
    window gradients (one program walked it all before), and the backward
    reads them spread over the lanes. Against PyTorch."""
    torch = pytest.importorskip("torch")
    x = _rand(8, 12, 112, 112)
    g = tilefuse.trace(lambda a: (F.max_pool2d(a, 3, 2, 1) ** 2).sum(), x).value_and_grad(
        wrt=(0,))
    compiled = g.compile("cpu")
    loss, grad = compiled(x)
    t = torch.tensor(x, requires_grad=True)
    want = (torch.nn.functional.max_pool2d(t, 3, 2, 1) ** 2).sum()
    want.backward()
    np.testing.assert_allclose(loss, want.item(), rtol=1e-6)
    # Where windows overlap, the shares add in another order than PyTorch's.
    np.testing.assert_allclose(grad, t.grad.numpy(), rtol=1e-6, atol=1e-6)
    assert "tile.gather" not in compiled.tile_ir
    rows = {r["name"]: r for r in compiled.report()}
    partial = [r for name, r in rows.items() if name.endswith("_partial")]
    assert partial and partial[0]["grid"] > 1, rows.keys()


@pytest.mark.parametrize("mode", ["nearest", "bilinear", "bicubic"])
def test_whole_number_upsampling_reads_without_gathers(mode):
    """F.interpolate by 2 (align_corners=False): per output phase a weighted
    sum of shifted views of the input, the phases interleaved; its gradient
    (autodiff's) strided slices of the output's gradient placed back by
    padding. Values and gradients as PyTorch's, no gather or scatter-add."""
    torch = pytest.importorskip("torch")
    x = _rand(2, 3, 17, 64)
    r = _rand(2, 3, 34, 128, seed=1)
    kw = dict(scale_factor=2, mode=mode) if mode == "nearest" else \
        dict(scale_factor=2, mode=mode, align_corners=False)
    g = tilefuse.trace(lambda a: (F.interpolate(a, **kw) * r).sum(), x).value_and_grad(wrt=(0,))
    compiled = g.compile("cpu")
    loss, grad = compiled(x)
    t = torch.tensor(x, requires_grad=True)
    want = (torch.nn.functional.interpolate(t, **kw) * torch.tensor(r)).sum()
    want.backward()
    np.testing.assert_allclose(loss, want.item(), rtol=1e-5)
    np.testing.assert_allclose(grad, t.grad.numpy(), rtol=1e-5, atol=1e-5)
    assert "tile.gather" not in compiled.tile_ir
    assert all(row["kind"] != "library" for row in compiled.report())


def test_full_reduction_beside_domain_results_is_split():
    """value_and_grad of sum(tanh(a) * a): the loss and the gradient come
    from one walk of `a`; the walk is split over programs, each storing the
    gradient of its slice, the loss folded from the slices."""
    a = _rand(640, 1000)
    g = tilefuse.trace(lambda v: (v.tanh() * v).sum(), a).value_and_grad(wrt=(0,))
    compiled = g.compile("cpu")
    loss, grad = compiled(a)
    a64 = a.astype(np.float64)
    t = np.tanh(a64)
    np.testing.assert_allclose(loss, (t * a64).sum(), rtol=1e-6)
    np.testing.assert_allclose(grad, t + a64 * (1 - t * t), rtol=1e-5, atol=1e-6)
    partial = [r for r in compiled.report() if r["name"].endswith("_partial")]
    assert partial and partial[0]["grid"] > 1


EMULATED = [
    ("padding", _pad, (3, 37)),
    ("strided_concat", _strided_concat, (4, 75)),
    ("interleave_two", _interleave_two, (5, 56)),
    ("upsample_nearest", _upsample, (2, 3, 5, 56)),
]


@pytest.mark.skipif(unavailable_reason() is not None, reason=str(unavailable_reason()))
@pytest.mark.parametrize("name,fn,shape", EMULATED, ids=[e[0] for e in EMULATED])
def test_moves_on_cuda_under_emulation(name, fn, shape, tmp_path):
    x = _rand(*shape)
    check_emulated(tilefuse.trace(fn, x), (x,), str(tmp_path), 0, 0, name=name)


@pytest.mark.skipif(unavailable_reason() is not None, reason=str(unavailable_reason()))
def test_gradients_on_cuda_under_emulation(tmp_path):
    """The strided slices' gradients and a split loss beside them."""
    x = _rand(600, 520)
    g = tilefuse.trace(_grad_of_slices, x).value_and_grad(wrt=(0,))
    check_emulated(g, (x,), str(tmp_path), 1e-5, 1e-5, name="slices")
