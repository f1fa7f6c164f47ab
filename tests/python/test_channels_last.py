"""Channels-last convolutions on the CPU (passes/LayOutChannelsLast.cpp):
fusion gives every convolution [N, H, W, C] activations, which oneDNN reads
and writes without reorders, and carries that layout through the batch
norms, activations, squeeze-excite, upsampling, skip concatenations and the
loss between them. The layout must change nothing but speed: a segmentation
step trains the same with it and without it (TILEFUSE_CHANNELS_LAST=0), and
like PyTorch. The batch-norm statistics then reduce over every dimension but
the innermost: such a reduction with a full-size result beside it is split
over slices of rows (one program per block of channels would walk the whole
batch alone), on the CPU and under the CUDA emulation."""
import copy
import re

import numpy as np
import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
TF = torch.nn.functional

import tilefuse  # noqa: E402
from cuda_emulation import check_emulated, unavailable_reason  # noqa: E402

STEPS = 3
IGNORE = 255


class SegmentationBlock(nn.Module):
    """A small U-Net with an MBConv encoder: stem conv (stride 2) + BN +
    SiLU, depthwise 3x3 + BN + SiLU, squeeze-excite, a strided conv down,
    bilinear upsampling, a skip concatenation, conv + BN + ReLU, bilinear
    back to full size, a 1x1 convolution to the classes."""

    def __init__(self, classes=7):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16),
                                  nn.SiLU())
        self.depthwise = nn.Sequential(nn.Conv2d(16, 16, 3, 1, 1, groups=16, bias=False),
                                       nn.BatchNorm2d(16), nn.SiLU())
        self.se = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(16, 4, 1), nn.SiLU(),
                                nn.Conv2d(4, 16, 1), nn.Sigmoid())
        self.down = nn.Sequential(nn.Conv2d(16, 24, 3, 2, 1, bias=False), nn.BatchNorm2d(24),
                                  nn.ReLU())
        self.decode = nn.Sequential(nn.Conv2d(40, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16),
                                    nn.ReLU())
        self.head = nn.Conv2d(16, classes, 1)

    def forward(self, x):
        h = self.depthwise(self.stem(x))
        h = h * self.se(h)
        d = self.down(h)
        u = TF.interpolate(d, scale_factor=2, mode="bilinear", align_corners=False)
        u = self.decode(torch.cat([u, h], 1))
        u = TF.interpolate(u, scale_factor=2, mode="bilinear", align_corners=False)
        return self.head(u)


def _loss(model, x, y):
    return TF.cross_entropy(model(x), y, ignore_index=IGNORE)


def _data():
    g = torch.Generator().manual_seed(5)
    x = torch.randn(2, 3, 32, 32, generator=g)
    y = torch.randint(0, 7, (2, 32, 32), generator=g)
    y[0, :4] = IGNORE
    return x, y


def _train(monkeypatch, channels_last):
    """(losses, parameters, the fused training step's IR) of STEPS AdamW
    steps through from_torch."""
    monkeypatch.setenv("TILEFUSE_CHANNELS_LAST", "1" if channels_last else "0")
    torch.manual_seed(0)
    model = SegmentationBlock()
    x, y = _data()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=1e-2)
    step = tilefuse.from_torch(model, (x, y), opt, loss_fn=_loss)
    losses = [float(step(x, y)) for _ in range(STEPS)]
    params = {k: v.detach().numpy().copy() for k, v in step.state_dict().items()}
    ir = step.train_step.graph.fuse("cpu").mlir()
    return losses, params, ir[ir.index("_train_step("):]  # the step's function


def _eager_losses():
    torch.manual_seed(0)
    model = SegmentationBlock().double()
    x, y = _data()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=1e-2)
    out = []
    for _ in range(STEPS):
        opt.zero_grad()
        loss = _loss(model, x.double(), y)
        loss.backward()
        opt.step()
        out.append(float(loss))
    return out


def test_segmentation_step_trains_alike_in_either_layout(monkeypatch):
    last_losses, last_params, last_ir = _train(monkeypatch, True)
    first_losses, first_params, first_ir = _train(monkeypatch, False)
    # Every convolution of the step (forward and both gradients) runs
    # channels-last, or none does.
    convs = len(re.findall(r"= graph\.conv(?:_bias_act|_grad_input|_grad_weight)? ", last_ir))
    assert convs >= 15, convs
    assert last_ir.count("channels_last = true") == convs
    assert "channels_last = true" not in first_ir
    for step, (a, b) in enumerate(zip(last_losses, first_losses)):
        assert abs(a - b) <= 1e-5 * abs(b), f"step {step}: loss {a} channels-last, {b} not"
    for name, value in first_params.items():
        err = np.abs(last_params[name] - value).max() / max(1e-3, np.abs(value).max())
        assert err <= 1e-4, f"{name}: channels-last parameters differ by {err:.2e} (relative)"
    for step, (a, want) in enumerate(zip(last_losses, _eager_losses())):
        assert abs(a - want) <= 1e-5 * abs(want), f"step {step}: loss {a}, PyTorch float64 {want}"


def _normalise(x):
    """The sum of x's squares over every dimension but the last (a batch
    norm's statistics channels-last), with a full-size result that reads no
    reduction (2 x) beside it."""
    return x * 2.0, (x * x).sum(dim=(0, 1, 2))


def test_column_statistics_beside_a_full_size_result_split_over_rows():
    x = np.random.default_rng(0).standard_normal((8, 32, 32, 64)).astype(np.float32)
    fn = tilefuse.compile(_normalise, x)
    doubled, squares = fn(x)
    np.testing.assert_allclose(doubled, 2 * x, rtol=0, atol=0)
    want = (x.astype(np.float64) ** 2).sum(axis=(0, 1, 2))
    np.testing.assert_allclose(squares, want, rtol=1e-6)
    rows = fn.report()
    partial = [r for r in rows if r["name"].endswith("_partial")]
    combine = [r for r in rows if r["name"].endswith("_combine")]
    assert len(partial) == 1 and len(combine) == 1, [r["name"] for r in rows]
    assert partial[0]["grid"] > 1


@pytest.mark.skipif(unavailable_reason() is not None, reason=str(unavailable_reason()))
def test_column_statistics_beside_a_full_size_result_under_cuda_emulation(tmp_path):
    x = np.random.default_rng(1).standard_normal((4, 16, 16, 48)).astype(np.float32)
    check_emulated(tilefuse.trace(_normalise, x), (x,), str(tmp_path), 1e-5, 1e-5,
                   name="column statistics")
