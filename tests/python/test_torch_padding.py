"""Replicate padding through the torch.compile backend, forward and
backward, on the shapes OpInfo's few samples leave out: 1-D, 2-D and 3-D
padding, one-element dims (both edge bands land on the same element),
negative amounts (cropping) on either side, and bands wider than the input.
Converted whole (stats), results against eager: forward exact (a gather),
gradients within 1e-6 relative (float32 sums of at most a few terms in
another order)."""
import pytest
import torch
import torch.nn.functional as F

import tilefuse  # noqa: F401 (the backend)
from tilefuse.torch_integration import stats

GRAD_RTOL = 1e-6

CASES = [
    ((2, 3, 5), (1, 2)),
    ((2, 3, 1), (3, 2)),
    ((2, 3, 6), (-2, 3)),
    ((2, 3, 6), (4, -1)),
    ((1, 2, 4, 5), (1, 2, 3, 0)),
    ((1, 2, 4, 5), (0, 0, 2, -3)),
    ((1, 2, 1, 3), (2, 2, 1, 1)),
    ((1, 2, 3, 4, 2), (1, 0, 2, 1, 1, 3)),
]


@pytest.mark.parametrize("shape,pad", CASES, ids=[f"{s}-{p}" for s, p in CASES])
def test_replicate_pad_forward_and_backward_match_eager(shape, pad):
    torch._dynamo.reset()
    stats.reset()
    g = torch.Generator().manual_seed(sum(shape) + len(pad))
    x = torch.randn(shape, generator=g)
    out_shape = F.pad(x, pad, mode="replicate").shape
    w = torch.randn(out_shape, generator=g)

    def f(x):
        return F.pad(x, pad, mode="replicate")

    xs = [x.clone().requires_grad_(), x.clone().requires_grad_()]
    want = f(xs[0])
    (want * w).sum().backward()
    got = torch.compile(f, backend="tilefuse", dynamic=False)(xs[1])
    (got * w).sum().backward()
    assert torch.equal(got, want)
    scale = xs[0].grad.abs().max().item()
    assert (xs[1].grad - xs[0].grad).abs().max().item() <= GRAD_RTOL * scale, (shape, pad)
    assert (stats.compiled, stats.partitioned, stats.eager) == (2, 0, 0), stats
