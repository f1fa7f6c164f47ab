"""from_torch keeps what PyTorch's modules and optimizers promise beyond the
plain math: nn.Embedding's padding row is never trained, and the learning
rates of a torch optimizer's groups are followed at every step (so LR
schedulers drive the compiled step), while a change to an option compiled
into the step is refused.

Tolerances (float32): losses relative 1e-5, parameters max|diff| / max|eager|
<= 1e-5 after a few SGD steps; the padding row and the parameters of a
zero learning rate must not move at all (exact).
"""
import numpy as np
import pytest
import torch

import tilefuse
from tilefuse import CompileError

RTOL = 1e-5


class Bag(torch.nn.Module):
    def __init__(self, padding_idx=0):
        super().__init__()
        self.emb = torch.nn.Embedding(10, 4, padding_idx=padding_idx)
        self.lin = torch.nn.Linear(4, 1)

    def forward(self, ids, y):
        return ((self.lin(self.emb(ids)).squeeze(-1) - y) ** 2).mean()


def _twins(cls, *args):
    torch.manual_seed(0)
    a = cls(*args)
    b = cls(*args)
    b.load_state_dict(a.state_dict())
    return a, b


def _max_rel(got, want):
    got, want = torch.as_tensor(got).double(), want.detach().double()
    return ((got - want).abs().max() / want.abs().max().clamp_min(1e-30)).item()


@pytest.mark.parametrize("padding_idx", [0, 7, -1])
def test_the_padding_row_of_an_embedding_is_not_trained(padding_idx):
    model, twin = _twins(Bag, padding_idx)
    row = padding_idx % 10
    ids = torch.tensor([[row, 1, 2], [3, row, row]])
    y = torch.tensor([[1.0, -1.0, 0.5], [2.0, 0.0, 1.0]])
    start = model.emb.weight.detach().clone()
    step = tilefuse.from_torch(model, (ids, y), torch.optim.SGD(model.parameters(), lr=1.0))
    opt = torch.optim.SGD(twin.parameters(), lr=1.0)
    for _ in range(3):
        opt.zero_grad()
        want = twin(ids, y)
        want.backward()
        opt.step()
        got = step(ids, y)
        assert abs(got - want.item()) <= RTOL * abs(want.item())
    table = step.state_dict()["emb.weight"]
    assert torch.equal(table[row], start[row]), f"padding row {row} moved"
    assert _max_rel(table, twin.emb.weight) <= RTOL


class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(3, 3)
        self.b = torch.nn.Linear(3, 1)

    def forward(self, x):
        return self.b(torch.tanh(self.a(x))).square().mean()


@pytest.mark.parametrize("kind", ["sgd", "adamw"])
def test_lr_schedulers_drive_the_step(kind):
    """A StepLR and a LambdaLR change the torch optimizer's lr between steps;
    the compiled step follows them as eager does, down to lr 0 (no move)."""
    model, twin = _twins(Tiny)
    x = torch.randn(8, 3)

    def make(m):
        if kind == "sgd":
            return torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
        return torch.optim.AdamW(m.parameters(), lr=0.05)
    opt, twin_opt = make(model), make(twin)
    step = tilefuse.from_torch(model, (x,), opt)
    gammas = [1.0, 0.5, 0.25, 0.0, 0.0]
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda t: gammas[min(t, 4)])
    twin_sched = torch.optim.lr_scheduler.LambdaLR(twin_opt, lambda t: gammas[min(t, 4)])
    for t in range(5):
        twin_opt.zero_grad()
        want = twin(x)
        want.backward()
        twin_opt.step()
        twin_sched.step()
        before = step.state_dict()
        got = step(x)
        sched.step()
        assert abs(got - want.item()) <= RTOL * abs(want.item()), (t, got, want.item())
        after = step.state_dict()
        if gammas[t] == 0.0 and kind == "adamw":
            for n in after:  # lr 0: AdamW moves nothing (its decay is lr * wd too)
                assert torch.equal(after[n], before[n]), (t, n)
        for n, p in twin.state_dict().items():
            assert _max_rel(after[n], p) <= 1e-4, (t, n, _max_rel(after[n], p))


def test_step_lr_to_zero_stops_training():
    """The review's case: StepLR(step_size=1, gamma=0) then sched.step():
    PyTorch's lr is 0, and the parameters no longer move."""
    model = Tiny()
    x = torch.randn(4, 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    step = tilefuse.from_torch(model, (x,), opt)
    step(x)
    torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.0).step()
    assert opt.param_groups[0]["lr"] == 0.0
    before = step.state_dict()
    step(x)
    for n, p in step.state_dict().items():
        assert torch.equal(p, before[n]), n


def test_a_changed_compiled_option_is_refused():
    model = Tiny()
    x = torch.randn(4, 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    step = tilefuse.from_torch(model, (x,), opt)
    step(x)
    opt.param_groups[0]["momentum"] = 0.5
    with pytest.raises(CompileError, match="momentum changed.*only each group's lr"):
        step(x)


@pytest.mark.parametrize("options", [{}, {"momentum": 0.9, "centered": True,
                                          "weight_decay": 0.01}])
def test_torch_rmsprop_converts(options):
    model, twin = _twins(Tiny)
    x = torch.randn(8, 3)
    step = tilefuse.from_torch(model, (x,), torch.optim.RMSprop(model.parameters(), lr=0.01,
                                                                **options))
    opt = torch.optim.RMSprop(twin.parameters(), lr=0.01, **options)
    for t in range(4):
        opt.zero_grad()
        want = twin(x)
        want.backward()
        opt.step()
        got = step(x)
        assert abs(got - want.item()) <= RTOL * abs(want.item()), (t, got, want.item())
    for n, p in twin.state_dict().items():
        assert _max_rel(step.state_dict()[n], p) <= 1e-4, n
