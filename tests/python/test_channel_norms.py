"""tilefuse.functional.group_norm and batch_norm against PyTorch's, in
float64 (values and gradients of every input), on odd shapes; and the
errors a user can hit."""
import numpy as np
import pytest

import tilefuse
import tilefuse.functional as F

torch = pytest.importorskip("torch")
TF = torch.nn.functional


def _check(fn, torch_fn, args, what):
    """Loss sum(fn(*args) * r) and its gradients against PyTorch's."""
    shape = torch_fn(*[torch.tensor(a) for a in args]).shape
    r = np.random.default_rng(9).standard_normal(tuple(shape))

    def loss(*a):
        return (fn(*a) * r).sum()
    g = tilefuse.trace(loss, *args).value_and_grad(wrt=tuple(range(len(args))))
    got = g.interpret(*args)
    ts = [torch.tensor(a, requires_grad=True) for a in args]
    want = (torch_fn(*ts) * torch.tensor(r)).sum()
    want.backward()
    np.testing.assert_allclose(got[0], want.item(), rtol=1e-10, err_msg=what)
    for i, t in enumerate(ts):
        np.testing.assert_allclose(got[1 + i], t.grad.numpy(), rtol=1e-9, atol=1e-12,
                                   err_msg=f"{what}: gradient of argument {i}")


@pytest.mark.parametrize("shape,groups", [((3, 6, 5, 7), 3), ((2, 4, 9), 4), ((1, 5, 3, 2), 1),
                                          ((2, 6, 1, 1), 6)])
def test_group_norm_matches_pytorch(shape, groups):
    rng = np.random.default_rng(1)
    x = rng.standard_normal(shape) * 3 + 1
    w, b = rng.standard_normal(shape[1]), rng.standard_normal(shape[1])
    _check(lambda x, w, b: F.group_norm(x, groups, w, b, eps=1e-3),
           lambda x, w, b: TF.group_norm(x, groups, w, b, eps=1e-3), (x, w, b),
           f"group_norm {shape} in {groups} groups")


@pytest.mark.parametrize("shape", [(4, 3, 5, 7), (5, 2, 9), (3, 4)])
def test_batch_norm_with_batch_statistics_matches_pytorch(shape):
    rng = np.random.default_rng(2)
    x = rng.standard_normal(shape) * 2 - 1
    w, b = rng.standard_normal(shape[1]), rng.standard_normal(shape[1])
    _check(lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True, eps=1e-4),
           lambda x, w, b: TF.batch_norm(x, None, None, w, b, training=True, eps=1e-4),
           (x, w, b), f"batch_norm training {shape}")


def test_batch_norm_with_running_statistics_matches_pytorch():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((3, 4, 6, 5))
    mean, var = rng.standard_normal(4), rng.random(4) + 0.5
    w, b = rng.standard_normal(4), rng.standard_normal(4)
    # (PyTorch differentiates neither running statistic: constants here.)
    tm, tv = torch.tensor(mean), torch.tensor(var)
    _check(lambda x, w, b: F.batch_norm(x, mean, var, w, b),
           lambda x, w, b: TF.batch_norm(x, tm, tv, w, b), (x, w, b),
           "batch_norm with running statistics")


@pytest.mark.parametrize("call,match", [
    (lambda x: F.group_norm(x, 4), "cannot be split into 4 groups"),
    (lambda x: F.group_norm(x, 3, np.ones(5)), r"has shape \(5,\); the input \(2, 6, 3\) has 6"),
    (lambda x: F.batch_norm(x, np.zeros(6), np.ones(6), training=True), "updates them in place"),
    (lambda x: F.batch_norm(x, None, None), "pass both"),
])
def test_channel_norm_errors_name_the_problem(call, match):
    x = np.zeros((2, 6, 3), np.float32)
    with pytest.raises(tilefuse.CompileError, match=match):
        tilefuse.trace(call, x)


def test_compiled_channel_norms_match_the_interpreter():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((4, 6, 5, 3)).astype(np.float32)
    w, b = rng.standard_normal(6).astype(np.float32), rng.standard_normal(6).astype(np.float32)

    def both(x, w, b):
        return F.group_norm(x, 2, w, b) + F.batch_norm(x, None, None, w, b, training=True)
    want = tilefuse.trace(both, x, w, b).interpret(x, w, b)
    got = tilefuse.compile(both, x, w, b, device="cpu")(x, w, b)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
