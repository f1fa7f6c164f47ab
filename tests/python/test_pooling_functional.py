"""tilefuse.functional's pooling and interpolate against PyTorch's, in
float64 (values, indices and the input's gradient), on odd shapes; ties
send the gradient where PyTorch does; the compiled float32 step against
the interpreter; and the errors a user can hit."""
import numpy as np
import pytest

import tilefuse
import tilefuse.functional as F

torch = pytest.importorskip("torch")
TF = torch.nn.functional


def _check(fn, torch_fn, x, what):
    """Loss sum(fn(x) * r) and its gradient against PyTorch's."""
    shape = torch_fn(torch.tensor(x)).shape
    r = np.random.default_rng(9).standard_normal(tuple(shape))
    g = tilefuse.trace(lambda a: (fn(a) * r).sum(), x).value_and_grad(wrt=(0,))
    got_loss, got_grad = g.interpret(x)
    t = torch.tensor(x, requires_grad=True)
    want = (torch_fn(t) * torch.tensor(r)).sum()
    want.backward()
    np.testing.assert_allclose(got_loss, want.item(), rtol=1e-10, err_msg=what)
    np.testing.assert_allclose(got_grad, t.grad.numpy(), rtol=1e-9, atol=1e-12,
                               err_msg=f"{what}: gradient")


def _x(shape, seed=1):
    return np.random.default_rng(seed).standard_normal(shape) * 2


MAX_POOLS = [  # (d, shape, kwargs)
    (2, (2, 3, 9, 7), dict(kernel_size=3, stride=2, padding=1)),
    (2, (1, 2, 8, 11), dict(kernel_size=(2, 3), stride=(2, 1), ceil_mode=True)),
    (2, (2, 2, 10, 9), dict(kernel_size=3, stride=2, padding=1, dilation=2, ceil_mode=True)),
    (2, (3, 7, 5), dict(kernel_size=2)),                   # unbatched
    (1, (2, 3, 13), dict(kernel_size=4, stride=3, padding=2, ceil_mode=True)),
    (3, (1, 2, 5, 6, 7), dict(kernel_size=(2, 3, 2), stride=2, padding=(1, 1, 0))),
]


@pytest.mark.parametrize("d,shape,kw", MAX_POOLS)
def test_max_pool_matches_pytorch(d, shape, kw):
    x = _x(shape)
    ours, theirs = getattr(F, f"max_pool{d}d"), getattr(TF, f"max_pool{d}d")
    _check(lambda a: ours(a, **kw), lambda a: theirs(a, **kw), x, f"max_pool{d}d {shape} {kw}")
    _, idx = tilefuse.trace(lambda a: ours(a, return_indices=True, **kw), x).interpret(x)
    _, want = theirs(torch.tensor(x), return_indices=True, **kw)
    np.testing.assert_array_equal(idx, want.numpy(), err_msg=f"max_pool{d}d indices {kw}")


def test_max_pool_ties_send_the_gradient_to_pytorchs_element():
    # ReLU'd inputs: most windows hold several zeros; PyTorch's gradient
    # goes to the first maximum only.
    x = np.maximum(np.round(_x((2, 3, 8, 8), seed=3)), 0.0)
    _check(lambda a: F.max_pool2d(a, 3, 1, 1), lambda a: TF.max_pool2d(a, 3, 1, 1), x,
           "max_pool2d with ties")
    _check(lambda a: F.adaptive_max_pool2d(a, (3, 5)), lambda a: TF.adaptive_max_pool2d(a, (3, 5)),
           x, "adaptive_max_pool2d with ties")


AVG_POOLS = [
    (2, (2, 3, 9, 7), dict(kernel_size=3, stride=2, padding=1)),
    (2, (2, 3, 9, 7), dict(kernel_size=3, stride=2, padding=1, count_include_pad=False)),
    (2, (1, 2, 8, 11), dict(kernel_size=(2, 3), stride=(3, 2), padding=(1, 1), ceil_mode=True)),
    (2, (2, 2, 7, 7), dict(kernel_size=3, padding=1, divisor_override=5)),
    (1, (2, 3, 13), dict(kernel_size=4, stride=3, padding=2, ceil_mode=True,
                         count_include_pad=False)),
    (3, (1, 2, 5, 6, 7), dict(kernel_size=2, stride=(1, 2, 3))),
]


@pytest.mark.parametrize("d,shape,kw", AVG_POOLS)
def test_avg_pool_matches_pytorch(d, shape, kw):
    ours, theirs = getattr(F, f"avg_pool{d}d"), getattr(TF, f"avg_pool{d}d")
    _check(lambda a: ours(a, **kw), lambda a: theirs(a, **kw), _x(shape),
           f"avg_pool{d}d {shape} {kw}")


@pytest.mark.parametrize("d,shape,out", [(2, (2, 3, 9, 7), (4, 3)), (2, (2, 3, 9, 7), 1),
                                         (2, (3, 10, 6), (None, 4)), (1, (2, 3, 11), 4),
                                         (3, (1, 2, 5, 7, 3), (2, 3, 2))])
def test_adaptive_pools_match_pytorch(d, shape, out):
    x = _x(shape)
    for kind in ("avg", "max"):
        ours = getattr(F, f"adaptive_{kind}_pool{d}d")
        theirs = getattr(TF, f"adaptive_{kind}_pool{d}d")
        _check(lambda a: ours(a, out), lambda a: theirs(a, out), x,
               f"adaptive_{kind}_pool{d}d {shape} -> {out}")


INTERPOLATIONS = [  # (shape, kwargs)
    ((2, 3, 5, 7), dict(scale_factor=2)),
    ((2, 3, 5, 7), dict(size=(8, 11))),
    ((2, 3, 5, 7), dict(scale_factor=1.7, mode="nearest")),
    ((2, 3, 9, 7), dict(size=(4, 5), mode="nearest-exact")),
    ((2, 3, 5, 7), dict(scale_factor=2, mode="bilinear")),
    ((2, 3, 5, 7), dict(size=(9, 4), mode="bilinear", align_corners=True)),
    ((2, 3, 5, 7), dict(scale_factor=(1.3, 2.6), mode="bilinear", align_corners=False)),
    ((2, 3, 5, 7), dict(scale_factor=1.3, mode="bilinear", recompute_scale_factor=True)),
    ((2, 3, 5, 7), dict(size=(11, 6), mode="bicubic")),
    ((2, 3, 5, 7), dict(scale_factor=1.5, mode="bicubic", align_corners=True)),
    ((2, 3, 13), dict(size=5, mode="linear")),
    ((1, 2, 3, 4, 5), dict(scale_factor=(2, 1.5, 0.5), mode="trilinear")),
    ((2, 3, 9, 7), dict(size=(4, 3), mode="area")),
    ((1, 2, 4, 5, 3), dict(scale_factor=2, mode="nearest")),
]


@pytest.mark.parametrize("shape,kw", INTERPOLATIONS)
def test_interpolate_matches_pytorch(shape, kw):
    _check(lambda a: F.interpolate(a, **kw), lambda a: TF.interpolate(a, **kw), _x(shape),
           f"interpolate {shape} {kw}")


def test_compiled_pooling_step_matches_the_interpreter():
    """A small encoder-decoder (conv, max pool, adaptive average pool,
    bilinear upsampling) and its gradients, compiled in float32."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 3, 17, 15)).astype(np.float32)
    w = (rng.standard_normal((4, 3, 3, 3)) * 0.3).astype(np.float32)

    def net(x, w):
        h = F.relu(F.conv2d(x, w, padding=1))
        p = F.max_pool2d(h, 3, 2, 1, ceil_mode=True)
        s = F.adaptive_avg_pool2d(p, 1)
        u = F.interpolate(p * F.sigmoid(s), size=(17, 15), mode="bilinear", align_corners=False)
        return (u * u).mean() + F.avg_pool2d(h, 2, count_include_pad=False).sum() * 1e-2

    g = tilefuse.trace(net, x, w).value_and_grad(wrt=(0, 1))
    want = g.interpret(x, w)
    got = g.compile("cpu")(x, w)
    for a, b, name in zip(got, want, ("loss", "d x", "d w")):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=1e-6, err_msg=f"pooling step: {name}")


@pytest.mark.parametrize("call,match", [
    (lambda x: F.max_pool2d(x, 3, padding=2), "more than half the kernel"),
    (lambda x: F.avg_pool2d(x, 2, padding=2), "more than half the kernel"),
    (lambda x: F.max_pool2d(x, 9), "too small"),
    (lambda x: F.max_pool2d(x, (2, 2, 2)), "expects 1 or 2 values"),
    (lambda x: F.max_pool1d(x, 2), "with 1 spatial dimensions"),
    (lambda x: F.adaptive_avg_pool2d(x, (0, 2)), "must be positive"),
    (lambda x: F.interpolate(x, scale_factor=2, mode="nearest", align_corners=True),
     "align_corners can only be set"),
    (lambda x: F.interpolate(x, scale_factor=2, mode="trilinear"), "needs a 5-d input"),
    (lambda x: F.interpolate(x, size=4, scale_factor=2), "exactly one of"),
    (lambda x: F.interpolate(x, scale_factor=2, mode="bilinear", antialias=True), "antialias"),
    (lambda x: F.interpolate(x, scale_factor=2, mode="cubic"), "is not one of"),
])
def test_pooling_errors_name_the_problem(call, match):
    x = np.zeros((2, 3, 5, 6), np.float32)
    with pytest.raises(tilefuse.CompileError, match=match):
        tilefuse.trace(call, x)


def test_pytorch_interpolation_converts_to_constant_taps(compiled_graphs):
    """torch.compile(backend="tilefuse") keeps PyTorch's linear, bilinear,
    bicubic and trilinear upsampling ops (and their backward ops) whole and
    converts them into per-dim gathers of constant taps (PyTorch's
    decompositions compute every output element's indices and weights in
    the graph and gather each corner), with values and gradients as
    eager's within f32 rounding."""
    from tilefuse.torch_integration import stats

    def loss(h, v):
        a = TF.interpolate(h, scale_factor=1.7, mode="bilinear")
        b = TF.interpolate(h, size=(9, 13), mode="bicubic", align_corners=True)
        c = TF.interpolate(h.flatten(2), scale_factor=2.5, mode="linear")
        d = TF.interpolate(v, scale_factor=(2, 1.5, 0.5), mode="trilinear")
        return a.square().mean() + b.mean() + c.square().mean() + d.square().mean()
    rng = np.random.default_rng(5)
    h, v = (torch.tensor(rng.standard_normal(s).astype(np.float32), requires_grad=True)
            for s in ((2, 3, 7, 6), (1, 2, 3, 4, 6)))
    torch._dynamo.reset()
    stats.reset()
    got = torch.compile(loss, backend="tilefuse")(h, v)
    got.backward()
    got_grads = [h.grad.clone(), v.grad.clone()]
    h.grad = v.grad = None
    want = loss(h, v)
    want.backward()
    torch._dynamo.reset()
    assert stats.compiled == 2 and stats.partitioned == 0 and stats.eager == 0, stats
    assert abs(got.item() - want.item()) <= 1e-5 * abs(want.item())
    for g, w in zip(got_grads, (h.grad, v.grad)):
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-5, atol=1e-6)
    # One gather per resized dim forward (2 + 2 + 1 + 3), one scatter-add
    # per dim backward: PyTorch's decompositions gather each corner instead.
    # The trilinear one's first dim doubles: shifted views by phase, no
    # gather and no scatter-add.
    rows = [r["name"] for g in compiled_graphs for r in g.fuse("cpu").report()]
    assert rows.count("gather") == 7 and rows.count("scatter_add") == 7, rows


def _steps(graph, target):
    return [(r["name"], r["kind"]) for r in graph.fuse(target).report()]


@pytest.mark.parametrize("target", ["cpu", "cuda:sm_90"])
@pytest.mark.parametrize("pool", ["max", "avg", "adaptive_avg", "adaptive_max"])
def test_pooling_and_its_gradient_are_fused_kernels(pool, target):
    """Fixed windows (and adaptive ones of one size) are strided slices of
    the padded input folded elementwise: pooling, its gradient and the
    loss around them compile to kernels only, with no gather or
    scatter-add and no [out, window] buffer; exact against PyTorch on the
    same float32 inputs (the fold and its inverse add no rounding beyond
    the average's one division)."""
    x = _x((2, 3, 12, 10)).astype(np.float32)
    fn = {"max": lambda a: F.max_pool2d(a, 3, 2, 1),
          "avg": lambda a: F.avg_pool2d(a, 3, 2, 1, count_include_pad=False),
          "adaptive_avg": lambda a: F.adaptive_avg_pool2d(a, (4, 5)),
          "adaptive_max": lambda a: F.adaptive_max_pool2d(a, (3, 5))}[pool]
    torch_fn = {"max": lambda t: TF.max_pool2d(t, 3, 2, 1),
                "avg": lambda t: TF.avg_pool2d(t, 3, 2, 1, count_include_pad=False),
                "adaptive_avg": lambda t: TF.adaptive_avg_pool2d(t, (4, 5)),
                "adaptive_max": lambda t: TF.adaptive_max_pool2d(t, (3, 5))}[pool]
    r = np.random.default_rng(2).standard_normal(
        tuple(torch_fn(torch.tensor(x)).shape)).astype(np.float32)
    g = tilefuse.trace(lambda a: (fn(a) * r).sum(), x).value_and_grad(wrt=(0,))
    steps = _steps(g, target)
    assert all(kind != "library" for _, kind in steps), steps
    assert len(steps) <= 4, steps
    if target == "cpu":
        loss, grad = g.compile("cpu")(x)
        t = torch.tensor(x, requires_grad=True)
        (torch_fn(t) * torch.tensor(r)).sum().backward()
        np.testing.assert_allclose(grad, t.grad.numpy(), rtol=1e-6, atol=1e-6)


def test_large_and_global_windows():
    """A window of more than 64 elements stays a gather (a slice per
    element would make kernels as long as the window); a global average
    pool is the planes' mean, one reduction. Both against PyTorch."""
    x = _x((2, 3, 12, 11)).astype(np.float32)
    for fn, torch_fn, library in [
            (lambda a: F.max_pool2d(a, 9, 3, 4), lambda t: TF.max_pool2d(t, 9, 3, 4), True),
            (lambda a: F.avg_pool2d(a, 9, 3, 4), lambda t: TF.avg_pool2d(t, 9, 3, 4), True),
            (lambda a: F.adaptive_avg_pool2d(a, 1), lambda t: TF.adaptive_avg_pool2d(t, 1),
             False)]:
        r = np.random.default_rng(2).standard_normal(
            tuple(torch_fn(torch.tensor(x)).shape)).astype(np.float32)
        g = tilefuse.trace(lambda a: (fn(a) * r).sum(), x).value_and_grad(wrt=(0,))
        assert any(kind == "library" for _, kind in _steps(g, "cpu")) == library
        _, grad = g.compile("cpu")(x)
        t = torch.tensor(x, requires_grad=True)
        (torch_fn(t) * torch.tensor(r)).sum().backward()
        np.testing.assert_allclose(grad, t.grad.numpy(), rtol=1e-6, atol=1e-6)


def test_a_negative_zero_maximum_keeps_its_sign():
    """max_pool2d of a window whose maximum is -0.0 gives -0.0, as
    PyTorch's (the picked value is not summed with +0.0)."""
    x = -np.abs(_x((1, 2, 4, 4))).astype(np.float32)
    x[0, :, :2, :2] = -0.0
    got = tilefuse.compile(lambda a: F.max_pool2d(a, 2), x, device="cpu")(x)
    want = TF.max_pool2d(torch.tensor(x), 2).numpy()
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("fn,torch_fn,shape", [
    (lambda a: F.adaptive_avg_pool2d(a, 7), lambda t: TF.adaptive_avg_pool2d(t, 7),
     (2, 3, 112, 112)),
    (lambda a: F.avg_pool2d(a, 10), lambda t: TF.avg_pool2d(t, 10), (2, 3, 45, 47)),
    (lambda a: F.avg_pool2d(a, (9, 8), divisor_override=5),
     lambda t: TF.avg_pool2d(t, (9, 8), divisor_override=5), (1, 2, 27, 33)),
    (lambda a: F.avg_pool3d(a, 5), lambda t: TF.avg_pool3d(t, 5), (1, 2, 10, 11, 12)),
], ids=["adaptive_7_of_112", "cropped", "divisor_override", "3d"])
def test_large_windows_that_tile_the_input_are_reductions(fn, torch_fn, shape):
    """Windows of more than 64 elements that tile the input (stride =
    kernel, no padding) are blocks of a reshape: the pool is one reduction
    and its gradient a broadcast, no gather or scatter-add (a tail past the
    last window gets zeros). Against PyTorch in float64, and compiled."""
    x = _x(shape)
    _check(fn, torch_fn, x, "tiled windows")
    x32 = x.astype(np.float32)
    r = np.random.default_rng(2).standard_normal(
        tuple(torch_fn(torch.tensor(x32)).shape)).astype(np.float32)
    g = tilefuse.trace(lambda a: (fn(a) * r).sum(), x32).value_and_grad(wrt=(0,))
    assert all(kind != "library" for _, kind in _steps(g, "cpu")), _steps(g, "cpu")
    _, grad = g.compile("cpu")(x32)
    t = torch.tensor(x32, requires_grad=True)
    (torch_fn(t) * torch.tensor(r)).sum().backward()
    np.testing.assert_allclose(grad, t.grad.numpy(), rtol=1e-6, atol=1e-6)


def test_large_uniform_adaptive_max_pool_keeps_pytorchs_gradient():
    """Adaptive max pooling with large uniform windows stays a gather, and
    its gradient goes to the element the index names (ties: the first)."""
    x = np.zeros((1, 2, 32, 32))
    x[0, 0, 3, 4] = x[0, 0, 5, 6] = 1.0  # a tie in one window
    _check(lambda a: F.adaptive_max_pool2d(a, 2), lambda t: TF.adaptive_max_pool2d(t, 2), x,
           "adaptive max, large windows")
    x32 = x.astype(np.float32)
    g = tilefuse.trace(lambda a: F.adaptive_max_pool2d(a, 2).sum(), x32).value_and_grad(
        wrt=(0,))
    _, grad = g.compile("cpu")(x32)
    t = torch.tensor(x32, requires_grad=True)
    TF.adaptive_max_pool2d(t, 2).sum().backward()
    np.testing.assert_array_equal(grad, t.grad.numpy())
