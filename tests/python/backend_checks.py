"""Running a traced function on both backends and comparing exactly: shared
by the PyTorch-semantics and numpy-dispatch tests."""
import numpy as np

import tilefuse


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
