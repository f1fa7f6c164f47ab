"""Kernels that repeat layer after layer are compiled once (the CPU JIT and
the shared library of CPU artifacts, codegen/cpu/TileToLLVM.cpp's
eraseRepeatedKernels): every kernel name still runs its own program's
code, checked against the interpreter, JIT and artifact alike."""
import numpy as np

import tilefuse
import tilefuse.functional as F


def _deep(layers, width=48, batch=5):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, width)).astype(np.float32)
    ws = [rng.standard_normal((width, width)).astype(np.float32) * 0.3 for _ in range(layers)]

    def fn(x, *ws):
        h = x
        for i, w in enumerate(ws):
            # The same kernels every layer; every other layer a different
            # activation, so not all kernels are one.
            h = F.layer_norm(h @ w, (width,)) + h
            h = F.gelu(h, approximate="tanh") if i % 2 else h.tanh()
        return h.sum(-1), h
    return fn, (x, *ws)


def test_repeated_kernels_compute_their_own_results(tmp_path):
    fn, args = _deep(6)
    graph = tilefuse.trace(fn, *args)
    want = graph.interpret(*args)
    got = tilefuse.compile(fn, *args, device="cpu")(*args)
    for g, w, what in zip(got, want, ("row sums", "activations")):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4,
                                   err_msg=f"6-layer chain, JIT, {what}")
    path = tmp_path / "deep.tfa"
    graph.export(path)
    loaded = tilefuse.load(path)(*args)
    for g, w, what in zip(loaded, got, ("row sums", "activations")):
        np.testing.assert_array_equal(g, w, err_msg=f"6-layer chain, artifact vs JIT, {what}")


def test_gradients_of_twelve_repeated_layers_match_the_interpreter():
    """Forward and backward kernels repeat in every layer: each layer's
    gradient still comes from its own kernels' buffers."""
    fn, args = _deep(12, width=16, batch=3)
    loss = lambda x, *ws: fn(x, *ws)[0].sum()  # noqa: E731
    graph = tilefuse.trace(loss, *args).value_and_grad(wrt=tuple(range(1, 13)))
    want = graph.interpret(*args)
    got = graph.compile("cpu")(*args)
    for i, (g, w) in enumerate(zip(got, want)):
        scale = max(1.0, float(np.abs(w).max()))
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4 * scale,
                                   err_msg=f"12-layer chain, result {i}")
