"""Running a traced function on both backends, the float tolerances and
comparisons: shared by the op-numerics, PyTorch-semantics and
numpy-dispatch tests."""
import numpy as np

import tilefuse


# |got - want| <= ATOL + RTOL * |want|, elementwise, per result dtype.
F32_RTOL, F32_ATOL = 1e-5, 1e-6
F64_RTOL, F64_ATOL = 1e-12, 1e-12
TOLERANCES = {
    np.dtype(np.float32): (F32_RTOL, F32_ATOL),
    np.dtype(np.float64): (F64_RTOL, F64_ATOL),
}


def bf16(a):
    """float32 -> the nearest bfloat16 (ties to even), as float32."""
    bits = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return bits.astype(np.uint32).view(np.float32)


def out_of_tolerance(got, want, rtol, atol, magnitude=None):
    """(bad, err, bound) elementwise, in float64: NaN and infinities of
    `want` must be matched exactly; `magnitude` (the sum of a sum's terms'
    absolute values) replaces |want| in the relative bound where larger."""
    g, w = np.asarray(got).astype(np.float64), np.asarray(want).astype(np.float64)
    same_special = (np.isnan(g) & np.isnan(w)) | (np.isinf(w) & (g == w))
    with np.errstate(invalid="ignore", over="ignore"):
        err = np.where(same_special, 0.0, np.abs(g - w))
        err = np.where(np.isnan(err), np.inf, err)
        scale = np.abs(w) if magnitude is None else np.maximum(
            np.abs(w), np.asarray(magnitude, np.float64))
        bound = atol + rtol * np.where(np.isfinite(w), scale, 0.0)
    return ~(err <= bound), err, bound


def assert_close_to_scale(got, want, rtol, atol, what, names=("got", "want")):
    """Elementwise |got - want| <= rtol |want| + atol * max(1, max |want|)
    (NaN and infinities matched exactly); the error names the worst element
    with `names` for the two sides."""
    got, want = np.asarray(got), np.asarray(want)
    w = want.astype(np.float64)
    finite = np.isfinite(w)
    scale = max(1.0, float(np.abs(w[finite]).max())) if finite.any() else 1.0
    bad, err, bound = out_of_tolerance(got, want, rtol, atol * scale)
    if bad.any():
        k = int(np.argmax(np.where(bad, err / bound, 0.0)))
        at = np.unravel_index(k, got.shape) if got.ndim else ()
        raise AssertionError(
            f"{what}: {int(bad.sum())} of {got.size} element(s) exceed rtol={rtol:g}, "
            f"atol={atol:g}*{scale:.3g}; worst at {[int(j) for j in at]}: {names[0]} "
            f"{got[at]!r}, {names[1]} {want[at]!r} (err {err[at]:.3g}, bound {bound[at]:.3g})")


def run_both(fn, *args):
    """{backend: result} for the interpreter and the compiled CPU function."""
    graph = tilefuse.trace(fn, *args)
    return {"interpret": graph.interpret(*args),
            "compiled cpu": tilefuse.compile(fn, *args, device="cpu")(*args)}


def context(what, backend, dtype, seed, shapes):
    """The prefix of a failure message: op, backend, dtype, shapes, seed."""
    name = np.dtype(dtype).name if dtype is not None else "?"
    return f"{what} [{backend}]: dtype {name}, shapes {shapes}, seed {seed}"


def assert_exact(what, backend, got, want, seed, shapes):
    """Bit for bit (NaN == NaN), including shape and dtype."""
    got, want = np.asarray(got), np.asarray(want)
    ctx = context(what, backend, want.dtype, seed, shapes)
    assert got.shape == want.shape, f"{ctx}: got shape {got.shape}, want {want.shape}"
    assert got.dtype == want.dtype, f"{ctx}: got dtype {got.dtype}, want {want.dtype}"
    if not np.array_equal(got, want, equal_nan=want.dtype.kind == "f"):
        diff = ~((got == want) | ((got != got) & (want != want)))
        first = tuple(int(i) for i in np.argwhere(diff)[0])
        raise AssertionError(f"{ctx}: {int(diff.sum())} of {diff.size} elements differ; first "
                             f"at {first}: got {got[first]!r}, want {want[first]!r}")
