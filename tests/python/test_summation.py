"""f32 sums in long rows and split column kernels accumulate in f64: a row
with one large term and many small ones keeps the small ones. Plain f32
per-lane accumulation dropped every term below half an ulp of the large one:
the error grew with the row (1e-5 relative for a 262,144-class softmax with
a dominant logit). Along a row each lane first adds groups of 8 blocks in
f32, so up to 7 small terms after the large one may be dropped (1.75 ulps
here, whatever the row's length). Tolerance: 4 float32 ulps of the exact
sum."""
import numpy as np
import pytest

import tilefuse


@pytest.mark.parametrize("n", [1 << 12, 1 << 18, 1 << 20 | 37])
@pytest.mark.parametrize("layout", ["row", "column"])
def test_small_terms_next_to_a_large_one_are_kept(n, layout):
    x = np.full(n, 2.0**-25, np.float32)   # each below half an ulp of 1.0
    x[n // 3] = 1.0
    exact = 1.0 + (n - 1) * 2.0**-25
    if layout == "row":
        arr, fn = x.reshape(1, n), (lambda t: t.sum(1))
    else:
        arr, fn = np.repeat(x.reshape(n, 1), 3, 1), (lambda t: t.sum(0))
    got = tilefuse.compile(fn, arr, device="cpu")(arr).astype(np.float64)
    ulp = np.spacing(np.float32(exact))
    assert np.all(np.abs(got - exact) <= 4 * ulp), (layout, n, got, exact)


def test_infinities_and_nan_still_propagate():
    x = np.ones((4, 1000), np.float32)
    x[0, 5] = np.inf
    x[1, 7], x[1, 9] = np.inf, -np.inf
    x[2, 3] = np.nan
    x[3, 0] = -np.inf
    got = tilefuse.compile(lambda t: t.sum(1), x, device="cpu")(x)
    assert got[0] == np.inf and np.isnan(got[1]) and np.isnan(got[2]) and got[3] == -np.inf
