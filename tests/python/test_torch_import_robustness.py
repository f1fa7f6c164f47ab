"""The PyTorch paths on what users' models do beyond plain layers: values
computed from constants only (position tables from torch.arange) fold
instead of sending the graph to PyTorch, ops the importer lacks but PyTorch
decomposes (torch.triu/tril) convert in from_torch as in the backend, an
op neither converts is named with its source line, a compiled step's
kernels name the model's lines (not the importer's), a mistaken
accumulate= example gets a hint, and partitioning never copies a graph's
attributes (a model's buffers may be uncopyable).

Tolerance: losses relative 1e-5 (float32)."""
import copy

import pytest
import torch

import tilefuse
from tilefuse import CompileError
from tilefuse.torch_integration import stats

RTOL = 1e-5


pytestmark = pytest.mark.usefixtures("fresh_torch_backend")


class Positions(torch.nn.Module):
    """A cosine position table from arange and linspace (constants of the
    graph, through torch.cos, which tilefuse has no kernel for) and an
    inline upper-triangular mask."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x):
        t = torch.arange(x.shape[1])
        pe = torch.cos(t[:, None] * torch.linspace(0.1, 1.0, 8)[None, :])
        h = self.lin(x + pe)
        h = h.masked_fill(torch.triu(torch.ones(x.shape[1], 8, dtype=torch.bool), 1), 0.0)
        return h.square().mean()


def test_constant_subgraphs_fold_in_the_backend():
    torch.manual_seed(0)
    model, x = Positions(), torch.randn(2, 5, 8)
    want = model(x)
    want.backward()
    want_grad = model.lin.weight.grad.clone()
    model.zero_grad()
    got = torch.compile(model, backend="tilefuse")(x)
    got.backward()
    assert abs(got.item() - want.item()) <= RTOL * abs(want.item())
    assert torch.allclose(model.lin.weight.grad, want_grad, rtol=1e-5, atol=1e-7)
    assert stats.compiled == 2 and stats.partitioned == 0 and stats.eager == 0, stats
    assert tilefuse.explain(model, x).ok


def test_constant_subgraphs_and_triu_convert_in_from_torch():
    torch.manual_seed(1)
    model, x = Positions(), torch.randn(2, 5, 8)
    twin = copy.deepcopy(model)
    opt = torch.optim.SGD(twin.parameters(), lr=0.1)
    step = tilefuse.from_torch(model, (x,), torch.optim.SGD(model.parameters(), lr=0.1))
    for _ in range(3):
        opt.zero_grad()
        want = twin(x)
        want.backward()
        opt.step()
        got = step(x)
        assert abs(got - want.item()) <= RTOL * abs(want.item())


def test_from_torch_kernels_name_the_models_lines():
    """report()'s source column: the lines of Positions.forward that made
    each kernel's ops, never the FX interpreter's or tilefuse's own."""
    model, x = Positions(), torch.randn(2, 5, 8)
    step = tilefuse.from_torch(model, (x,), torch.optim.SGD(model.parameters(), lr=0.1))
    sources = [s for row in step.report() for s in row.get("source") or []]
    assert sources, step.report()
    here = [s for s in sources if s.startswith(__file__ + ":")]
    assert here, sources
    assert not [s for s in sources if "/torch/" in s or "/tilefuse/" in s], sources
    forward = Positions.forward.__code__
    first = forward.co_firstlineno
    assert all(first < int(s.rpartition(":")[2]) <= first + 6 for s in here), here


class Lgamma(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x):
        return torch.lgamma(self.lin(x).exp()).mean()  # the op tilefuse lacks


def test_from_torch_names_what_does_not_convert_with_its_line():
    model = Lgamma()
    with pytest.raises(CompileError) as e:
        tilefuse.from_torch(model, (torch.randn(2, 5, 8),),
                            torch.optim.SGD(model.parameters(), lr=0.1))
    msg = str(e.value)
    assert "aten.lgamma" in msg and "test_torch_import_robustness.py\", line" in msg, msg
    assert 'backend="tilefuse"' in msg


def test_accumulate_with_stacked_examples_gets_a_hint():
    model = Positions()
    x = torch.randn(2, 5, 8)
    with pytest.raises(CompileError, match="accumulate=2 the example inputs are one "
                                           "micro-batch"):
        tilefuse.from_torch(model, (torch.stack([x, x]),),
                            torch.optim.SGD(model.parameters(), lr=0.1), accumulate=2)


class Uncopyable(torch.nn.Module):
    """A model with an op that forces partitioning; the test makes deep
    copies of graph modules fail (as they do for HF models whose buffers
    live on the meta device or in fake modes)."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x):
        h = torch.lgamma(self.lin(x).exp())
        return (h * 2 + 1).relu().mean()


def test_partitioning_does_not_copy_the_graphs_attributes(monkeypatch):
    import torch.fx
    real = torch.fx.GraphModule.__deepcopy__

    def refuse(self, memo):
        raise RuntimeError("a graph module was deep-copied")
    monkeypatch.setattr(torch.fx.GraphModule, "__deepcopy__", refuse)
    torch.manual_seed(2)
    model, x = Uncopyable(), torch.randn(2, 5, 8)
    want = model(x)
    got = torch.compile(model, backend="tilefuse")(x)
    assert abs(got.item() - want.item()) <= RTOL * abs(want.item())
    assert stats.partitioned >= 1, stats
    monkeypatch.setattr(torch.fx.GraphModule, "__deepcopy__", real)


def test_an_op_left_to_pytorch_is_logged_once_with_its_line(caplog):
    model, x = Lgamma(), torch.randn(2, 5, 8)
    with caplog.at_level("WARNING", logger="tilefuse"):
        compiled = torch.compile(model, backend="tilefuse")
        for _ in range(2):
            compiled(x).backward()
    lines = [r.getMessage() for r in caplog.records if "aten.lgamma" in r.getMessage()]
    assert len(lines) == 1, lines
    assert 'test_torch_import_robustness.py", line' in lines[0] and "in forward" in lines[0]


def test_cat_of_empty_parts_keeps_the_result_shape():
    """glu of a [0, 2] tensor: its backward concatenates two [0, 1] halves
    into [0, 2] (the parts are empty in another dim than cat's)."""
    x = torch.randn(0, 2, requires_grad=True)
    y = torch.compile(lambda x: torch.nn.functional.glu(x, 1), backend="tilefuse")(x)
    (y * 1.0).sum().backward()
    assert y.shape == (0, 1) and x.grad.shape == (0, 2)
    assert (stats.compiled, stats.partitioned, stats.eager) == (2, 0, 0), stats


def test_a_backward_of_no_gradients_needs_no_kernel():
    """torch.norm(x, 0) (a count of nonzeros) has no gradient: its backward
    graph returns None and is its own compiled form."""
    x = torch.randn(5, 5, requires_grad=True)
    y = torch.compile(lambda x: torch.norm(x, 0), backend="tilefuse")(x)
    y.backward()
    assert y.item() == 25.0 and (x.grad is None or not x.grad.any())
    assert (stats.compiled, stats.partitioned, stats.eager) == (2, 0, 0), stats


def test_batch_norm_module_trains_whole_with_its_running_statistics():
    """nn.BatchNorm1d in training mode: PyTorch hands over
    _batch_norm_with_update, whose empty uint8 reserve buffer goes from the
    forward graph to the backward graph; both graphs compile whole and the
    running statistics follow eager's."""
    torch.manual_seed(3)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.BatchNorm1d(8),
                                torch.nn.ReLU(), torch.nn.Linear(8, 1))
    twin = copy.deepcopy(model)
    compiled = torch.compile(model, backend="tilefuse", dynamic=False)
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (model, twin)]
    for step in range(3):
        x = torch.randn(16, 6, generator=torch.Generator().manual_seed(step))
        losses = []
        for m, opt in zip((compiled, twin), opts):
            opt.zero_grad()
            loss = m(x).square().mean()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        assert abs(losses[0] - losses[1]) <= RTOL * abs(losses[1]), (step, losses)
    for name in ("running_mean", "running_var"):
        got, want = getattr(model[1], name), getattr(twin[1], name)
        assert (got - want).abs().max().item() <= 1e-6 * max(1.0, want.abs().max().item())
    assert model[1].num_batches_tracked.item() == 3
    assert (stats.compiled, stats.partitioned, stats.eager) == (2, 0, 0), stats


def test_a_tied_head_reads_the_embedding_in_place(monkeypatch):
    """An LM head tied to the embedding (logits = h @ wte.T): the forward
    graph keeps no transposed copy of wte for the backward (the partitioner
    recomputes the view there), so no kernel of either graph is a bare
    transpose; the GEMMs read wte transposed in place."""
    from tilefuse import torch_integration as TI
    compiled = []
    real = TI._compiled_callable

    def record(*args, **kwargs):
        run = real(*args, **kwargs)
        if run is not None and hasattr(run, "tilefuse_compiled"):
            compiled.append(run.tilefuse_compiled)
        return run
    monkeypatch.setattr(TI, "_compiled_callable", record)

    class Tied(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = torch.nn.Embedding(300, 16)

        def forward(self, ids):
            h = torch.tanh(self.wte(ids))
            return torch.nn.functional.cross_entropy(h @ self.wte.weight.T, ids.flatten(0))

    torch.manual_seed(4)
    model, ids = Tied(), torch.randint(0, 300, (12,))
    twin = copy.deepcopy(model)
    got = torch.compile(model, backend="tilefuse", dynamic=False)(ids)
    got.backward()
    want = twin(ids)
    want.backward()
    assert abs(got.item() - want.item()) <= RTOL * abs(want.item())
    grad_err = (model.wte.weight.grad - twin.wte.weight.grad).abs().max().item()
    assert grad_err <= 1e-5 * twin.wte.weight.grad.abs().max().item()
    assert (stats.compiled, stats.partitioned, stats.eager) == (2, 0, 0), stats
    kernels = [row for fn in compiled for row in fn.report()]
    assert not [r for r in kernels if r.get("ops") == ["graph.transpose"]], kernels


def _watch_compiled(monkeypatch):
    """([(arguments, outputs)] of each call, [compiled programs]) of the
    backend's compiled graphs, in the order they are made and called."""
    from tilefuse import torch_integration as TI
    calls, compiled = [], []
    real = TI._compiled_callable

    def watch(*args, **kwargs):
        run = real(*args, **kwargs)
        if run is None or not hasattr(run, "tilefuse_compiled"):
            return run
        compiled.append(run.tilefuse_compiled)

        def call(*xs):
            out = run(*xs)
            calls.append((xs, out if isinstance(out, (list, tuple)) else [out]))
            return out
        return call
    monkeypatch.setattr(TI, "_compiled_callable", watch)
    return calls, compiled


def _square_mean_grads_match_eager(model, x):
    """One backward of mean(model(x)^2) through the backend, compiled whole
    (forward and backward), against an eager twin: loss and gradients."""
    twin = copy.deepcopy(model)
    got = torch.compile(model, backend="tilefuse", dynamic=False)(x).square().mean()
    got.backward()
    want = twin(x).square().mean()
    want.backward()
    assert abs(got.item() - want.item()) <= RTOL * abs(want.item())
    for (name, p), q in zip(model.named_parameters(), twin.parameters()):
        err = (p.grad - q.grad).abs().max().item()
        assert err <= 1e-5 * q.grad.abs().max().item(), name
    assert (stats.compiled, stats.partitioned, stats.eager) == (2, 0, 0), stats


def test_saved_parameters_come_back_as_themselves(monkeypatch):
    """AOTAutograd's forward returns the parameters its backward reads
    (linear weights) among the saved tensors: the compiled forward hands
    back those very tensors, as the graph run in PyTorch would, instead of
    copying them into new ones (GPT-2 small: ~65 ms of copies a step), and
    the gradients stay eager's."""
    calls, compiled = _watch_compiled(monkeypatch)

    torch.manual_seed(5)
    model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))
    x = torch.randn(9, 6)
    _square_mean_grads_match_eager(model, x)
    # The forward (the first call) returns the second layer's weight for
    # the backward as the input tensor itself; no step of it is a copy.
    xs, outs = calls[0]
    assert any(o is x for o in outs for x in xs), calls
    forward_steps = compiled[0].report()
    assert not [r for r in forward_steps if r.get("kind") == "copy"], forward_steps


def test_saved_transposes_cross_as_views(monkeypatch):
    """HF's Conv1D computes x @ W + b, whose weight gradient is x^T @ dY:
    AOTAutograd's forward saves the transposed activations for the
    backward. The compiled forward returns a transposed computed value as a
    transposed view of its buffer and a transposed input as a view of the
    input (no copies), and the backward reads them in memory order, its
    GEMMs taking the operand transposed (no transposed copies there
    either); gradients stay eager's."""
    calls, compiled = _watch_compiled(monkeypatch)

    class Conv1DPair(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w1, self.b1 = (torch.nn.Parameter(torch.randn(*s)) for s in ((24, 40), (40,)))
            self.w2, self.b2 = (torch.nn.Parameter(torch.randn(*s)) for s in ((40, 8), (8,)))

        def forward(self, x):
            h = torch.nn.functional.gelu(torch.addmm(self.b1, x.view(-1, 24), self.w1)).view(4, 9, 40)
            return torch.addmm(self.b2, h.view(-1, 40), self.w2).view(4, 9, 8)

    torch.manual_seed(3)
    model = Conv1DPair()
    x = torch.randn(4, 9, 24)
    _square_mean_grads_match_eager(model, x)
    saved = {tuple(t.shape): t for t in calls[0][1] if isinstance(t, torch.Tensor)}
    # gelu(x W1 + b1)^T, for W2's gradient: the forward's buffer, transposed.
    assert saved[(40, 36)].stride() == (1, 40), saved[(40, 36)].stride()
    # x^T, for W1's gradient: the input itself, transposed.
    assert saved[(24, 36)].data_ptr() == x.data_ptr()
    assert saved[(24, 36)].stride() == (1, 24), saved[(24, 36)].stride()
    forward_steps, backward_steps = (program.report() for program in compiled[:2])
    assert not [r for r in forward_steps if r.get("kind") == "copy"], forward_steps
    for steps in (forward_steps, backward_steps):
        transposes = [r for r in steps if "graph.transpose" in r["ops"]]
        assert not transposes, transposes


def test_saved_transposes_beside_running_statistics():
    """A forward that updates batch norm's running statistics in place
    (outputs written into their inputs) and saves a transposed activation
    for the backward: the transposed output comes back as a view of its
    buffer beside the in-place ones (timm's MobileViT and LeViT; the
    executor was once given an output array of the unpermuted shape, and
    failed). Gradients and running statistics stay eager's."""
    class NormGeluMatmul(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = torch.nn.BatchNorm1d(24)
            self.w = torch.nn.Parameter(torch.randn(24, 8))

        def forward(self, x):
            # W's gradient reads gelu(norm(x))^T
            return torch.nn.functional.gelu(self.norm(x)) @ self.w

    torch.manual_seed(4)
    model = NormGeluMatmul()
    twin = copy.deepcopy(model)
    x = torch.randn(36, 24)
    _square_mean_grads_match_eager(model, x)
    twin(x)
    for name in ("running_mean", "running_var"):
        got, want = getattr(model.norm, name), getattr(twin.norm, name)
        assert torch.allclose(got, want, rtol=1e-5, atol=1e-6), (name, got, want)


def _sgd_like_eager(model, x, steps=3, also=None):
    """`steps` SGD steps of `model` through the backend against an eager
    twin, losses within RTOL; `also(x)`, a from_torch step of a third
    copy, alike."""
    twin = copy.deepcopy(model)
    opt, twin_opt = (torch.optim.SGD(m.parameters(), lr=0.1) for m in (model, twin))
    compiled = torch.compile(model, backend="tilefuse")
    for _ in range(steps):
        twin_opt.zero_grad()
        want = twin(x)
        want.backward()
        twin_opt.step()
        opt.zero_grad()
        got = compiled(x)
        got.backward()
        opt.step()
        assert abs(got.item() - want.item()) <= RTOL * abs(want.item())
        if also is not None:
            assert abs(also(x) - want.item()) <= RTOL * abs(want.item())
    return twin


@pytest.mark.parametrize("dim, start, end, step", [
    (2, 0, None, 2), (2, 1, None, 2), (2, 1, 7, 3), (2, 2, 9, 3), (1, 0, 5, 4), (1, -4, None, 2),
    (0, 1, 2, 5), (2, 0, None, 1)])
def test_strided_slice_scatter_converts_exactly(dim, start, end, step):
    """aten.slice_scatter with a step (the backward of x[..., ::2], which
    GPT-J's and CodeGen's rotary embeddings read): reshapes and
    concatenations, so values and both gradients equal eager's bit for bit,
    in one compiled graph each way."""
    g = torch.Generator().manual_seed(dim * 100 + step)
    x = torch.randn(3, 5, 9, generator=g, requires_grad=True)
    n = x.shape[dim]
    length = len(range(*slice(start, end, step).indices(n)))
    src_shape = list(x.shape)
    src_shape[dim] = length
    src = torch.randn(*src_shape, generator=g, requires_grad=True)
    w = torch.randn(3, 5, 9, generator=g)

    def fn(x, src):
        return torch.slice_scatter(x * 2.0, src * 3.0, dim, start, end, step)
    want = fn(x, src)
    (want * w).sum().backward()
    want_grads = (x.grad.clone(), src.grad.clone())
    x.grad, src.grad = None, None
    got = torch.compile(fn, backend="tilefuse")(x, src)
    (got * w).sum().backward()
    assert torch.equal(got, want)
    assert torch.equal(x.grad, want_grads[0]) and torch.equal(src.grad, want_grads[1])
    assert (stats.compiled, stats.partitioned, stats.eager) == (2, 0, 0), stats


def test_rotate_every_two_trains_whole():
    """GPT-J's rotary embedding writes every second feature (x[..., ::2]):
    its backward's strided slice_scatter converts, so the step is whole in
    both paths and trains like eager."""
    class RotateEveryTwo(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(8, 8)

        def forward(self, x):
            h = self.lin(x)
            rotated = torch.stack((-h[..., 1::2], h[..., ::2]), dim=-1).flatten(-2)
            return (h * 0.5 + rotated).square().mean()

    torch.manual_seed(0)
    model, x = RotateEveryTwo(), torch.randn(4, 6, 8)
    third = copy.deepcopy(model)
    assert tilefuse.explain(model, x).ok
    step = tilefuse.from_torch(third, (x,), torch.optim.SGD(third.parameters(), lr=0.1))
    _sgd_like_eager(model, x, also=step)
    assert stats.partitioned == 0 and stats.eager == 0, stats


@pytest.mark.parametrize("dim", [0, 2])
def test_weight_normalised_convolutions_train_whole(dim):
    """torch.nn.utils.parametrizations.weight_norm (wav2vec2's and HuBERT's
    positional convolution, normalised over the kernel's last dim; the
    default, its first): the forward's aten._weight_norm_interface is
    decomposed, its backward op converted, so both paths compile the step
    whole and train like eager (the backward was left to PyTorch, and
    from_torch refused the model)."""
    class WeightNormConv(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.utils.parametrizations.weight_norm(
                torch.nn.Conv1d(8, 8, 5, padding=2, groups=2), name="weight", dim=dim)

        def forward(self, x):
            return torch.nn.functional.gelu(self.conv(x)).square().mean()

    torch.manual_seed(0)
    model, x = WeightNormConv(), torch.randn(3, 8, 12)
    third = copy.deepcopy(model)
    assert tilefuse.explain(model, x).ok, tilefuse.explain(model, x)
    step = tilefuse.from_torch(third, (x,), torch.optim.SGD(third.parameters(), lr=0.1))
    twin = _sgd_like_eager(model, x, also=step)
    assert stats.partitioned == 0 and stats.eager == 0, stats
    for p, q in zip(model.parameters(), twin.parameters()):
        assert torch.allclose(p, q, rtol=1e-5, atol=1e-6)


class RoundThrough(torch.autograd.Function):
    """Rounding with a straight-through gradient: a backward that is not
    the forward's derivative (that is 0)."""

    @staticmethod
    def forward(x):
        return torch.round(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, grad):
        return grad


class Quantised(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        return RoundThrough.apply(self.lin(x) * 3.0).square().mean()


def test_an_autograd_function_is_refused_by_from_torch_and_kept_by_the_backend():
    """from_torch differentiates the captured forward itself, which would
    give round's zero gradient where the Function says straight-through:
    it refuses, naming the Function and the backend, which compiles the
    Function's own backward and trains like eager."""
    torch.manual_seed(0)
    model, x = Quantised(), torch.randn(8, 4)
    third = copy.deepcopy(model)
    with pytest.raises(CompileError) as e:
        tilefuse.from_torch(third, (x,), torch.optim.SGD(third.parameters(), lr=0.1))
    assert "torch.autograd.Function RoundThrough" in str(e.value), str(e.value)
    assert "backend='tilefuse'" in str(e.value)
    twin = _sgd_like_eager(model, x)
    for p, q in zip(model.parameters(), twin.parameters()):
        assert torch.allclose(p, q, rtol=1e-5, atol=1e-6)


class ChannelsLastPool(torch.nn.Module):
    """ConvNeXt's head: a layer norm over channels through permutes, then
    adaptive average pooling, whose decomposition restrides its fresh
    result in place (aten.as_strided_ to channels-last strides)."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3)
        self.norm = torch.nn.LayerNorm(8)
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x):
        h = self.norm(self.conv(x).permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
        return self.fc(torch.nn.functional.adaptive_avg_pool2d(h, 1).flatten(1)).square().mean()


def test_an_in_place_restride_of_a_fresh_result_converts_in_from_torch():
    torch.manual_seed(0)
    model, x = ChannelsLastPool(), torch.randn(2, 3, 9, 9)
    third = copy.deepcopy(model)
    step = tilefuse.from_torch(third, (x,), torch.optim.SGD(third.parameters(), lr=0.1))
    _sgd_like_eager(model, x, also=step)
