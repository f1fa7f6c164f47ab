"""argmax along a row computed by the lanes of a block together (each lane
its first maximum, then the smallest index holding the row's maximum):
first maximum wins, NaN is the maximum (its first occurrence), rows of
-inf, integer rows, lengths that do not fill a block. Against numpy on
the CPU, and under the CUDA emulation."""
import os
import sys

import numpy as np
import pytest

import tilefuse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cuda_emulation import emulate, unavailable_reason  # noqa: E402


def _rows(dtype, width, seed):
    rng = np.random.default_rng(seed)
    if np.issubdtype(dtype, np.integer):
        x = rng.integers(-5, 5, (9, width)).astype(dtype)  # many ties
        x[3] = np.iinfo(dtype).min
        return x
    x = rng.integers(-4, 4, (9, width)).astype(dtype)  # ties
    x[1, width // 2] = np.nan
    x[1, -1] = np.nan
    x[2] = -np.inf
    x[4, -1] = np.inf
    x[5, 0] = np.nan
    return x


def _expected(x):
    # numpy: the first maximum, and the first NaN when there is one.
    return np.argmax(x, axis=1)


CASES = [(np.float32, w) for w in (1, 3, 31, 64, 1000, 5000)] + \
        [(np.int32, 77), (np.int64, 1025), (np.float16, 300)]


@pytest.mark.parametrize("dtype,width", CASES)
def test_row_argmax_on_the_cpu(dtype, width):
    x = _rows(dtype, width, width)
    fn = tilefuse.compile(lambda t: t.argmax(1), x, device="cpu")
    np.testing.assert_array_equal(fn(x), _expected(x))


@pytest.mark.skipif(unavailable_reason() is not None, reason=str(unavailable_reason()))
@pytest.mark.parametrize("dtype,width", [(np.float32, 5000), (np.float32, 31), (np.int64, 1025),
                                         (np.float16, 300)])
def test_row_argmax_under_cuda_emulation(dtype, width, tmp_path):
    x = _rows(dtype, width, width)
    g = tilefuse.trace(lambda t: t.argmax(1), x)
    (got,) = emulate(g, [x], str(tmp_path))
    np.testing.assert_array_equal(got, _expected(x))
