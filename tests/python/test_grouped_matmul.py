"""graph.grouped_matmul (mixture-of-experts layers: rows sorted by group,
each multiplied by its group's matrix) and its weights' gradient: the
interpreter against numpy on every kind of offsets, the gradients against
float64 finite differences, the CPU's grouped GEMM steps against the
interpreter (f32 within 1e-5 of the largest element), an artifact round
trip, and the CUDA target's dense form under the CUDA emulation.

Groups (runtime/GroupedGemm.h): row r belongs to group #{offsets <= r} when
that is below G, else to none (its result row is 0)."""
import os
import sys

import numpy as np
import pytest

import tilefuse

sys.path.insert(0, os.path.dirname(__file__))
from cuda_emulation import check_emulated, unavailable_reason  # noqa: E402
from test_autodiff import check_gradients  # noqa: E402

F32_RTOL = 1e-5

OFFSETS = {
    "sorted": [3, 3, 9, 12],           # an empty group, rows past the last offset
    "all-in-one": [0, 0, 13, 13],
    "unsorted": [9, 3, 12, 3],          # counts, not ranges: the same groups as sorted
    "out-of-range": [-2, 5, 40, 40],    # clamped to [0, rows]
}


def _group_of_rows(offsets, rows):
    offsets = np.asarray(offsets)
    return (offsets[None, :] <= np.arange(rows)[:, None]).sum(1)


def grouped(x, w, offsets):
    return x._wrap(x._tracer.grouped_matmul(x._id, w._id, offsets._id))


def grouped_weight_grad(x, dy, offsets):
    return x._wrap(x._tracer.grouped_matmul_weight_grad(x._id, dy._id, offsets._id))


def _numpy_grouped(x, w, offsets):
    group = _group_of_rows(offsets, x.shape[0])
    out = np.zeros((x.shape[0], w.shape[2]), np.float64)
    for r, g in enumerate(group):
        if g < w.shape[0]:
            out[r] = x[r].astype(np.float64) @ w[g]
    return out


def _numpy_weight_grad(x, dy, offsets, groups):
    group = _group_of_rows(offsets, x.shape[0])
    out = np.zeros((groups, x.shape[1], dy.shape[1]), np.float64)
    for r, g in enumerate(group):
        if g < groups:
            out[g] += np.outer(x[r], dy[r])
    return out


def _inputs(name, dtype=np.float64, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((13, 5)).astype(dtype)
    w = rng.standard_normal((4, 5, 3)).astype(dtype)
    dy = rng.standard_normal((13, 3)).astype(dtype)
    return x, w, dy, np.asarray(OFFSETS[name], np.int32)


def _close(got, want, what):
    scale = max(1.0, float(np.abs(want).max(initial=0)))
    err = float(np.abs(np.asarray(got, np.float64) - want).max(initial=0))
    assert err <= F32_RTOL * scale, f"{what}: max error {err:.3g} > {F32_RTOL:g} * {scale:.3g}"


@pytest.mark.parametrize("name", list(OFFSETS))
def test_interpreter_and_cpu_steps_follow_the_groups(name):
    x, w, dy, offsets = _inputs(name)
    want = _numpy_grouped(x, w, offsets)
    want_dw = _numpy_weight_grad(x, dy, offsets, 4)
    np.testing.assert_allclose(tilefuse.trace(grouped, x, w, offsets).interpret(x, w, offsets),
                               want, rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(
        tilefuse.trace(grouped_weight_grad, x, dy, offsets).interpret(x, dy, offsets), want_dw,
        rtol=1e-13, atol=1e-13)

    x32, w32, dy32 = (a.astype(np.float32) for a in (x, w, dy))
    fn = tilefuse.compile(grouped, x32, w32, offsets, device="cpu")
    _close(fn(x32, w32, offsets), want, f"grouped product ({name})")
    rows = [r for r in fn.report() if r["kind"] == "library"]
    assert [r["name"] for r in rows] == ["grouped_gemm"], fn.report()
    fdw = tilefuse.compile(grouped_weight_grad, x32, dy32, offsets, device="cpu")
    _close(fdw(x32, dy32, offsets), want_dw, f"weights' gradient ({name})")
    assert [r["name"] for r in fdw.report()] == ["grouped_gemm_weight_grad"]


@pytest.mark.parametrize("name", ["sorted", "unsorted"])
def test_gradients_match_finite_differences(name):
    x, w, _, offsets = _inputs(name, seed=1)
    rng = np.random.default_rng(2)
    check_gradients(f"grouped_matmul ({name})", lambda x, w, o: grouped(x, w, o).tanh(),
                    [x, w, offsets], rng, wrt=[0, 1])
    check_gradients(f"grouped_matmul_weight_grad ({name})",
                    lambda x, dy, o: grouped_weight_grad(x, dy, o).tanh(),
                    [x, np.tanh(x[:, :3]), offsets], rng, wrt=[0, 1])


def grouped_stored_transposed(x, wt, offsets):
    """The weights stored [G, N, K] (a mixture-of-experts layer's), read
    transposed in place."""
    return grouped(x, wt.transpose(1, 2), offsets)


def test_weights_stored_transposed_are_read_in_place():
    x, w, dy, offsets = _inputs("unsorted", seed=6)
    wt = np.ascontiguousarray(w.transpose(0, 2, 1))
    want = _numpy_grouped(x, w, offsets)
    x32, wt32 = x.astype(np.float32), wt.astype(np.float32)
    fn = tilefuse.compile(grouped_stored_transposed, x32, wt32, offsets, device="cpu")
    _close(fn(x32, wt32, offsets), want, "transposed weights")
    assert [r["name"] for r in fn.report()] == ["grouped_gemm"], fn.report()
    check_gradients("grouped_matmul, weights stored transposed",
                    lambda x, wt, o: grouped_stored_transposed(x, wt, o).tanh(),
                    [x, wt, offsets], np.random.default_rng(7), wrt=[0, 1])
    g = tilefuse.trace(lambda x, wt, o: (grouped_stored_transposed(x, wt, o).tanh()).sum(),
                       x32, wt32, offsets).value_and_grad(wrt=(0, 1))
    ref = tilefuse.trace(lambda x, wt, o: (grouped_stored_transposed(x, wt, o).tanh()).sum(),
                         x, wt, offsets).value_and_grad(wrt=(0, 1)).interpret(x, wt, offsets)
    compiled = g.compile(device="cpu")
    for got, want_, what in zip(compiled(x32, wt32, offsets), ref, ("loss", "d/dx", "d/dwt")):
        _close(got, np.asarray(want_), what)
    assert not any("transpose" in " ".join(r["ops"]) for r in compiled.report()), \
        compiled.report()


def _loss(x, w, o):
    return (grouped(x, w, o).tanh() * grouped(x, w, o)).sum()


def test_compiled_gradients_match_the_interpreter():
    x, w, _, offsets = _inputs("sorted", np.float64, seed=3)
    want = tilefuse.trace(_loss, x, w, offsets).value_and_grad(wrt=(0, 1)).interpret(
        x, w, offsets)
    x, w = x.astype(np.float32), w.astype(np.float32)
    fn = tilefuse.trace(_loss, x, w, offsets).value_and_grad(wrt=(0, 1)).compile(device="cpu")
    for got, ref, what in zip(fn(x, w, offsets), want, ("loss", "d/dx", "d/dw")):
        _close(got, np.asarray(ref), what)
    names = sorted(r["name"] for r in fn.report() if r["kind"] == "library")
    assert names == ["grouped_gemm", "grouped_gemm", "grouped_gemm_weight_grad"], names


def test_artifact_round_trip_keeps_the_grouped_steps(tmp_path):
    x, w, _, offsets = _inputs("unsorted", np.float32, seed=4)
    g = tilefuse.trace(grouped, x, w, offsets)
    path = tmp_path / "grouped.tfa"
    g.export(path)
    loaded = tilefuse.load(path)
    _close(loaded(x, w, offsets), _numpy_grouped(x, w, offsets), "loaded artifact")


@pytest.mark.skipif(unavailable_reason() is not None, reason=str(unavailable_reason()))
def test_cuda_writes_grouped_products_densely_under_emulation(tmp_path):
    x, w, _, offsets = _inputs("out-of-range", np.float32, seed=5)
    g = tilefuse.trace(_loss, x, w, offsets).value_and_grad(wrt=(0, 1))
    check_emulated(g, (x, w, offsets), str(tmp_path), 1e-5, 1e-5, name="grouped")


def test_no_groups_and_no_rows():
    rng = np.random.default_rng(8)
    x, w = rng.standard_normal((6, 5)).astype(np.float32), np.zeros((0, 5, 3), np.float32)
    none = np.zeros((0,), np.int32)
    fn = tilefuse.compile(grouped, x, w, none, device="cpu")
    assert np.array_equal(fn(x, w, none), np.zeros((6, 3), np.float32))
    empty = np.zeros((0, 5), np.float32)
    w = rng.standard_normal((2, 5, 3)).astype(np.float32)
    offsets = np.array([0, 0], np.int32)
    assert tilefuse.compile(grouped, empty, w, offsets, device="cpu")(empty, w, offsets).shape \
        == (0, 3)


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_16bit_grouped_products_round_once(precision):
    """Under autocast the operands are 16-bit; the step widens them to f32
    once, multiplies per group and rounds the product once."""
    x, w, dy, offsets = _inputs("unsorted", np.float32, seed=9)
    fn = tilefuse.compile(grouped, x, w, offsets, device="cpu", precision=precision)
    fdw = tilefuse.compile(grouped_weight_grad, x, dy, offsets, device="cpu",
                           precision=precision)
    for got, want, what in ((fn(x, w, offsets), _numpy_grouped(x, w, offsets), "product"),
                            (fdw(x, dy, offsets), _numpy_weight_grad(x, dy, offsets, 4),
                             "weights' gradient")):
        scale = max(1.0, float(np.abs(want).max()))
        err = float(np.abs(np.asarray(got, np.float64) - want).max())
        assert err <= 1e-2 * scale, f"{precision} {what}: error {err:.3g} (scale {scale:.3g})"
