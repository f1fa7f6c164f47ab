"""Convolution epilogues applied by the CPU's convolution library: a
per-channel bias, an inference batch norm (its scale folded into the
weight, where the weight is small beside the output; its shift into the
bias) and a silu after a convolution become one graph.conv_bias_act, which
oneDNN computes while it writes the output (no kernel passes over it
again). relu stays a kernel: oneDNN's relu makes a NaN 0.

Tolerances (float32 against PyTorch in float64): 1e-5 of the largest
|value|: folding rounds conv(x, w * s) once where conv(x, w) * s rounds
twice, a few ulp of the accumulated sum either way.
"""
import copy
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tilefuse
import tilefuse.functional as F

torch = pytest.importorskip("torch")
nn = torch.nn

RTOL = 1e-5


def _rand(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def _block_inputs(groups, bias, seed=0):
    rng = np.random.default_rng(seed)
    c_in = 8 if groups > 1 else 3
    # Outputs large enough beside the weights for the scale to fold into
    # them (the fold's weight-size rule).
    x, w = _rand(rng, 2, c_in, 33, 31), _rand(rng, 8, c_in // groups, 3, 3)
    mean, gamma, beta = _rand(rng, 8), _rand(rng, 8), _rand(rng, 8)
    var = (np.abs(_rand(rng, 8)) + 0.5).astype(np.float32)
    b = _rand(rng, 8) if bias else None
    return x, w, b, mean, var, gamma, beta


def _block(activation, stride, groups):
    """conv -> [bias] -> inference batch norm -> activation, traced."""
    def fn(x, w, b, mean, var, gamma, beta):
        y = F.conv2d(x, w, b, stride=stride, padding=1, groups=groups)
        y = F.batch_norm(y, mean, var, gamma, beta, training=False)
        return {"relu": F.relu, "silu": F.silu, "none": lambda v: v}[activation](y)
    return fn


def _torch_block(activation, stride, groups, x, w, b, mean, var, gamma, beta):
    t = lambda a: None if a is None else torch.from_numpy(a).double()  # noqa: E731
    y = nn.functional.conv2d(t(x), t(w), t(b), stride=stride, padding=1, groups=groups)
    y = nn.functional.batch_norm(y, t(mean), t(var), t(gamma), t(beta), training=False)
    return {"relu": torch.relu, "silu": nn.functional.silu, "none": lambda v: v}[activation](
        y).numpy()


def _compile_block(activation, stride, groups, bias):
    args = _block_inputs(groups, bias)
    fn = _block(activation, stride, groups)
    if not bias:  # the bias argument dropped from the traced signature
        x, w, _, *rest = args
        traced = lambda x, w, *r: fn(x, w, None, *r)  # noqa: E731
        return tilefuse.compile(traced, x, w, *rest), (x, w, *rest), args
    return tilefuse.compile(fn, *args), args, args


CASES = [("relu", 1, 1, False), ("silu", 2, 1, True), ("relu", 1, 8, True),
         ("none", 2, 8, False)]


@pytest.mark.parametrize("activation,stride,groups,bias", CASES)
def test_inference_batch_norm_and_activation_fold_into_the_convolution(
        activation, stride, groups, bias, monkeypatch):
    compiled, call_args, args = _compile_block(activation, stride, groups, bias)
    want = _torch_block(activation, stride, groups, *args)
    got = np.asarray(compiled(*call_args))
    scale = np.abs(want).max()
    assert np.abs(got - want).max() <= RTOL * scale
    rows = compiled.report()
    names = [r["name"] for r in rows]
    assert names.count("conv_bias_act") == 1 and "conv" not in names, names
    # No kernel reads or writes anything of the output's size but relu's
    # (oneDNN's relu would make a NaN 0: relu stays a kernel): the scale and
    # shift are per-channel kernels, the weight's scaling one over the
    # weight (at most an eighth of the output's elements).
    out_bytes = want.size * 4
    big = [r for r in rows if r["kind"] != "library" and r["bytes"] >= out_bytes]
    assert len(big) == (activation == "relu"), big
    # The switch keeps the epilogue a kernel (a compile of its own, not the
    # cached one), with the same values to rounding.
    monkeypatch.setenv("TILEFUSE_CONV_EPILOGUES", "0")
    unfolded, _, _ = _compile_block(activation, stride, groups, bias)
    names = [r["name"] for r in unfolded.report()]
    assert "conv" in names and "conv_bias_act" not in names, names
    assert np.abs(np.asarray(unfolded(*call_args)) - want).max() <= RTOL * scale


def test_without_onednn_the_epilogue_runs_after_the_convolution(tmp_path):
    """With oneDNN off the convolution runs its reference loops and the
    epilogue after it: the same values (a fresh process: oneDNN is loaded
    once per process)."""
    script = tmp_path / "no_onednn.py"
    script.write_text(textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        import numpy as np
        from tilefuse import _core
        import test_conv_epilogue as t
        assert _core.onednn_status() != "loaded", _core.onednn_status()
        for case in t.CASES:
            compiled, call_args, args = t._compile_block(*case)
            assert "conv_bias_act" in [r["name"] for r in compiled.report()]
            want = t._torch_block(*case[:3], *args)
            err = np.abs(np.asarray(compiled(*call_args)) - want).max()
            assert err <= t.RTOL * np.abs(want).max(), (case, err)
        print("ok")
    """))
    env = dict(os.environ, TILEFUSE_DNNL="none")
    out = subprocess.run([sys.executable, str(script)], env=env, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0 and "ok" in out.stdout, out.stdout + out.stderr


class FrozenBatchNormNet(nn.Module):
    """Convolutions with batch norm in inference mode (frozen statistics, as
    when fine-tuning a detector's backbone), a biased convolution with SiLU
    and a residual add: the folds must not change a gradient."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1, bias=False), nn.BatchNorm2d(8),
                                  nn.ReLU())
        self.block = nn.Sequential(nn.Conv2d(8, 8, 3, 1, 1, groups=8, bias=False),
                                   nn.BatchNorm2d(8), nn.SiLU(), nn.Conv2d(8, 8, 1),
                                   nn.BatchNorm2d(8))
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4))

    def forward(self, x):
        x = self.stem(x)
        return self.head(torch.relu(x + self.block(x)))


def _loss(model, x, y):
    return nn.functional.cross_entropy(model(x), y)


def test_from_torch_trains_with_frozen_batch_norm_like_eager():
    torch.manual_seed(0)
    model = FrozenBatchNormNet()
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2.0)
    model.eval()  # batch norm with running statistics, in training too
    twin = copy.deepcopy(model)
    g = torch.Generator().manual_seed(1)
    batches = [(torch.randn(4, 3, 21, 19, generator=g), torch.randint(0, 4, (4,), generator=g))
               for _ in range(4)]
    opt = torch.optim.SGD(twin.parameters(), lr=0.05, momentum=0.9)
    want = []
    for x, y in batches:
        opt.zero_grad()
        loss = _loss(twin, x, y)
        loss.backward()
        opt.step()
        want.append(loss.item())
    step = tilefuse.from_torch(model, batches[0], torch.optim.SGD(model.parameters(), lr=0.05,
                                                                   momentum=0.9), loss_fn=_loss)
    names = [r["name"] for r in step.report()]
    # The stem (batch norm + relu) and the depthwise convolution (batch
    # norm; its SiLU's input is saved for the backward pass) fold; the 1x1
    # stride-1 one keeps its bias and batch norm a kernel (oneDNN runs it on
    # plain layouts, where its epilogue is slower).
    assert names.count("conv_bias_act") == 2 and names.count("conv") == 1, names
    got = [step(x, y) for x, y in batches]
    for t, (a, b) in enumerate(zip(got, want)):
        assert abs(a - b) <= RTOL * abs(b), f"step {t}: loss {a} vs eager {b}"
    state = step.state_dict()
    for k, w in twin.state_dict().items():
        if "running" in k or "num_batches" in k:
            assert torch.equal(torch.as_tensor(np.asarray(state[k])), w), k
        else:
            err = (torch.as_tensor(np.asarray(state[k])).double() - w.double()).abs().max()
            assert err <= 1e-4 * w.double().abs().max(), (k, float(err))


def test_a_nan_survives_a_folded_convolution_and_its_relu():
    """A NaN in a convolution's input stays NaN through the folded batch
    norm and the relu after it, as in PyTorch (oneDNN's relu would make it
    0, which is why relu is not folded)."""
    compiled, call_args, args = _compile_block("relu", 1, 1, False)
    x = call_args[0].copy()
    x[0, 0, 5, 5] = np.nan
    got = np.asarray(compiled(x, *call_args[1:]))
    want = _torch_block("relu", 1, 1, x, *args[1:])
    assert np.array_equal(np.isnan(got), np.isnan(want)) and np.isnan(want).any()
    assert "conv_bias_act" in [r["name"] for r in compiled.report()]
