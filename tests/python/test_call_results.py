"""Results without copies on the CPU (runtime/CpuExecutor::runInto,
python/bindings/ExecutorBindings.cpp): a result the program computes is
written straight into the array the call returns (memory from a pool that
freed results return to) or into the caller's `out=` arrays; results that
are arguments, repeated or carried are copied as before. Every case is
checked against numpy."""
import os
import subprocess
import sys

import numpy as np
import pytest

import tilefuse
from tilefuse import CompileError


def _aligned(n, dtype=np.float32, offset_bytes=0):
    """An n-element array whose data starts `offset_bytes` past a 64-byte
    boundary."""
    itemsize = np.dtype(dtype).itemsize
    raw = np.empty(n + 128 // itemsize, dtype)
    skip = (-raw.ctypes.data % 64 + offset_bytes) // itemsize
    return raw[skip:skip + n]


def _fn():
    x = np.linspace(-2, 2, 4099, dtype=np.float32)  # not a multiple of any block
    return x, tilefuse.compile(lambda x: (x * 2.0).exp() - 1.0, x, device="cpu")


def test_results_are_computed_into_the_returned_arrays_and_stay_valid():
    x, f = _fn()
    want = np.exp(x * 2.0) - 1.0
    assert f._exe.result_in_caller_memory(0)
    first = f(x)
    assert type(first.base).__name__ == "PyCapsule", "the result was copied, not computed in place"
    second = f(x * 0.5)
    np.testing.assert_allclose(first, want, rtol=1e-5, atol=1e-6, err_msg="a later call changed the first result")
    np.testing.assert_allclose(second, np.exp(x) - 1.0, rtol=1e-5, atol=1e-6)


def test_freed_results_are_reused_so_steady_calls_touch_no_new_memory():
    x, f = _fn()
    addresses = set()
    for _ in range(6):
        r = f(x)
        addresses.add(r.__array_interface__["data"][0])
        del r
    assert len(addresses) <= 2, f"6 calls used {len(addresses)} result buffers"


def test_out_arrays_are_written_in_place_aligned_or_not():
    x, f = _fn()
    want = np.exp(x * 2.0) - 1.0
    for offset in (0, 4):  # 64-byte aligned (computed into), or not (copied into)
        y = _aligned(x.size, offset_bytes=offset)
        y[:] = np.nan
        got = f(x, out=y)
        assert got is y, "out= did not return the caller's array"
        np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6, err_msg=f"out= at offset {offset}")


def test_out_arrays_of_two_results_and_none_entries():
    x = np.arange(1, 1001, dtype=np.float32)
    f = tilefuse.compile(lambda x: (x + 1.0, x.sqrt()), x, device="cpu")
    a = _aligned(x.size)
    got_a, got_b = f(x, out=(a, None))
    assert got_a is a
    np.testing.assert_allclose(a, x + 1.0)
    np.testing.assert_allclose(got_b, np.sqrt(x), rtol=1e-6)


@pytest.mark.parametrize("bad", [
    np.empty(7, np.float32),             # wrong shape
    np.empty(4099, np.float64),          # wrong dtype
    np.empty(8198, np.float32)[::2],     # not contiguous
], ids=["shape", "dtype", "strided"])
def test_wrong_out_arrays_are_refused_by_name(bad):
    x, f = _fn()
    with pytest.raises(CompileError, match=r"out: result 0 is f32\[4099\]"):
        f(x, out=bad)
    with pytest.raises(CompileError, match=r"out: 2 arrays for 1 results"):
        f(x, out=(None, None))


def test_results_that_are_arguments_or_repeated_never_alias():
    x = np.arange(8, dtype=np.float32)
    ident = tilefuse.compile(lambda x: x, x, device="cpu")
    r = ident(x)  # (the program copies x into its result: that copy may land in r)
    r[0] = 99
    assert x[0] == 0, "the result of an identity function aliases its argument"
    twice = tilefuse.compile(lambda x: ((y := x * 3.0), y), x, device="cpu")
    assert not twice._exe.result_in_caller_memory(0), "a result returned twice was redirected"
    a, b = twice(x)
    a[0] = -1
    np.testing.assert_array_equal(b, x * 3.0)


def test_poisoned_arena_still_returns_exact_results():
    """TILEFUSE_POISON_ARENA fills dead buffers with NaN before and during
    the run: a result computed in the caller's memory is not one of them."""
    code = ("import numpy as np, tilefuse\n"
            "x = np.linspace(-1, 1, 5000, dtype=np.float32)\n"
            "f = tilefuse.compile(lambda x: (x * x).sum() + x.exp(), x, device='cpu')\n"
            "r = f(x)\n"
            "np.testing.assert_allclose(r, (x * x).sum() + np.exp(x), rtol=1e-5)\n"
            "print('ok')\n")
    env = dict(os.environ, TILEFUSE_POISON_ARENA="1")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 0 and "ok" in out.stdout, out.stdout + out.stderr


def test_out_arrays_that_are_also_arguments_are_written_after_the_run():
    """`f(y, out=y)`: the run reads y in place, so y is written only after."""
    rng = np.random.default_rng(1)
    y = _aligned(64 * 64).reshape(64, 64)
    y[:] = rng.standard_normal((64, 64)).astype(np.float32)
    want = y @ y
    f = tilefuse.compile(lambda a: a @ a, y, device="cpu")
    got = f(y, out=y)
    assert got is y
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4,
                               err_msg="out= aliasing the argument of a matmul")


def test_out_arrays_that_overlap_each_other_are_refused():
    x = np.arange(1, 101, dtype=np.float32)
    f = tilefuse.compile(lambda x: (x + 1.0, x * 2.0), x, device="cpu")
    a = _aligned(100)
    with pytest.raises(CompileError, match="overlap"):
        f(x, out=(a, a))


def test_a_result_asked_for_twice_is_the_same_values_twice():
    x, f = _fn()
    first, second = f._exe.run([x], [0, 0])
    np.testing.assert_array_equal(first, second)
    assert first is not second and not np.shares_memory(first, second)
