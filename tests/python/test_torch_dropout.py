"""Dropout and random ops through the PyTorch import (aten_import's rand,
bernoulli and native_dropout over graph.random_uniform): the masks follow
PyTorch's distribution (not its bits), the backward pass reuses the forward
mask, masks change from call to call and follow torch.manual_seed under
torch.compile, and from_torch seeds them per step."""
import numpy as np

# PyTorch is part of the setup (tools/dev.sh): its absence is a failure.
import torch  # noqa: E402

import tilefuse  # noqa: E402
from tilefuse import torch_integration  # noqa: E402

P = 0.25
N = 200_000
# The kept fraction of N Bernoulli(1 - P) draws is within 5 standard
# deviations of 1 - P (a false alarm about once in 3.5 million runs).
KEEP_TOLERANCE = 5 * np.sqrt(P * (1 - P) / N)


class Drop(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(N))

    def forward(self, x):
        return torch.nn.functional.dropout(x * self.w, P, self.training)


def _check_mask(y, what):
    y = y.detach().numpy()
    kept = y != 0
    frac = kept.mean()
    assert abs(frac - (1 - P)) <= KEEP_TOLERANCE, (
        f"{what}: kept fraction {frac:.5f}, expected {1 - P} +- {KEEP_TOLERANCE:.5f}")
    np.testing.assert_allclose(y[kept], 1 / (1 - P), rtol=1e-6,
                               err_msg=f"{what}: kept values are not scaled by 1/(1-p)")
    return kept


def test_compiled_dropout_masks_follow_the_distribution_and_the_backward_reuses_them():
    torch_integration.stats.reset()
    torch._dynamo.reset()
    m = Drop()
    f = torch.compile(m, backend="tilefuse", dynamic=False)
    x = torch.ones(N)
    torch.manual_seed(0)
    y = f(x)
    kept = _check_mask(y, "torch.compile forward")
    y.sum().backward()
    g = m.w.grad.numpy()
    np.testing.assert_allclose(g[kept], 1 / (1 - P), rtol=1e-6,
                               err_msg="the backward pass does not use the forward mask")
    assert not g[~kept].any(), "dropped elements got a gradient"
    s = torch_integration.stats
    assert (s.compiled, s.partitioned, s.eager, s.unsupported) == (2, 0, 0, {}), s
    # A new mask per call; the same ones after the same torch.manual_seed.
    y2 = f(x)
    assert (y2.detach() != y.detach()).any(), "two calls drew the same mask"
    torch.manual_seed(0)
    y3 = f(x)
    assert torch.equal(y3, y), "torch.manual_seed(0) did not repeat the first mask"


def test_eval_mode_has_no_dropout():
    torch._dynamo.reset()
    torch_integration.stats.reset()
    m = Drop().eval()
    y = torch.compile(m, backend="tilefuse", dynamic=False)(torch.ones(N))
    assert torch.equal(y.detach(), torch.ones(N))
    s = torch_integration.stats
    assert s.compiled >= 1 and (s.partitioned, s.eager, s.unsupported) == (0, 0, {}), s


def test_from_torch_draws_a_mask_per_step():
    class Loss(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(N))

        def forward(self, x):
            # d loss / d w = dropout mask / (1 - p) / N: the update shows it.
            return torch.nn.functional.dropout(x + self.w, P, True).sum() / N

    m = Loss()
    step = tilefuse.from_torch(m, (torch.ones(N),), tilefuse.optim.SGD(lr=float(N)),
                               device="cpu")
    before = step.parameters()["w"].copy()
    step(torch.ones(N))
    delta = before - step.parameters()["w"]
    kept = delta != 0
    assert abs(kept.mean() - (1 - P)) <= KEEP_TOLERANCE, kept.mean()
    np.testing.assert_allclose(delta[kept], 1 / (1 - P), rtol=1e-5)
    step(torch.ones(N))
    delta2 = before - delta - step.parameters()["w"]
    assert (np.asarray(delta2 != 0) != kept).any(), "two steps drew the same mask"
