"""Convolutional networks from PyTorch: convolutions, batch norm in training
mode, pooling, through tilefuse.from_torch and torch.compile(backend=
"tilefuse"), 5 SGD-momentum steps against eager PyTorch. Batch norm's
running statistics are model state that the step keeps and updates
(from_torch), or buffers the backend hands back to PyTorch.

Tolerances (float32): losses within 1e-5 relative of eager's at every
step; running statistics within 1e-6 of eager's, relative to the largest
of them where that exceeds 1 (batch means and variances summed in another
order: ~1e-7 relative observed); parameters after the steps within 1e-4 of
max|eager| (five updates of f32 rounding).
"""
import copy

import numpy as np
import pytest
import torch
import torch.nn as nn

import tilefuse
from tilefuse.torch_integration import stats

LOSS_RTOL = 1e-5
STATS_RTOL = 1e-6
STEPS = 5

pytestmark = pytest.mark.usefixtures("fresh_torch_backend")


class SmallResNet(nn.Module):
    """Stem (7x7 stride 2, batch norm, ReLU, max pool), a residual block
    and a depthwise-separable block with squeeze-excite, global average
    pool, linear: the layer kinds of ResNet and EfficientNet."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 7, 2, 3, bias=False), nn.BatchNorm2d(8),
                                  nn.ReLU(), nn.MaxPool2d(3, 2, 1))
        self.res = nn.Sequential(nn.Conv2d(8, 8, 3, 1, 1, bias=False), nn.BatchNorm2d(8),
                                 nn.ReLU(), nn.Conv2d(8, 8, 3, 1, 1, bias=False),
                                 nn.BatchNorm2d(8))
        self.depthwise = nn.Sequential(nn.Conv2d(8, 8, 3, 2, 1, groups=8, bias=False),
                                       nn.BatchNorm2d(8), nn.SiLU())
        self.se = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(8, 2, 1), nn.SiLU(),
                                nn.Conv2d(2, 8, 1), nn.Sigmoid())
        self.project = nn.Sequential(nn.Conv2d(8, 16, 1, bias=False), nn.BatchNorm2d(16))
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 5))

    def forward(self, x):
        x = self.stem(x)
        x = torch.relu(x + self.res(x))
        x = self.depthwise(x)
        return self.head(self.project(x * self.se(x)))


def _loss(model, x, y):
    return nn.functional.cross_entropy(model(x), y)


def _batches():
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(4, 3, 33, 31, generator=g), torch.randint(0, 5, (4,), generator=g))
            for _ in range(STEPS)]


def _train(model, batches, run=None, opt=None, loss_fn=None):
    """The losses of `opt`'s steps (SGD with momentum by default) of
    `model`, its forward run by `run` (a compiled `model`) or by itself."""
    opt = opt or torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    losses = []
    for x, y in batches:
        opt.zero_grad()
        loss = (loss_fn or _loss)(model if run is None else run, x, y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def _running_stats(state):
    return {k: v for k, v in state.items() if "running" in k or "num_batches" in k}


def _check(path, got, want, got_state, want_state, stats_rtol=STATS_RTOL, param_rtol=1e-4):
    for t, (g, w) in enumerate(zip(got, want)):
        assert abs(g - w) <= LOSS_RTOL * abs(w), f"{path}: step {t}: loss {g} vs eager {w}"
    stats_want = _running_stats(want_state)
    assert stats_want, "the model has no running statistics"
    for k, w in stats_want.items():
        g = torch.as_tensor(np.asarray(got_state[k]))
        if w.dtype == torch.int64:
            assert int(g) == int(w), f"{path}: {k} = {int(g)}, eager {int(w)}"
        else:
            err = (g.double() - w.double()).abs().max().item()
            scale = max(1.0, w.double().abs().max().item())
            assert err <= stats_rtol * scale, (
                f"{path}: {k} differs from eager by {err:.2e} (max |eager| {scale:.3g})")
    for k, w in want_state.items():
        if k not in stats_want:
            g = torch.as_tensor(np.asarray(got_state[k])).double()
            err = ((g - w.double()).abs().max() / w.double().abs().max()).item()
            assert err <= param_rtol, f"{path}: parameter {k} differs from eager by {err:.2e}"


def test_from_torch_trains_a_small_resnet_like_eager_with_running_statistics():
    """Batch norm's running statistics (and its batch counter) are state
    the step updates: after 5 steps step.state_dict() holds PyTorch's
    values; capturing the model leaves the module's own buffers alone."""
    torch.manual_seed(0)
    model = SmallResNet().train()
    twin = copy.deepcopy(model)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    batches = _batches()
    want = _train(twin, batches)
    step = tilefuse.from_torch(model, batches[0], torch.optim.SGD(model.parameters(), lr=0.05,
                                                                   momentum=0.9), loss_fn=_loss)
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k]), f"capture changed the module's {k}"
    names = [r["name"] for r in step.report()]
    assert names.count("conv") == 7 and names.count("conv_grad_weight") == 7, names
    got = [step(x, y) for x, y in batches]
    _check("from_torch", got, want, step.state_dict(), twin.state_dict())
    # copy_to brings the statistics back into a module.
    fresh = SmallResNet()
    step.copy_to(fresh)
    assert torch.equal(fresh.stem[1].num_batches_tracked, twin.stem[1].num_batches_tracked)


def test_the_backend_trains_a_small_resnet_like_eager_converted_whole():
    torch.manual_seed(0)
    model = SmallResNet().train()
    twin = copy.deepcopy(model)
    batches = _batches()
    want = _train(twin, batches)
    got = _train(model, batches, torch.compile(model, backend="tilefuse"))
    assert stats.compiled >= 2 and stats.partitioned == 0 and stats.eager == 0, stats
    assert not stats.unsupported, stats
    _check("torch.compile(backend='tilefuse')", got, want, model.state_dict(),
           twin.state_dict())


def _unet():
    import os
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
    import conv_models
    return conv_models


@pytest.mark.parametrize("path", ["from_torch", "backend"])
def test_unet_effnet_trains_like_eager(path):
    """WORKLOADS' unet_effnet (MBConv encoder with squeeze-excite, bilinear
    upsampling and skip concatenations, 151-class pixelwise cross-entropy
    with an ignore band, AdamW) at batch 2, 32x32: 3 steps as in eager,
    every graph converted whole. Running statistics within 1e-5 and
    parameters within 1e-3 of max|eager|: AdamW's first updates are
    lr * g / (|g| + eps), about lr * sign(g) whatever g's size, so where a
    gradient is near 0 its f32 rounding moves the parameter by up to lr
    (1.2e-4 relative observed on both paths), and the later batch
    statistics with it (1.2e-6)."""
    C = _unet()
    torch.manual_seed(0)
    model = C.unet_effnet().train()
    twin = copy.deepcopy(model)
    batches = [C.segmentation_batch(2, 32, seed=s) for s in range(3)]
    def adamw(m):
        return torch.optim.AdamW(m.parameters(), lr=1e-3, weight_decay=1e-2)
    want = _train(twin, batches, opt=adamw(twin), loss_fn=C.segmentation_loss)
    opt = adamw(model)
    if path == "from_torch":
        step = tilefuse.from_torch(model, batches[0], opt, loss_fn=C.segmentation_loss)
        got = [step(x, y) for x, y in batches]
        state = step.state_dict()
    else:
        got = _train(model, batches, torch.compile(model, backend="tilefuse"), opt,
                     C.segmentation_loss)
        assert stats.partitioned == 0 and stats.eager == 0 and not stats.unsupported, stats
        state = model.state_dict()
    _check(path, got, want, state, twin.state_dict(), stats_rtol=1e-5, param_rtol=1e-3)


def test_the_backend_runs_bf16_autocast_with_batch_norm_updates(compiled_graphs):
    """Under PyTorch's CPU autocast (bf16 convolutions) with batch norm's
    buffers updated in place: the bf16 results come back as new tensors
    beside the in-place updates (this raised before), and the losses follow
    eager autocast within bf16's 1e-2. Every convolution and both its
    gradients run as library convolutions (they were written out as im2col
    gathers and matmuls when the backward graph got the saved bf16
    activations widened to f32 beside bf16 gradients), and bf16 tensors
    cross into and out of the graphs as bf16."""
    torch.manual_seed(0)
    model = SmallResNet().train()
    twin = copy.deepcopy(model)
    compiled = torch.compile(model, backend="tilefuse")
    for path, run, m in (("backend", compiled, model), ("eager", twin, twin)):
        opt = torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9)
        losses = []
        for x, y in _batches()[:2]:
            opt.zero_grad()
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = _loss(run, x, y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        if path == "backend":
            got = losses
    for t, (g, w) in enumerate(zip(got, losses)):
        assert abs(g - w) <= 1e-2 * abs(w), f"step {t}: bf16 loss {g} vs eager {w}"
    assert stats.partitioned == 0 and stats.eager == 0, stats
    convs = sum(isinstance(m, nn.Conv2d) for m in model.modules())
    names = [r["name"] for g in compiled_graphs for r in g.fuse("cpu").report()]
    for kind in ("conv", "conv_grad_weight"):
        assert names.count(kind) == convs, (kind, convs, names)
    # bf16 tensors cross as bf16 (their bits), not widened to f32: the
    # backward graph takes the saved bf16 activations as bf16 arguments.
    arguments = [next(line for line in g.mlir().splitlines() if "func.func" in line)
                 .split("->")[0] for g in compiled_graphs]
    assert any("bf16>" in a for a in arguments), arguments
