"""The CUDA attention kernels (codegen/cuda/CudaAttention.cpp) proven
without a GPU: each program is compiled for sm_90 (NVRTC builds the
kernels' cubin), then runs on the CPU under the CUDA execution model
(tests/cuda_emu) through the real CudaExecutor. Forward and gradients are
checked against PyTorch in float64 on test_attention.py's odd shapes, on
heads past 128 (the d256 kernels, whose tiles take more than the 48 KiB of
shared memory a kernel gets without opting in: the driver double refuses
such a launch unless the executor opted in), and in bf16 and f16 against
test_attention_16bit.py's bounds; ptxas must report no spills for sm_80 and
sm_90 in any of the kernels."""
import os
import re
import sys

import numpy as np
import pytest

import tilefuse
import tilefuse.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cuda_emulation import emulate, unavailable_reason  # noqa: E402
from test_attention import (CASES, RTOL, _ids, _inputs, _sdpa, _torch_reference,  # noqa: E402
                            _written_out, max_rel)
import test_attention_16bit as half  # noqa: E402

pytestmark = pytest.mark.skipif(unavailable_reason() is not None,
                                reason=str(unavailable_reason()))

ARCHS = ["sm_80", "sm_90"]


def _loss_and_output(fn, dout):
    def loss(q, k, v, *rest):
        out = fn(q, k, v, *rest)
        return (out * dout).sum(), out
    return loss


# Heads past 128: the d256 kernels (value size != head size, causal with
# L != S, grouped heads with an additive mask).
WIDE_CASES = [
    (1, 2, 2, 21, 37, 160, 200, True, None),
    (2, 4, 2, 19, 19, 256, 256, False, "float [B,1,L,S]"),
]


@pytest.mark.parametrize("case", CASES + WIDE_CASES, ids=_ids)
def test_forward_and_gradients_match_pytorch_under_emulation(case, tmp_path):
    """Odd sizes (no multiple of a tile), head sizes 40/80/128/160/256, one
    query row, grouped heads, value size != head size, causal with L != S,
    masks broadcast, rows with every key masked (output 0, no gradient)."""
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


# test_attention_16bit.py's first three cases (its long ones exercise the
# CPU backward's task split, and would be slow to emulate) and a d256 head.
HALF_CASES = half.CASES[:3] + [(1, 2, 2, 20, 33, 256, 200, True, None)]


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
@pytest.mark.parametrize("case", HALF_CASES,
                         ids=["causal", "gqa-bool-mask", "one-row-additive", "d256-causal"])
def test_16bit_kernels_match_pytorch_under_emulation(case, dtype, tmp_path):
    """bf16/f16 q, k, v, mask and cotangent in memory, f32 arithmetic, P and
    dS rounded to 16 bits for their products: output and gradients within
    test_attention_16bit.py's bound (1e-2 of the largest |value|, or twice
    PyTorch's own 16-bit error) of PyTorch in float64 on the same inputs."""
    graph, args, exact, theirs = half.case_graph(case, dtype)
    attention = half._attention_lines(graph.fuse("cuda:sm_90").mlir(), "loss_value_and_grad")
    assert len(attention) == 2 and all(f"x{dtype}>" in line for line in attention), attention
    _, out, dq, dk, dv = emulate(graph, list(args), str(tmp_path))
    half.check_against_pytorch((out, dq, dk, dv), exact, theirs, dtype)


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
@pytest.mark.parametrize("case", HALF_CASES[:2], ids=["causal", "gqa-bool-mask"])
def test_16bit_kernels_before_sm80_match_pytorch_under_emulation(case, dtype, tmp_path):
    """The 16-bit kernels GPUs before sm_80 run (no bf16/f16 tensor-core
    operations there: f32 multiply-adds on the widened tiles), same bound."""
    graph, args, exact, theirs = half.case_graph(case, dtype)
    _, out, dq, dk, dv = emulate(graph, list(args), str(tmp_path), tensor_cores=False)
    half.check_against_pytorch((out, dq, dk, dv), exact, theirs, dtype)


def test_16bit_products_run_on_tensor_cores_from_sm80():
    """The PTX of the bf16 and f16 kernels has warp matrix multiply-adds of
    16-bit operands into f32 from sm_80 on, none for sm_75 (f16) or f32."""
    rng = np.random.default_rng(0)
    q = rng.standard_normal((1, 2, 9, 64)).astype(np.float32)

    def ptx(dtype, arch):
        def fn(q):
            x = q if dtype == "f32" else q.to(dtype)
            return F.scaled_dot_product_attention(x, x, x, is_causal=True).to("f32").sum()
        g = tilefuse.trace(fn, q).value_and_grad(wrt=(0,))
        return g._graph.cuda_attention_ptx("cuda:" + arch)

    for arch in ARCHS:
        for dtype in ("bf16", "f16"):
            bodies = {b.split("(", 1)[0].strip(): b for b in ptx(dtype, arch).split(".entry ")[1:]}
            for kernel in ("forward", "key_grads", "query_grads"):
                body = bodies[f"tf_attention_{kernel}_{dtype}_d64"]
                # Operands loaded as 16-bit matrices, multiplied into f32.
                assert re.search(rf"wmma\.load\.a\.sync\.aligned\.\w+\.m16n16k16\.(shared\.)?"
                                 rf"{dtype}\b", body), (arch, dtype, kernel)
                assert re.search(r"wmma\.mma\.sync\.aligned\.\w+\.\w+\.m16n16k16\.f32\.", body), \
                    (arch, dtype, kernel)
        assert "wmma.mma" not in ptx("f32", arch), arch
    assert "wmma.mma" not in ptx("f16", "sm_75")


def _every_variant_graph():
    """One graph with an attention of each element type and head bound:
    the program compiles and loads all nine variants, each once."""
    rng = np.random.default_rng(0)
    qs = [rng.standard_normal((1, 2, 9, e)).astype(np.float32) for e in (40, 100, 200)]

    def fn(*qs):
        total = 0.0
        for q in qs:
            for dtype in ("f32", "bf16", "f16"):
                x = q if dtype == "f32" else q.to(dtype)
                out = F.scaled_dot_product_attention(x, x, x, is_causal=True)
                total = total + (out if dtype == "f32" else out.to("f32")).sum()
        return total
    return tilefuse.trace(fn, *qs).value_and_grad(wrt=(0, 1, 2))


@pytest.mark.parametrize("arch", ARCHS)
def test_the_kernels_compile_without_spills(arch):
    """Every instantiation (f32, bf16, f16; heads up to 64, 128, 256):
    NVRTC's resource report, as compile_cuda gives it, names them with no
    spills; a program compiles only the variants it launches."""
    rows = {r["name"]: r for r in _every_variant_graph()._graph.compile_cuda("cuda:" + arch)}
    kernels = [n for n in rows if n.startswith("tf_attention_")]
    assert sorted(kernels) == sorted(f"tf_attention_{k}_{t}_d{d}" for d in (64, 128, 256)
                                     for t in ("f32", "bf16", "f16")
                                     for k in ("forward", "key_grads", "query_grads")), rows
    for n in kernels:
        r = rows[n]
        assert r["spill_stores"] == 0 and r["spill_loads"] == 0, (arch, r)
        assert 0 < r["registers"] <= 255, (arch, r)
    rng = np.random.default_rng(0)
    q = rng.standard_normal((1, 2, 9, 40)).astype(np.float32)
    one = tilefuse.trace(lambda q: F.scaled_dot_product_attention(q, q, q).sum(), q)
    source = one._graph.cuda_attention_source("cuda:" + arch)
    assert "tf_attention_forward_f32_d64(" in source and "_d128" not in source, source[-600:]
