"""The CUDA attention kernels (codegen/cuda/CudaAttention.cpp) proven
without a GPU: each program is compiled for sm_90 (NVRTC builds the
kernels' cubin), then runs on the CPU under the CUDA execution model
(tests/cuda_emu) through the real CudaExecutor. Forward and gradients are
checked against PyTorch in float64 on test_attention.py's odd shapes; ptxas
must report no spills for sm_80 and sm_90."""
import os
import sys

import numpy as np
import pytest

import tilefuse
import tilefuse.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cuda_emulation import emulate, unavailable_reason  # noqa: E402
from test_attention import (CASES, RTOL, _ids, _inputs, _sdpa, _torch_reference,  # noqa: E402
                            _written_out, max_rel)

pytestmark = pytest.mark.skipif(unavailable_reason() is not None,
                                reason=str(unavailable_reason()))

ARCHS = ["sm_80", "sm_90"]


def _loss_and_output(fn, dout):
    def loss(q, k, v, *rest):
        out = fn(q, k, v, *rest)
        return (out * dout).sum(), out
    return loss


@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_forward_and_gradients_match_pytorch_under_emulation(case, tmp_path):
    """Odd sizes (no multiple of a tile), head sizes 40/80/128, one query
    row, grouped heads, value size != head size, causal with L != S, masks
    broadcast, rows with every key masked (output 0, no gradient)."""
    q, k, v, m = _inputs(case)
    args = [q, k, v] + ([m] if m is not None else [])
    dout = np.random.default_rng(1).standard_normal(
        q.shape[:-1] + (v.shape[-1],)).astype(np.float32)
    want, dq, dk, dv = _torch_reference(q, k, v, m, case[7], dout)
    graph = tilefuse.trace(_loss_and_output(_sdpa(case[7], m), dout),
                           *args).value_and_grad(wrt=(0, 1, 2))
    names = [r["name"] for r in graph.fuse("cuda:sm_90").report()]
    assert "attention" in names and "attention_grad" in names, names
    _, out, *grads = emulate(graph, args, str(tmp_path))
    assert max_rel(out, want) <= RTOL, f"{_ids(case)} forward: {max_rel(out, want):.2e}"
    for name, g, w in zip(("dq", "dk", "dv"), grads, (dq, dk, dv)):
        assert max_rel(g, w) <= RTOL, f"{_ids(case)} {name}: {max_rel(g, w):.2e}"


def test_dropout_drops_what_the_written_out_form_drops(tmp_path):
    """The kernels draw graph.dropout's Philox bits element by element: the
    emulated output and gradients equal the written-out chain's on the CPU
    (same seed and stream) within f32 rounding, and dropout is active."""
    rng = np.random.default_rng(3)
    q, k, v, w = (rng.standard_normal((2, 3, 37, 16)).astype(np.float32) for _ in range(4))
    seed, p = np.int64(11), 0.25
    fused, written = _written_out(p, False), _written_out(p, True)

    def loss_of(fn):
        def loss(q, k, v, w, seed):
            out = fn(q, k, v, seed)
            out = out[0] if isinstance(out, tuple) else out
            return (out * w).sum(), out
        return loss

    graph = tilefuse.trace(loss_of(fused), q, k, v, w, seed).value_and_grad(wrt=(0, 1, 2))
    assert "attention_grad" in [r["name"] for r in graph.fuse("cuda:sm_90").report()]
    got = emulate(graph, (q, k, v, w, seed), str(tmp_path))
    want = tilefuse.trace(loss_of(written), q, k, v, w, seed).value_and_grad(
        wrt=(0, 1, 2)).compile("cpu")(q, k, v, w, seed)
    for name, g, x in zip(("out", "dq", "dk", "dv"), got[1:], want[1:]):
        assert max_rel(g, x) <= RTOL, f"{name}: {max_rel(g, x):.2e}"
    undropped = tilefuse.compile(_written_out(0.0, False), q, k, v, seed, device="cpu")(
        q, k, v, seed)
    assert max_rel(got[1], undropped) > 1e-2, "dropout dropped nothing"


def _attention_graph(e, ev):
    rng = np.random.default_rng(0)
    q = rng.standard_normal((1, 2, 9, e)).astype(np.float32)
    v = rng.standard_normal((1, 2, 9, ev)).astype(np.float32)
    dout = rng.standard_normal((1, 2, 9, ev)).astype(np.float32)
    fn = _loss_and_output(_sdpa(True, None), dout)
    return tilefuse.trace(fn, q, q, v).value_and_grad(wrt=(0, 1, 2))


@pytest.mark.parametrize("arch", ARCHS)
def test_the_kernels_compile_without_spills(arch):
    """Every instantiation (heads up to 64 and up to 128): NVRTC's resource
    report, as compile_cuda gives it, names them with no spills."""
    rows = {r["name"]: r for r in _attention_graph(40, 40)._graph.compile_cuda("cuda:" + arch)}
    kernels = [n for n in rows if n.startswith("tf_attention_")]
    assert sorted(kernels) == sorted(f"tf_attention_{k}_d{d}" for d in (64, 128)
                                     for k in ("forward", "key_grads", "query_grads")), rows
    for n in kernels:
        r = rows[n]
        assert r["spill_stores"] == 0 and r["spill_loads"] == 0, (arch, r)
        assert 0 < r["registers"] <= 255, (arch, r)
