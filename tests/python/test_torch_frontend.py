"""The PyTorch front end: torch.compile(model, backend="tilefuse"),
tilefuse.from_torch and tilefuse.explain, on the nn.Modules of torch_zoo.py
(a nanoGPT-style GPT with tied LM head, an MLP classifier, an embedding
recommender, and a model using torch.lgamma, which tilefuse does not
convert) against eager PyTorch.

Error measures and tolerances (float32 throughout; never loosened to make a
test pass):
* losses: |got - eager| / |eager| <= 1e-5 at every step (LOSS_RTOL);
  observed <= ~2e-7 (one or two f32 ulps). Two tilefuse runs of the same
  step with differently written but equal optimizers: 1e-6 (SAME_RTOL).
* gradients (first step, every parameter): max|got - eager| / max|eager|
  per tensor <= 1e-5 (GRAD_RTOL); a max-norm relative error, because single
  elements of a gradient can be ~0. Observed <= ~4e-7.
* parameters after training: ||got - eager|| / ||eager - initial|| over
  all parameters together (Frobenius norms: the error relative to how far
  training moved them, so an error in the update is not hidden by the size
  of the parameters) <= 1e-4 (PARAM_RTOL); observed <= ~2e-5. Not a
  per-element or per-tensor max: Adam's update g / (sqrt(v) + eps) turns
  f32 rounding in gradient elements of ~eps size into lr-sized differences
  (observed up to ~1e-2 of a tensor's max change in single elements of the
  GPT's c_fc.weight, whose eager gradient there is ~6e-9). Leaving out the
  0.1 weight decay of the GPT's decay group gives ~2e-3 after one step.
"""
import inspect
import logging
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

# PyTorch is part of the setup (tools/dev.sh): its absence is a failure.
import torch  # noqa: E402

import tilefuse  # noqa: E402
from tilefuse import optim  # noqa: E402
from tilefuse import _core  # noqa: E402
from tilefuse.torch_integration import stats  # noqa: E402

import torch_zoo as Z  # noqa: E402

LOSS_RTOL = 1e-5
SAME_RTOL = 1e-6
GRAD_RTOL = 1e-5
PARAM_RTOL = 1e-4
LR = 3e-3
STEPS = 20

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


pytestmark = pytest.mark.usefixtures("fresh_torch_backend")


# ---------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------

def twins(cls, seed=0):
    """Two modules of `cls` with the same initial state (training mode)."""
    torch.manual_seed(seed)
    a = cls()
    b = cls()
    b.load_state_dict(a.state_dict())
    a.train()
    b.train()
    return a, b


def batches(cls, n, base=100):
    return [cls.make_inputs(base + i) for i in range(n)]


def rel(got, want):
    return abs(float(got) - float(want)) / max(abs(float(want)), 1e-30)


def max_rel_err(got, want):
    """max|got - want| / max|want| (max |got - want| if want is all 0)."""
    got = torch.as_tensor(got).detach().double()
    want = torch.as_tensor(want).detach().double()
    assert got.shape == want.shape, f"shape {tuple(got.shape)} vs {tuple(want.shape)}"
    scale = want.abs().max().item()
    err = (got - want).abs().max().item()
    return err / scale if scale > 0 else err


def check_loss(model, step, got, want, tol=LOSS_RTOL, what="loss"):
    e = rel(got, want)
    assert e <= tol, (f"{model}: step {step}: {what}: tilefuse {got!r} vs eager {want!r}, "
                      f"relative error {e:.3g} > {tol:g}")


def check_tensors(model, step, what, got, want, tol):
    """got, want: {parameter name: tensor}; every tensor within tol."""
    assert set(got) == set(want), f"{model}: step {step}: {what}: names differ: " \
        f"{sorted(set(got) ^ set(want))}"
    errs = {n: max_rel_err(got[n], want[n]) for n in want}
    bad = {n: e for n, e in errs.items() if not e <= tol}
    assert not bad, (f"{model}: step {step}: {what}: max|diff|/max|eager| above {tol:g} for "
                     + ", ".join(f"parameter {n}: {e:.3g}"
                                 for n, e in sorted(bad.items(), key=lambda kv: -kv[1])))
    return max(errs.values())


def check_params_after(model, step, got, want, start, tol=PARAM_RTOL):
    """Parameters after training: ||got - eager|| / ||eager - start|| over
    all parameters together (Frobenius norms), i.e. the error relative to
    how far eager training moved them."""
    num = den = 0.0
    per = {}
    for n in want:
        g = torch.as_tensor(got[n]).double()
        w, s = want[n].detach().double(), start[n].double()
        d2, m2 = ((g - w) ** 2).sum().item(), ((w - s) ** 2).sum().item()
        num, den = num + d2, den + m2
        per[n] = (d2 / m2) ** 0.5 if m2 > 0 else d2 ** 0.5
    e = (num / den) ** 0.5 if den > 0 else num ** 0.5
    worst = sorted(per.items(), key=lambda kv: -kv[1])[:4]
    assert e <= tol, (f"{model}: after step {step}: parameters: ||tilefuse - eager|| / "
                      f"||eager change|| = {e:.3g} > {tol:g}; worst tensors: " + ", ".join(
                          f"parameter {n}: {v:.3g}" for n, v in worst))
    return e


def decay_groups(module):
    """nanoGPT's AdamW groups: tensors of dim >= 2 decay, the others not."""
    ps = [p for _, p in module.named_parameters()]
    return [{"params": [p for p in ps if p.dim() >= 2], "weight_decay": 0.1},
            {"params": [p for p in ps if p.dim() < 2], "weight_decay": 0.0}]


def check_converted(what, compiled, partitioned=0, eager=0, unsupported=()):
    """What the torch.compile backend did since stats.reset(): exactly
    `compiled` ATen graphs compiled whole, `partitioned` split between
    tilefuse and PyTorch, `eager` left to PyTorch, and the ops it could
    not convert exactly `unsupported` (names as in stats.unsupported). The
    backend falls back to PyTorch without failing, so eager's results alone
    cannot show that tilefuse converted anything."""
    did = (stats.compiled, stats.partitioned, stats.eager, sorted(stats.unsupported))
    want = (compiled, partitioned, eager, sorted(unsupported))
    assert did == want, (f"{what}: (compiled, partitioned, eager, unsupported ops) {did}, "
                         f"expected {want}: {stats}")


def source_line(fn, needle):
    """'torch_zoo.py", line N' of the line of fn's source containing needle."""
    lines, first = inspect.getsourcelines(fn)
    for i, text in enumerate(lines):
        if needle in text:
            return f'torch_zoo.py", line {first + i}'
    raise AssertionError(f"{needle!r} not in {fn.__qualname__}")


# ---------------------------------------------------------------------------
# 1. torch.compile(model, backend="tilefuse") trains as eager does
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("name", list(Z.ZOO))
def test_torch_compile_trains_like_eager(name, caplog):
    """20 AdamW steps of torch.compile(model, backend="tilefuse") against an
    eager twin: the loss at every step, the first step's gradients of every
    parameter, and the parameters at the end."""
    caplog.set_level(logging.WARNING, logger="tilefuse")
    cls = Z.ZOO[name]
    model, eager = twins(cls)
    start = {n: p.detach().clone() for n, p in eager.named_parameters()}
    compiled = torch.compile(model, backend="tilefuse", dynamic=False)
    opt = torch.optim.AdamW(model.parameters(), lr=LR)
    ref_opt = torch.optim.AdamW(eager.parameters(), lr=LR)
    data = batches(cls, 4)
    for step in range(STEPS):
        inputs = data[step % len(data)]
        opt.zero_grad()
        ref_opt.zero_grad()
        try:
            loss = compiled(*inputs)
            loss.backward()
        except Exception as e:
            raise AssertionError(f"{name}: step {step}: torch.compile(backend='tilefuse') "
                                 f"failed: {type(e).__name__}: {e}") from e
        want = eager(*inputs)
        want.backward()
        assert loss.shape == want.shape and loss.dtype == want.dtype, \
            f"{name}: step {step}: loss {loss.dtype}{list(loss.shape)}, eager " \
            f"{want.dtype}{list(want.shape)}"
        check_loss(name, step, loss.item(), want.item())
        if step == 0:
            missing = [n for n, p in model.named_parameters() if p.grad is None]
            assert not missing, f"{name}: step 0: parameters {missing} got no gradient"
            check_tensors(name, step, "gradients",
                          {n: p.grad for n, p in model.named_parameters()},
                          {n: p.grad for n, p in eager.named_parameters()}, GRAD_RTOL)
        opt.step()
        ref_opt.step()
    check_params_after(name, STEPS, dict(model.named_parameters()),
                       dict(eager.named_parameters()), start)
    assert stats.graphs == 1 and stats.recompiles == 0, f"{name}: {stats}"
    # The backend's graphs ran on the process's OpenMP threads (PyTorch's).
    if _core.cpu_openmp and "TILEFUSE_THREAD_POOL" not in os.environ:
        assert _core.cpu_thread_team() == "openmp", name
        assert tilefuse._runtime.cpu_thread_team() == "openmp", name
    if name != "lgamma":
        check_converted(f"{name}: forward and backward compiled whole", compiled=2)
        return
    # (d): lgamma runs in PyTorch, the rest of forward and backward in tilefuse.
    check_converted(f"{name}: forward and backward partitioned around lgamma", compiled=0,
                    partitioned=2,
                    unsupported=["aten.digamma.default", "aten.lgamma.default"])
    warnings = [r for r in caplog.records if r.name == "tilefuse"
                and r.levelno == logging.WARNING and "lgamma" in r.getMessage()]
    assert len(warnings) == 1, (f"{name}: expected one WARNING from the 'tilefuse' logger "
                                f"naming lgamma (logged once per op), got "
                                f"{[r.getMessage() for r in caplog.records]}")


# ---------------------------------------------------------------------------
# 2-3. from_torch on the GPT with decay / no-decay parameter groups
# ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def gpt_groups_run():
    """from_torch(GPT, torch AdamW with decay/no-decay groups) and eager
    PyTorch with the same optimizer, STEPS steps: (losses, eager losses,
    step, eager module, initial parameters)."""
    model, eager = twins(Z.GPT, seed=1)
    start = {n: p.detach().clone() for n, p in eager.named_parameters()}
    opt = torch.optim.AdamW(decay_groups(model), lr=LR)
    ref_opt = torch.optim.AdamW(decay_groups(eager), lr=LR)
    data = batches(Z.GPT, 4, base=200)
    step = tilefuse.from_torch(model, data[0], opt, device="cpu")
    losses, ref_losses = [], []
    for i in range(STEPS):
        inputs = data[i % len(data)]
        losses.append(step(*inputs))
        ref_opt.zero_grad()
        want = eager(*inputs)
        want.backward()
        ref_opt.step()
        ref_losses.append(want.item())
    return dict(losses=losses, ref_losses=ref_losses, step=step, eager=eager, start=start,
                data=data)


def test_from_torch_gpt_param_groups(gpt_groups_run):
    run = gpt_groups_run
    step, eager = run["step"], run["eager"]
    for i, (got, want) in enumerate(zip(run["losses"], run["ref_losses"])):
        assert isinstance(got, float), f"gpt from_torch: step {i}: loss is {type(got)}"
        check_loss("gpt from_torch (torch AdamW groups)", i, got, want)
    assert run["losses"][-1] < run["losses"][0], f"gpt: loss did not fall: {run['losses']}"
    check_params_after("gpt from_torch (torch AdamW groups)", STEPS, step.parameters(),
                       dict(eager.named_parameters()), run["start"])

    # param_groups mirror the torch optimizer's, by name.
    names = dict(eager.named_parameters())
    want_groups = [({n for n, p in names.items() if p.dim() >= 2}, 0.1),
                   ({n for n, p in names.items() if p.dim() < 2}, 0.0)]
    assert len(step.param_groups) == 2, f"gpt: param_groups {step.param_groups}"
    for gi, (g, (members, wd)) in enumerate(zip(step.param_groups, want_groups)):
        assert set(g["params"]) == members, (
            f"gpt: param_groups[{gi}]: parameters {sorted(set(g['params']) ^ members)} "
            "differ from the torch optimizer's group")
        assert g["weight_decay"] == wd and g["lr"] == LR, f"gpt: param_groups[{gi}]: {g}"
    assert step.lr == LR

    # state_dict: every key of the module, the tied weight under both names.
    sd = step.state_dict()
    fresh = Z.GPT()
    assert set(sd) == set(fresh.state_dict()), \
        f"gpt: state_dict keys differ: {sorted(set(sd) ^ set(fresh.state_dict()))}"
    assert torch.equal(sd["lm_head.weight"], sd["transformer.wte.weight"]), \
        "gpt: state_dict: tied lm_head.weight != transformer.wte.weight"
    for k in ("transformer.h.0.attn.bias", "transformer.h.1.attn.bias"):
        assert torch.equal(sd[k], eager.state_dict()[k]), f"gpt: state_dict: buffer {k}"
    fresh.load_state_dict(sd, strict=True)
    assert fresh.lm_head.weight is fresh.transformer.wte.weight
    assert torch.equal(fresh.lm_head.weight, fresh.transformer.wte.weight), \
        "gpt: tied weights differ after load_state_dict"
    for k, v in fresh.state_dict().items():
        assert torch.equal(v, sd[k]), f"gpt: load_state_dict: {k} not what was loaded"

    # copy_to: writes the current parameters in place; the module then
    # computes the loss the step computes next (before its update).
    other = Z.GPT()
    assert step.copy_to(other) is other
    for k, v in other.state_dict().items():
        assert torch.equal(v, sd[k]), f"gpt: copy_to: {k} differs from state_dict()"
    assert other.lm_head.weight is other.transformer.wte.weight
    inputs = run["data"][0]
    with torch.no_grad():
        want = other(*inputs).item()
    sd_before = {k: v.clone() for k, v in step.state_dict().items()}
    got = step(*inputs)
    check_loss("gpt from_torch after copy_to", STEPS, got, want)
    assert not torch.equal(step.state_dict()["lm_head.weight"], sd_before["lm_head.weight"])


def test_from_torch_tilefuse_optim_groups(gpt_groups_run):
    """tilefuse.optim.AdamW with predicate groups = the torch optimizer's
    groups; a group's lr is an operand (0 freezes exactly that group)."""
    model, _ = twins(Z.GPT, seed=1)
    opt = optim.AdamW(lr=LR, param_groups=[
        {"params": lambda n, a: a.ndim >= 2, "weight_decay": 0.1},
        {"params": lambda n, a: a.ndim < 2, "weight_decay": 0.0}])
    data = gpt_groups_run["data"]
    step = tilefuse.from_torch(model, data[0], opt, device="cpu")
    for i, want in enumerate(gpt_groups_run["losses"]):
        got = step(*data[i % len(data)])
        check_loss("gpt from_torch (tilefuse.optim groups vs torch AdamW groups)", i, got,
                   want, tol=SAME_RTOL)

    frozen = {n for n, p in model.named_parameters() if p.dim() < 2}
    assert set(step.param_groups[1]["params"]) == frozen, step.param_groups[1]["params"]
    before = step.parameters()
    step.param_groups[1]["lr"] = 0
    step(*data[0])
    after = step.parameters()
    assert set(before) == {n for n, _ in model.named_parameters()}
    for n in before:
        if n in frozen:
            assert np.array_equal(before[n], after[n]), \
                f"gpt: step {STEPS + 1}: parameter {n} (group 1, lr=0) changed by " \
                f"{np.abs(after[n] - before[n]).max():.3g}"
        else:
            assert not np.array_equal(before[n], after[n]), \
                f"gpt: step {STEPS + 1}: parameter {n} (group 0, lr={LR}) did not change"


# ---------------------------------------------------------------------------
# 4. Gradient accumulation
# ---------------------------------------------------------------------------

def test_from_torch_accumulate():
    """accumulate=3 with [3, b, ...] inputs = PyTorch's 3 backward passes of
    loss / 3 and one optimizer step; the step returns the mean micro loss."""
    k = 3
    model, eager = twins(Z.GPT, seed=2)
    start = {n: p.detach().clone() for n, p in eager.named_parameters()}
    opt = torch.optim.AdamW(model.parameters(), lr=LR)
    ref_opt = torch.optim.AdamW(eager.parameters(), lr=LR)
    micro = Z.GPT.make_inputs(300)
    step = tilefuse.from_torch(model, micro, opt, device="cpu", accumulate=k)
    for i in range(5):
        micros = [Z.GPT.make_inputs(400 + 10 * i + j) for j in range(k)]
        stacked = [torch.stack([m[leaf] for m in micros]) for leaf in range(len(micro))]
        got = step(*stacked)
        ref_opt.zero_grad()
        total = 0.0
        for m in micros:
            loss = eager(*m)
            (loss / k).backward()
            total += loss.item()
        ref_opt.step()
        check_loss("gpt from_torch accumulate=3", i, got, total / k)
    check_params_after("gpt from_torch accumulate=3", 5, step.parameters(),
                       dict(eager.named_parameters()), start)
    # One micro-batch where k stacked ones are expected.
    with pytest.raises(tilefuse.CompileError,
                       match=r"batch/0 has shape \(3, 16\); the step was compiled for "
                             r"\(3, 3, 16\) \(with accumulate=k"):
        step(*micro)


def test_compile_train_step_accumulate_needs_k_leading():
    def loss(p, b):
        return (p["w"] * b["x"]).sum()
    params = {"w": np.ones(4, np.float32)}
    with pytest.raises(tilefuse.CompileError,
                       match=r"accumulate=3: every batch leaf must stack the 3 micro-batches"
                             r".*\(2, 4\)"):
        tilefuse.compile_train_step(loss, params, {"x": np.ones((2, 4), np.float32)},
                                    optim.SGD(lr=0.1), accumulate=3, device="cpu")
    with pytest.raises(tilefuse.CompileError, match=r"accumulate=3.*got shape \(\)"):
        tilefuse.compile_train_step(lambda p, b: (p["w"] * b["s"]).sum(), params,
                                    {"s": np.float32(1.0)}, optim.SGD(lr=0.1), accumulate=3,
                                    device="cpu")
    with pytest.raises(tilefuse.CompileError, match=r"accumulate must be a whole number"):
        tilefuse.compile_train_step(loss, params, {"x": np.ones((2, 4), np.float32)},
                                    optim.SGD(lr=0.1), accumulate=0, device="cpu")


# ---------------------------------------------------------------------------
# 5. Bad input
# ---------------------------------------------------------------------------

def test_from_torch_bad_input():
    model = Z.MLPClassifier()
    x, y = Z.MLPClassifier.make_inputs(0)
    adamw = torch.optim.AdamW(model.parameters(), lr=LR)
    # A module returning logits, no loss_fn.
    with pytest.raises(tilefuse.CompileError,
                       match=r"must return the scalar loss .*Tensor\[8, 10\].*loss_fn"):
        tilefuse.from_torch(model, (x,), adamw, device="cpu")
    # ... which loss_fn fixes.
    step = tilefuse.from_torch(
        model, (x, y), adamw, device="cpu",
        loss_fn=lambda m, x, y: torch.nn.functional.nll_loss(m(x), y))
    with torch.no_grad():
        check_loss("mlp from_torch loss_fn", 0, step(x, y), model(x, y).item())
    # Options tilefuse's optimizers do not have.
    with pytest.raises(tilefuse.CompileError, match=r"param_groups\[0\] has amsgrad=True"):
        tilefuse.from_torch(model, (x, y), torch.optim.Adam(model.parameters(), amsgrad=True),
                            device="cpu")
    with pytest.raises(tilefuse.CompileError, match=r"not Adagrad"):
        tilefuse.from_torch(model, (x, y), torch.optim.Adagrad(model.parameters()),
                            device="cpu")
    # A parameter in no group.
    names = [n for n, _ in model.named_parameters()]
    with pytest.raises(tilefuse.CompileError,
                       match=r"parameters \['net.3.bias'\] are in no parameter group"):
        tilefuse.from_torch(model, (x, y), optim.AdamW(
            lr=LR, param_groups=[{"params": [n for n in names if n != "net.3.bias"]}]),
            device="cpu")
    # A parameter in two groups; a name that is not a parameter.
    with pytest.raises(tilefuse.CompileError, match=r"'net.1.weight' is in param_groups\[0\] "
                                                    r"and \[1\]"):
        tilefuse.from_torch(model, (x, y), optim.AdamW(
            lr=LR, param_groups=[{"params": names}, {"params": ["net.1.weight"]}]),
            device="cpu")
    with pytest.raises(tilefuse.CompileError, match=r"\['net.9.weight'\], which are not "
                                                    r"parameters"):
        tilefuse.from_torch(model, (x, y), optim.AdamW(
            lr=LR, param_groups=[{"params": names + ["net.9.weight"]}]), device="cpu")
    # Not a module.
    with pytest.raises(tilefuse.CompileError, match=r"needs a torch.nn.Module, got function"):
        tilefuse.from_torch(lambda x, y: x.sum(), (x, y), optim.AdamW(lr=LR), device="cpu")
    # Tensors without values (the meta device): named, with what to do.
    with pytest.raises(tilefuse.CompileError,
                       match=r"net.1.weight is a tensor on the meta device.*module.to\('cpu'\)"):
        tilefuse.from_torch(Z.MLPClassifier().to("meta"), (x, y), optim.AdamW(lr=LR),
                            device="cpu")
    with pytest.raises(tilefuse.CompileError, match=r"example input 0 is a tensor on the meta"):
        tilefuse.from_torch(model, (x.to("meta"), y), optim.AdamW(lr=LR), device="cpu")
    masked = Z.MLPClassifier()  # a buffer outside the state_dict (persistent=False)
    masked.register_buffer("mask", torch.empty(10, device="meta"), persistent=False)
    with pytest.raises(tilefuse.CompileError, match=r"mask is a tensor on the meta device"):
        tilefuse.from_torch(masked, (x, y), optim.AdamW(lr=LR), device="cpu")


# ---------------------------------------------------------------------------
# 6. explain()
# ---------------------------------------------------------------------------

@pytest.mark.skipif(_core.cuda_devices()[0] > 0, reason="a GPU is here: device='cuda' compiles")
def test_backend_for_a_device_not_here_leaves_graphs_to_pytorch(caplog):
    """The backend asked for a device this machine lacks logs why and lets
    PyTorch run the graphs, with eager's results."""
    import functools
    model, eager = twins(Z.MLPClassifier)
    x, y = Z.MLPClassifier.make_inputs(0)
    backend = functools.partial(tilefuse.torch_integration.tilefuse_backend, device="cuda")
    with caplog.at_level(logging.WARNING, logger="tilefuse"):
        loss = torch.compile(model, backend=backend)(x, y)
    check_loss("mlp, device='cuda' without a GPU", 0, loss.item(), eager(x, y).item())
    check_converted("mlp, device='cuda' without a GPU", compiled=0, eager=1)
    assert any("could not compile a graph, it runs in PyTorch" in r.getMessage()
               for r in caplog.records), [r.getMessage() for r in caplog.records]


def test_backend_leaves_graphs_off_the_cpu_to_pytorch(caplog):
    """The backend reads and returns tensors through host memory: a graph of
    tensors on another device (here meta, as CUDA on a GPU machine) runs in
    PyTorch, its results on that device, said once in the log and counted;
    explain() names the reason."""
    model = torch.nn.Linear(4, 3).to("meta")
    x = torch.empty(2, 4, device="meta")
    with caplog.at_level(logging.WARNING, logger="tilefuse"):
        compiled = torch.compile(model, backend="tilefuse")
        for _ in range(2):
            y = compiled(x)
            y.sum().backward()
    assert y.device.type == "meta" and tuple(y.shape) == (2, 3)
    assert model.weight.grad.device.type == "meta"
    assert stats.off_cpu == {"meta": 2}, stats
    check_converted("linear on meta tensors", compiled=0, eager=2)
    if "TILEFUSE_THREAD_POOL" not in os.environ:  # no CPU graph: the threads stay as they were
        assert _core.cpu_thread_team() == "own"
    said = [r.getMessage() for r in caplog.records if "meta tensors" in r.getMessage()]
    assert said == ["tilefuse: a graph of meta tensors runs in PyTorch: the torch.compile "
                    "backend compiles graphs of CPU tensors only"], said
    explanation = tilefuse.explain(model, x)
    assert not explanation.ok
    assert any("tensors on meta" in op for op in explanation.unsupported_ops), explanation


def test_explain():
    model = Z.LgammaModel()
    e = tilefuse.explain(model, *Z.LgammaModel.make_inputs(0))
    where = source_line(Z.LgammaModel.forward, "torch.lgamma")
    assert not e.ok
    assert [g["kind"] for g in e.graphs] == ["forward", "backward"], e.graphs
    # The forward's lgamma, the backward's digamma (lgamma's derivative):
    # both from the same line of the model.
    for g, op_name in zip(e.graphs, ("aten.lgamma", "aten.digamma")):
        ops = {op: lines for op, lines in g["unsupported"].items() if op.startswith(op_name)}
        assert ops, f"lgamma: explain: {g['kind']} graph does not list {op_name}: {g}"
        lines = [line for ls in ops.values() for line in ls]
        assert lines and all(where in line for line in lines), \
            f"lgamma: explain: {g['kind']} graph: source lines {lines}, want {where}"
    assert set(e.unsupported_ops) == {"aten.lgamma.default", "aten.digamma.default"}, \
        e.unsupported_ops
    text = str(e)
    assert "aten.lgamma.default" in text and "aten.digamma.default" in text and where in text and "(forward)" in text \
        and "(backward)" in text, text

    gpt = Z.GPT()
    e = tilefuse.explain(gpt, *Z.GPT.make_inputs(0))
    assert e.ok, f"gpt: explain found unsupported ops: {e}"
    assert [g["kind"] for g in e.graphs] == ["forward", "backward"], e.graphs
    assert "every op converts" in str(e)
    # explain converts nothing: the backend's stats are untouched.
    assert stats.graphs == 0 and stats.compiled == 0, stats


def test_explain_agrees_with_backend_on_bool_max():
    """What explain() says converts, the backend compiles. max(dim) of a bool
    tensor is in PyTorch's cumprod backward decomposition."""
    def f(x):
        values, index = (x > 0).max(dim=1, keepdim=True)
        return values.float() * x + index
    x = torch.randn(4, 6, generator=torch.Generator().manual_seed(0))
    e = tilefuse.explain(f, x)
    got = torch.compile(f, backend="tilefuse", dynamic=False)(x)
    assert torch.equal(got, f(x)), "bool max: tilefuse result differs from eager"
    assert e.ok, f"bool max: explain() finds ops that do not convert: {e}"
    check_converted("bool max: explain() says every op converts", compiled=1)


# ---------------------------------------------------------------------------
# 7. Recompilation
# ---------------------------------------------------------------------------

def _one_step_like_eager(what, i, compiled, model, eager, inputs):
    """Forward and backward of `compiled` and of its eager twin on `inputs`:
    the same loss and gradients."""
    model.zero_grad()
    eager.zero_grad()
    got = compiled(*inputs)
    got.backward()
    want = eager(*inputs)
    want.backward()
    check_loss(what, i, got.item(), want.item())
    check_tensors(what, i, "gradients",
                  {n: p.grad for n, p in model.named_parameters()},
                  {n: p.grad for n, p in eager.named_parameters()}, GRAD_RTOL)


def test_recompile_on_new_batch_size():
    model, eager = twins(Z.MLPClassifier)
    compiled = torch.compile(model, backend="tilefuse", dynamic=False)
    expect = []
    for i, batch in enumerate([8, 5, 5, 8]):
        inputs = Z.MLPClassifier.make_inputs(500 + i, batch=batch)
        _one_step_like_eager(f"mlp batch {batch}", i, compiled, model, eager, inputs)
        expect.append((stats.graphs, stats.recompiles, stats.compiled))
    # The new batch size is one new Dynamo graph (the same code: a
    # recompilation) with its forward and backward; sizes seen before reuse.
    assert expect == [(1, 0, 2), (2, 1, 4), (2, 1, 4), (2, 1, 4)], \
        f"mlp: (graphs, recompiles, compiled) after each call: {expect}; {stats}"
    check_converted("mlp, two batch sizes", compiled=4)


@pytest.mark.parametrize("name", ["mlp_classifier", "gpt"])
def test_dynamic_shapes_compile_per_size(name):
    """torch.compile(dynamic=True): Dynamo hands over graphs with symbolic
    sizes (and size inputs); tilefuse compiles each distinct size once
    (its kernels are static) and reuses it, forward and backward, with the
    losses and gradients of eager PyTorch; no graph is left to PyTorch."""
    cls = {"mlp_classifier": Z.MLPClassifier, "gpt": Z.GPT}[name]
    model, eager = twins(cls)
    compiled = torch.compile(model, backend="tilefuse", dynamic=True)
    sizes = [3, 5, 3, 6]
    for i, batch in enumerate(sizes):
        inputs = cls.make_inputs(700 + i, batch=batch)
        _one_step_like_eager(f"{name} batch {batch}", i, compiled, model, eager, inputs)
    # Forward and backward compiled once for each of the 3 distinct sizes,
    # nothing left to PyTorch. The MLP is one Dynamo graph with symbolic
    # sizes: the 2 sizes after the first are recompilations (forward and
    # backward). (Dynamo guards the GPT's first size and makes a second
    # graph for the others.)
    check_converted(f"{name}, dynamic shapes, sizes {sizes}", compiled=2 * len(set(sizes)))
    if name == "mlp_classifier":
        assert stats.graphs == 1 and stats.recompiles == 2 * (len(set(sizes)) - 1), stats


def test_dynamic_shapes_stop_compiling_after_eight_sizes(caplog):
    """A graph with symbolic sizes is compiled for at most 8 sets of sizes
    (MAX_SPECIALIZATIONS); later ones run in PyTorch, with one warning, and
    still give eager's results."""
    caplog.set_level(logging.WARNING, logger="tilefuse")
    model, eager = twins(Z.MLPClassifier)
    compiled = torch.compile(model, backend="tilefuse", dynamic=True)
    sizes = list(range(2, 13))
    for i, batch in enumerate(sizes):
        inputs = Z.MLPClassifier.make_inputs(900 + i, batch=batch)
        with torch.no_grad():
            check_loss(f"mlp batch {batch}", i, compiled(*inputs).item(), eager(*inputs).item())
    check_converted(f"mlp, dynamic shapes, sizes {sizes}", compiled=8, eager=1)
    warnings = [r for r in caplog.records if "sets of sizes" in r.getMessage()]
    assert len(warnings) == 1, [r.getMessage() for r in caplog.records]


# ---------------------------------------------------------------------------
# 8. The backend is found by name
# ---------------------------------------------------------------------------

def test_backend_entry_point_without_import():
    build = os.environ.get("TILEFUSE_BUILD_DIR") or os.path.join(_REPO, "build")
    code = textwrap.dedent("""
        import sys, torch
        import torch._dynamo
        assert "tilefuse" in torch._dynamo.list_backends(), torch._dynamo.list_backends()
        torch.manual_seed(0)
        m = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
        x = torch.randn(5, 4)
        assert "tilefuse" not in sys.modules, "tilefuse was imported before torch.compile"
        y = torch.compile(m, backend="tilefuse")(x)
        want = m(x)
        err = (y - want).abs().max().item()
        assert err <= 1e-6, f"compiled {y} vs eager {want}"
        from tilefuse.torch_integration import stats
        assert (stats.compiled, stats.partitioned, stats.eager, stats.unsupported) == (
            1, 0, 0, {}), stats
        print("OK", stats)
    """)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.join(os.path.abspath(build), "python")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       timeout=300, cwd="/")
    assert r.returncode == 0 and "OK" in r.stdout, \
        f"subprocess torch.compile(backend='tilefuse') failed (rc {r.returncode}):\n" \
        f"{r.stdout}\n{r.stderr[-4000:]}"


def test_from_torch_step_exports_and_the_artifact_continues_it(tmp_path):
    """export() writes the whole step; the loaded artifact, given the step's
    kept state, computes the same next loss and parameters."""
    import numpy as np
    torch.manual_seed(0)
    model = Z.GPT()
    idx, targets = Z.GPT.make_inputs(1)
    step = tilefuse.from_torch(model, (idx, targets),
                               torch.optim.AdamW(model.parameters(), lr=1e-3), device="cpu")
    step(idx, targets)
    path = tmp_path / "gpt_step.tfa"
    step.export(path)
    loaded = tilefuse.load(path)
    loaded.load_state_dict(step.train_step.kept_state())
    got = float(loaded((idx.numpy(), targets.numpy()), np.int64(2), np.float64(1e-3)))
    want = step(idx, targets)
    assert got == want, f"gpt exported step 2: loss {got}, the step's {want}"
    names = [n for n, _, _ in loaded.arguments if n.startswith("params/")]
    after = dict(zip(names, loaded.state()[:len(names)]))
    for name, value in step.parameters().items():
        np.testing.assert_array_equal(after[f"params/{name}"], value,
                                      err_msg=f"gpt exported step 2: parameter {name}")


# ---------------------------------------------------------------------------
# Semantics the importer must keep (each once converted wrongly)
# ---------------------------------------------------------------------------

def test_from_torch_leaves_frozen_parameters_alone():
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 1))
    m[0].weight.requires_grad_(False)
    x = torch.randn(5, 4)
    frozen = m[0].weight.detach().clone()
    step = tilefuse.from_torch(m, (x,), torch.optim.SGD(m.parameters(), lr=0.1),
                               loss_fn=lambda mod, x: mod(x).square().mean(), device="cpu")
    step(x)
    state = step.state_dict()
    assert torch.equal(state["0.weight"], frozen), "a frozen parameter was updated"
    assert not torch.equal(state["0.bias"], m[0].bias.detach()), "the trained bias did not move"
    assert "0.weight" not in step.parameters()


def test_in_place_updates_through_views_are_kept():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.ones(2, 3))

        def forward(self, x):
            h = x + self.w
            h.view(-1).mul_(2)
            h[:, :1].mul_(3)
            return h.sum()
    m = M()
    x = torch.ones(2, 3)
    step = tilefuse.from_torch(m, (x,), torch.optim.SGD(m.parameters(), lr=0.0), device="cpu")
    assert step(x) == pytest.approx(float(m(x).detach()), rel=1e-6)


def _compiled_matches(fn, *args, rtol=0, atol=0, unsupported=()):
    """fn under torch.compile(backend="tilefuse") gives eager's result (same
    dtype, within rtol/atol), with its one ATen graph compiled whole by
    tilefuse, or, with `unsupported` (the ops expected not to convert),
    left to PyTorch."""
    torch._dynamo.reset()
    stats.reset()
    got = torch.compile(fn, backend="tilefuse", dynamic=False)(*args)
    want = fn(*args)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    torch.testing.assert_close(got, want, rtol=rtol, atol=atol)
    what = inspect.getsource(fn).strip()
    if unsupported:
        check_converted(what, compiled=0, eager=1, unsupported=unsupported)
    else:
        check_converted(what, compiled=1)


def test_integer_and_rounding_arithmetic_is_exact():
    a = torch.tensor([2 ** 25 + 1, -7, 7, 1000], dtype=torch.int64)
    _compiled_matches(lambda a: torch.div(a, 2, rounding_mode="floor") +
                      torch.div(a, 3, rounding_mode="trunc"), a)
    _compiled_matches(lambda a: a ** 3, a)
    _compiled_matches(lambda a: a + torch.full((4,), 2 ** 30 + 1), a)
    _compiled_matches(lambda a: torch.bitwise_not(a), a,  # integers: runs in PyTorch
                      unsupported=["aten.bitwise_not"])
    f = torch.tensor([1.0, -1.0, 7.5], dtype=torch.float32)
    _compiled_matches(lambda f: torch.div(f, 0.1, rounding_mode="floor"), f)


def test_addmm_ignores_the_bias_when_beta_is_zero_and_dropout_of_one_drops_all():
    bias = torch.full((3,), float("nan"))
    a, b = torch.randn(2, 4), torch.randn(4, 3)
    _compiled_matches(lambda bias, a, b: torch.addmm(bias, a, b, beta=0), bias, a, b,
                      rtol=1e-6, atol=1e-6)
    _compiled_matches(lambda x: torch.nn.functional.dropout(x, 1.0, True), torch.randn(8))


def test_a_trailing_empty_parameter_group_is_a_group():
    torch.manual_seed(0)
    m = torch.nn.Linear(3, 1)
    x = torch.randn(4, 3)
    step = tilefuse.from_torch(
        m, (x,), optim.SGD(lr=0.1, param_groups=[{"params": ["weight", "bias"]},
                                                 {"params": []}]),
        loss_fn=lambda mod, x: mod(x).sum(), device="cpu")
    assert len(step.param_groups) == 2
    step(x)  # one lr operand per group, the empty one included


@pytest.mark.parametrize("loss", ["bce", "bce_logits", "bce_logits_pos_weight_sum", "mse_none"])
def test_from_torch_converts_the_pair_losses_whole(loss):
    """from_torch captures without PyTorch's decompositions: the pair losses
    arrive as their own ATen ops (and fill from functionalization)."""
    fns = {
        "bce": lambda x, t: torch.nn.functional.binary_cross_entropy(torch.sigmoid(x), t),
        "bce_logits": lambda x, t: torch.nn.functional.binary_cross_entropy_with_logits(x, t),
        "bce_logits_pos_weight_sum": lambda x, t: torch.nn.functional.binary_cross_entropy_with_logits(
            x, t, pos_weight=torch.tensor([2.0, 0.5, 1.0]), reduction="sum"),
        "mse_none": lambda x, t: torch.nn.functional.mse_loss(x, t, reduction="none").sum(),
    }
    fn = fns[loss]
    torch.manual_seed(0)
    m = torch.nn.Linear(3, 3)
    ref = torch.nn.Linear(3, 3)
    ref.load_state_dict(m.state_dict())
    x, t = torch.randn(4, 3), torch.rand(4, 3)
    step = tilefuse.from_torch(m, (x, t), torch.optim.SGD(m.parameters(), lr=0.1),
                               loss_fn=lambda mod, x, t: fn(mod(x), t), device="cpu")
    opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for i in range(3):
        got = step(x, t)
        opt.zero_grad()
        want = fn(ref(x), t)
        want.backward()
        opt.step()
        assert got == pytest.approx(want.item(), rel=1e-5), f"{loss} step {i}: {got} vs {want.item()}"
