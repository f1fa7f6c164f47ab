"""F.linear_cross_entropy's chunked form (PyTorch computes the loss and
the gradients of the input, weight and bias in its forward, in chunks of
the batch) through the torch.compile backend: converted whole, loss and
gradients against eager within 1e-5 relative (float32; the chunks only
change the order of PyTorch's sums), with a bias or without, mean and sum,
ignored targets, a single 1-D sample. (Class weights and label smoothing
run in PyTorch.)"""
import pytest
import torch
import torch.nn.functional as F

import tilefuse  # noqa: F401 (the backend)
from tilefuse.torch_integration import stats

opts = pytest.importorskip("torch.nn.modules.linear_cross_entropy_options",
                           reason="F.linear_cross_entropy's options need torch >= 2.15")
RTOL = 1e-5

CASES = [
    dict(n=8, bias=False, reduction="mean", ignore=None),
    dict(n=9, bias=True, reduction="mean", ignore=None),
    dict(n=7, bias=True, reduction="sum", ignore=None),
    dict(n=8, bias=False, reduction="mean", ignore=2),
    dict(n=None, bias=True, reduction="mean", ignore=None),
]


def _close(got, want):
    return (got - want).abs().max().item() <= RTOL * max(1.0, want.abs().max().item())


@pytest.mark.parametrize("case", CASES, ids=[str(c) for c in CASES])
def test_chunked_linear_cross_entropy_matches_eager(case):
    torch._dynamo.reset()
    stats.reset()
    g = torch.Generator().manual_seed(7)
    d, classes = 5, 6
    x = torch.randn((case["n"], d) if case["n"] else (d,), generator=g)
    w = torch.randn(classes, d, generator=g)
    b = torch.randn(classes, generator=g) if case["bias"] else None
    y = torch.randint(0, classes, (case["n"],) if case["n"] else (), generator=g)
    if case["ignore"] is not None:
        y[::3] = case["ignore"]
    # allow_retain_graph=True: what torch.compile promotes it to anyway (with
    # a warning, which Dynamo cannot trace).
    options = opts.LinearCrossEntropyOptions(batch_chunk_size=2, allow_retain_graph=True)
    kwargs = dict(reduction=case["reduction"], options=options)
    if case["ignore"] is not None:
        kwargs["ignore_index"] = case["ignore"]

    def f(x, w, b):
        return F.linear_cross_entropy(x, w, y, linear_bias=b, **kwargs)

    leaves = [[t.clone().requires_grad_() if t is not None else None for t in (x, w, b)]
              for _ in range(2)]
    want = f(*leaves[0])
    want.backward()
    got = torch.compile(f, backend="tilefuse", dynamic=False)(*leaves[1])
    got.backward()
    assert _close(got, want), (got, want)
    for a, e in zip(leaves[1], leaves[0]):
        if e is not None:
            assert _close(a.grad, e.grad), (a.grad, e.grad)
    assert (stats.compiled, stats.partitioned, stats.eager) == (2, 0, 0), stats
