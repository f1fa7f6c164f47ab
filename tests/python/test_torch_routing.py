"""Mixture-of-experts routing ops through the torch.compile backend and
from_torch: topk, kthvalue, median and nanmedian along a dim, sort with
equal keys, histc and the grouped
GEMMs (aten._grouped_mm in its three forms, transformers' grouped_mm
custom op and its backward), converted whole, against eager PyTorch.

Selections (topk, kthvalue, sort) and counts (histc) are exact; products
within 1e-5 of the largest element (float32 sums in another order)."""
import numpy as np
import pytest
import torch

import tilefuse
from tilefuse.torch_integration import stats

RTOL = 1e-5

pytestmark = pytest.mark.usefixtures("fresh_torch_backend")


def _compiled(f):
    torch._dynamo.reset()
    stats.reset()
    return torch.compile(f, backend="tilefuse", dynamic=False)


def _converted_whole(graphs=1):
    assert (stats.compiled, stats.partitioned, stats.eager) == (graphs, 0, 0), stats


def _close(got, want, what):
    scale = max(1.0, want.abs().max().item())
    err = (got - want).abs().max().item()
    assert err <= RTOL * scale, f"{what}: max error {err:.3g} > {RTOL:g} * {scale:.3g}"


@pytest.mark.parametrize("dim,largest", [(-1, True), (1, False), (0, True)])
def test_topk_values_indices_and_gradient_match_eager(dim, largest):
    g = torch.Generator().manual_seed(3 + dim)
    x = torch.randn(5, 10, 6, generator=g)
    x[1, 2, 3] = float("nan")
    w = torch.randn(x.topk(3, dim=dim, largest=largest).values.shape, generator=g)

    def f(x):
        v, i = torch.topk(x, 3, dim=dim, largest=largest)
        return v, i

    xs = [x.clone().requires_grad_(), x.clone().requires_grad_()]
    want = f(xs[0])
    got = _compiled(f)(xs[1])
    torch.testing.assert_close(got[0], want[0], rtol=0, atol=0, equal_nan=True)
    assert torch.equal(got[1], want[1])
    (torch.nan_to_num(want[0]) * w).sum().backward()
    (torch.nan_to_num(got[0]) * w).sum().backward()
    assert torch.equal(xs[1].grad, xs[0].grad)
    _converted_whole(2)


def test_topk_picks_the_earlier_of_equal_elements():
    x = torch.tensor([[1.0, 3.0, 3.0, 2.0, 3.0, 0.0], [5.0, 5.0, 5.0, 5.0, 5.0, 5.0]])
    v, i = _compiled(lambda x: torch.topk(x, 4))(x)
    assert v.tolist() == [[3.0, 3.0, 3.0, 2.0], [5.0] * 4]
    assert i.tolist() == [[1, 2, 4, 3], [0, 1, 2, 3]]
    _converted_whole()


@pytest.mark.parametrize("k,dim,keepdim", [(1, -1, False), (3, 0, True), (5, 1, False)])
def test_kthvalue_matches_eager(k, dim, keepdim):
    g = torch.Generator().manual_seed(k)
    x = torch.randn(5, 6, 7, generator=g)

    def f(x):
        return torch.kthvalue(x, k, dim=dim, keepdim=keepdim)

    want, got = f(x), _compiled(f)(x)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    _converted_whole()


@pytest.mark.parametrize("op", ["median", "nanmedian"])
@pytest.mark.parametrize("dim,keepdim,n", [(-1, False, 7), (1, True, 6), (0, False, 5),
                                           (-1, True, 5000)])
def test_median_along_a_dim_matches_eager_with_nans(op, dim, keepdim, n):
    """median and nanmedian along a dim: the lower median, NaN handling
    (median: the row's first NaN; nanmedian: the median of the rest),
    indices and the gradient (all of it to the picked element) equal
    eager's; rows of 5000 are sorted by the library step. Rows here have
    no equal values (PyTorch's pick among equal ones, an all-NaN row's
    included, is its selection algorithm's)."""
    g = torch.Generator().manual_seed(n + dim)
    x = torch.randn(4, n, 3, generator=g) if n < 1000 else torch.randn(3, n, generator=g)
    x.view(-1)[5] = float("nan")
    x.view(-1)[n + 2] = float("nan")
    x.view(-1)[n + 3] = float("nan")

    def f(x):
        return getattr(torch, op)(x, dim, keepdim)

    xs = [x.clone().requires_grad_(), x.clone().requires_grad_()]
    want = f(xs[0])
    got = _compiled(f)(xs[1])
    torch.testing.assert_close(got[0], want[0], rtol=0, atol=0, equal_nan=True)
    assert torch.equal(got[1], want[1])
    w = torch.randn(want[0].shape, generator=g)
    (torch.nan_to_num(want[0]) * w).sum().backward()
    (torch.nan_to_num(got[0]) * w).sum().backward()
    assert torch.equal(xs[1].grad, xs[0].grad)
    _converted_whole(2)


@pytest.mark.parametrize("op", ["median", "nanmedian"])
def test_median_of_a_0d_tensor_along_dim_0(op):
    """OpInfo's sample: a 0-d tensor, dim 0, keepdim; its backward scatters
    a 0-d gradient into a 0-d tensor (aten.scatter.src, which once took
    only sources of the index's rank and left the backward to PyTorch)."""
    xs = [torch.tensor(1.5, requires_grad=True), torch.tensor(1.5, requires_grad=True)]

    def f(x):
        return getattr(torch, op)(x, 0, True)

    want, got = f(xs[0]), _compiled(f)(xs[1])
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    (want[0] * 3.0).backward()
    (got[0] * 3.0).backward()
    assert torch.equal(xs[1].grad, xs[0].grad)
    _converted_whole(2)


def test_unstable_sort_of_keys_with_many_equal_values_orders_them_stably():
    """stable=False leaves the order of equal keys to the implementation
    (PyTorch's CPU kernel mixes it past 16 elements): tilefuse keeps the
    original order, so the permutation sorts the keys and its equal-key
    runs ascend."""
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 4, (200,), generator=g)

    def f(ids):
        return torch.sort(ids)

    values, perm = _compiled(f)(ids)
    assert torch.equal(values, torch.sort(ids).values)
    assert torch.equal(perm, torch.sort(ids, stable=True).indices)
    _converted_whole()


HISTC_CASES = [(4, 0, 3), (7, -1.5, 2.25), (1, 0, 10), (100, -3, 3)]


@pytest.mark.parametrize("bins,lo,hi", HISTC_CASES)
def test_histc_counts_exactly_as_eager_at_edges_and_outside(bins, lo, hi):
    g = torch.Generator().manual_seed(bins)
    edges = torch.linspace(lo, hi, bins + 1)
    x = torch.cat([torch.empty(300).uniform_(lo - 1, hi + 1, generator=g), edges,
                   torch.nextafter(edges, torch.tensor(-np.inf)),
                   torch.tensor([float("nan"), float("inf"), -float("inf")])])

    def f(x):
        return torch.histc(x, bins=bins, min=lo, max=hi)

    want, got = f(x), _compiled(f)(x)
    assert torch.equal(got, want), (got, want)
    _converted_whole()


def test_histc_with_its_range_taken_from_the_data_runs_in_pytorch():
    x = torch.randn(50)

    def f(x):
        return torch.histc(x * 2, bins=5) + 1

    assert torch.equal(_compiled(f)(x), f(x))
    assert stats.eager + stats.partitioned >= 1, stats
    with pytest.raises(tilefuse.CompileError, match="min == max takes the range from the data"):
        tilefuse.from_torch(_Histogram(), (x,), optimizer=tilefuse.optim.SGD(lr=0.1))


class _Histogram(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(5))

    def forward(self, x):
        return (torch.histc(x, bins=5) * self.w).sum()


def _offsets(counts):
    return torch.tensor(np.cumsum(counts), dtype=torch.int32)


OFFSETS = [[3, 0, 5, 8], [16, 0, 0, 0], [0, 7, 0, 9]]


@pytest.mark.parametrize("counts", OFFSETS, ids=["with-an-empty-group", "one-group",
                                                 "empty-first-and-last"])
def test_aten_grouped_mm_forms_and_gradients_match_eager(counts):
    g = torch.Generator().manual_seed(len(counts) + counts[0])
    offs = _offsets(counts)
    rows = int(offs[-1])
    x = torch.randn(16, 8, generator=g)
    w = torch.randn(4, 8, 12, generator=g)
    cot = torch.randn(16, 12, generator=g)

    def f(x, w):  # rows past the last offset are PyTorch's to leave unset: not read
        return torch._grouped_mm(x, w, offs=offs)[:rows]

    pairs = [(x.clone().requires_grad_(), w.clone().requires_grad_()) for _ in range(2)]
    want = f(*pairs[0])
    got = _compiled(f)(*pairs[1])
    _close(got, want, "grouped product")
    (want * cot[:rows]).sum().backward()
    (got * cot[:rows]).sum().backward()
    _close(pairs[1][0].grad, pairs[0][0].grad, "input gradient")
    _close(pairs[1][1].grad, pairs[0][1].grad, "weights' gradient")
    _converted_whole(2)

    a, b = torch.randn(8, 16, generator=g), torch.randn(16, 12, generator=g)
    per_group = _compiled(lambda a, b: torch._grouped_mm(a, b, offs=offs))(a, b)
    _close(per_group, torch._grouped_mm(a, b, offs=offs), "grouped reduction over rows")
    batched = torch.randn(4, 4, 8, generator=g)
    _close(_compiled(lambda a, w: torch._grouped_mm(a, w))(batched, w),
           torch._grouped_mm(batched, w), "batched product")


def test_transformers_grouped_mm_op_and_its_backward_match_eager():
    moe = pytest.importorskip("transformers.integrations.moe", reason="transformers is "
                              "installed by tools/dev.sh; run the README's test command")
    del moe  # registers torch.ops.transformers.grouped_mm_fallback
    op = torch.ops.transformers.grouped_mm_fallback
    g = torch.Generator().manual_seed(7)
    offs = _offsets([2, 0, 6, 3])
    x, w = torch.randn(13, 5, generator=g), torch.randn(4, 5, 3, generator=g)
    cot = torch.randn(13, 3, generator=g)

    def f(x, w):
        return op(x, w, offs)

    pairs = [(x.clone().requires_grad_(), w.clone().requires_grad_()) for _ in range(2)]
    want, got = f(*pairs[0]), _compiled(f)(*pairs[1])
    _close(got, want, "transformers' grouped product")
    assert torch.equal(got[11:], torch.zeros(2, 3))   # rows in no group
    (want * cot).sum().backward()
    (got * cot).sum().backward()
    _close(pairs[1][0].grad, pairs[0][0].grad, "input gradient")
    _close(pairs[1][1].grad, pairs[0][1].grad, "weights' gradient")
    _converted_whole(2)


def test_long_rows_are_sorted_by_the_library_step():
    """Rows past 4096 elements: graph.sort (a CPU library step), stable,
    NaN above every number, -0.0 equal to 0.0, descending too."""
    g = torch.Generator().manual_seed(11)
    x = torch.randint(0, 50, (3, 9000), generator=g).float()
    x[0, 5], x[1, 7], x[2, 100] = float("nan"), -0.0, float("inf")

    def f(x):
        return torch.sort(x, dim=-1, descending=True), torch.argsort(x, dim=0)

    (values, order), by_column = _compiled(f)(x)
    want = torch.sort(x, dim=-1, descending=True, stable=True)
    assert torch.equal(values.nan_to_num(-7.0), want.values.nan_to_num(-7.0))
    assert torch.equal(order, want.indices)
    assert torch.equal(by_column, torch.sort(x, dim=0, stable=True).indices)
    _converted_whole()


def test_topk_over_a_vocabulary_with_its_gradient():
    g = torch.Generator().manual_seed(12)
    x = torch.randn(4, 50257, generator=g)
    w = torch.randn(4, 5, generator=g)
    xs = [x.clone().requires_grad_(), x.clone().requires_grad_()]
    want = torch.topk(xs[0], 5)
    got = _compiled(lambda x: torch.topk(x, 5))(xs[1])
    assert torch.equal(got.values, want.values) and torch.equal(got.indices, want.indices)
    (want.values * w).sum().backward()
    (got.values * w).sum().backward()
    assert torch.equal(xs[1].grad, xs[0].grad)
    _converted_whole(2)


def test_long_sorts_are_refused_for_cuda_with_the_reason(tmp_path):
    x = np.random.default_rng(0).standard_normal((2, 5000)).astype(np.float32)

    def f(x):
        values, _ = (x._wrap(v) for v in x._tracer.sort(x._id, False))
        return values

    graph = tilefuse.trace(f, x)
    assert np.array_equal(graph.interpret(x), np.sort(x, axis=-1, kind="stable"))
    with pytest.raises(tilefuse.CompileError, match="'graph.sort' op has no kernel on target"):
        graph.export(tmp_path / "sort.tfa", "cuda:sm_90")


def test_many_writes_with_repeated_indices_keep_the_last_one():
    """index_put of more than 2048 updates: each row's last write found by
    sorting the indices (graph.sort) rather than comparing every pair. The
    reference is the writes in order (PyTorch's CPU kernel splits this many
    over threads, and which write wins then varies from call to call)."""
    g = torch.Generator().manual_seed(13)
    rows = torch.randint(0, 700, (5000,), generator=g)
    values = torch.randn(5000, 3, generator=g)
    base = torch.zeros(700, 3)

    def f(base, values):
        out = base.clone()
        out[rows] = values
        return out

    want = base.clone()
    for k in range(rows.shape[0]):
        want[rows[k]] = values[k]
    assert torch.equal(_compiled(f)(base, values), want)
    _converted_whole()
