"""Zero-size dimensions work everywhere a PyTorch user would use them (an
empty batch compiles and runs, matching the interpreter); shapes whose
element or byte count does not fit in 64 bits are refused at trace time
instead of compiling with wrapped sizes; reductions with no identity
(max/min/argmax) over an empty dimension are refused, as PyTorch does."""
import numpy as np
import pytest

import tilefuse
import tilefuse.functional as F


def _mlp(x, w1, b1, w2):
    return F.relu(x @ w1 + b1) @ w2


def _mlp_args(batch, rng):
    return (rng.standard_normal((batch, 5)).astype(np.float32),
            rng.standard_normal((5, 7)).astype(np.float32),
            rng.standard_normal(7).astype(np.float32),
            rng.standard_normal((7, 3)).astype(np.float32))


@pytest.mark.parametrize("device", ["cpu"])
def test_an_empty_batch_compiles_and_runs(rng, device):
    args = _mlp_args(0, rng)
    g = tilefuse.trace(_mlp, *args)
    want = g.interpret(*args)
    got = tilefuse.compile(_mlp, *args, device=device)(*args)
    assert want.shape == got.shape == (0, 3)
    # Batched matmul with an empty batch, and a zero inner dimension (sums of
    # nothing are 0).
    a, b = np.zeros((0, 4, 5), np.float32), np.zeros((0, 5, 2), np.float32)
    assert tilefuse.compile(lambda p, q: p @ q, a, b, device=device)(a, b).shape == (0, 4, 2)
    k0a, k0b = np.zeros((3, 0), np.float32), np.zeros((0, 2), np.float32)
    np.testing.assert_array_equal(
        tilefuse.compile(lambda p, q: p @ q, k0a, k0b, device=device)(k0a, k0b), np.zeros((3, 2)))


def test_empty_gradients_and_sums(rng):
    x = np.zeros((0, 4), np.float32)
    g = tilefuse.trace(lambda t: (t * t).sum(), x).value_and_grad(wrt=(0,))
    for run in (g.interpret, g.compile("cpu")):
        value, grad = run(x)
        assert value == 0.0 and grad.shape == (0, 4)
    s = tilefuse.compile(lambda t: t.sum(0), x, device="cpu")(x)
    np.testing.assert_array_equal(s, np.zeros(4, np.float32))


def test_max_of_an_empty_dimension_is_refused_as_in_pytorch():
    x = np.zeros((0, 4), np.float32)
    for fn in (lambda t: t.amax(0), lambda t: t.max(), lambda t: t.argmax(0)):
        with pytest.raises(tilefuse.CompileError, match=r"dimension 0 of \[0, 4\] is empty"):
            tilefuse.trace(fn, x)
    # Over a non-empty dimension of an empty tensor it is fine: [0, 4] -> [0].
    assert tilefuse.compile(lambda t: t.amax(1), x, device="cpu")(x).shape == (0,)


@pytest.mark.parametrize("fn", [
    lambda t: t.reshape(2**40, 2**40).sum(),
    lambda t: t.expand(2**31, 2**31, 2**3),
    lambda t: t.reshape(1, 1).expand(2**62, 2),
])
def test_shapes_beyond_64_bit_sizes_are_refused_at_trace_time(fn):
    x = np.zeros(1, np.float32)
    with pytest.raises(tilefuse.CompileError, match="more elements or bytes than a 64-bit size"):
        tilefuse.trace(fn, x)


def test_parsed_modules_with_impossible_shapes_are_refused():
    text = """
func.func @f(%x: tensor<4611686018427387904x4xf32>) -> tensor<4611686018427387904x4xf32> {
  return %x : tensor<4611686018427387904x4xf32>
}"""
    with pytest.raises(tilefuse.CompileError, match="more elements or bytes than a 64-bit size"):
        tilefuse.parse(text)
