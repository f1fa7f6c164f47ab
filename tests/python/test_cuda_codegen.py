"""CUDA code generation without a GPU: every kernel of the test corpus (the
WORKLOADS.md models' forward passes and training steps, and a mix of op
families) is rendered as CUDA C and compiled by NVRTC for sm_80 and sm_90,
and ptxas's report must show no register spills.

Executing these kernels needs a GPU and the CUDA executor, which this build
does not have yet; nothing here runs them.
"""
import numpy as np
import pytest

import tilefuse
import tilefuse.functional as F
from tilefuse import workloads as W

ARCHS = ["cuda:sm_80", "cuda:sm_90"]


def _nvrtc_available():
    g = tilefuse.trace(lambda x: x * 2, np.zeros(4, np.float32))
    try:
        g._graph.compile_cuda("cuda:sm_90")
        return True
    except tilefuse.CompileError as e:
        if "no NVRTC" in str(e):
            return False
        raise


needs_nvrtc = pytest.mark.skipif(not _nvrtc_available(),
                                 reason="this build has no NVRTC (CUDA toolkit not found)")


def _workload_graphs():
    out = {}
    cfg = W.gpt2_mini_config(n_layer=1)
    p, b = W.gpt2_mini_init(cfg, seed=0), W.gpt2_mini_batch(cfg, seed=1)
    loss = lambda p, b, s: W.gpt2_mini_loss(p, b, s, cfg, True)  # noqa: E731
    out["gpt2_mini forward"] = tilefuse.trace(loss, p, b, np.int64(0))
    out["gpt2_mini AdamW step"] = tilefuse.compile_train_step(
        loss, p, b, tilefuse.optim.AdamW(lr=1e-3, weight_decay=0.01)).graph
    # Mixed precision: bf16, and f16 with its in-graph loss scaling.
    for precision in ("bf16", "fp16"):
        out[f"gpt2_mini AdamW step {precision}"] = tilefuse.train_step_graph(
            loss, p, b, tilefuse.optim.AdamW(lr=1e-3, weight_decay=0.01),
            precision=precision)
    cfg = W.mlp_mnist_config()
    p, b = W.mlp_mnist_init(cfg, seed=0), W.mlp_mnist_batch(cfg, seed=1)
    loss = lambda p, b, s: W.mlp_mnist_loss(p, b, s, cfg, True)  # noqa: E731
    out["mlp_mnist Adam step"] = tilefuse.compile_train_step(
        loss, p, b, tilefuse.optim.Adam(lr=2e-4)).graph
    cfg = W.deepfm_config()
    p, b = W.deepfm_init(cfg, seed=0), W.deepfm_batch(cfg, seed=1)
    out["deepfm AdamW step"] = tilefuse.compile_train_step(
        lambda p, b: W.deepfm_loss(p, b, cfg), p, b, tilefuse.optim.AdamW(lr=1e-3)).graph
    return out


def _op_mix_graph():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((37, 129)).astype(np.float32)
    w = rng.standard_normal((129,)).astype(np.float32)
    h = rng.standard_normal((8, 50)).astype(np.float16)
    d = rng.standard_normal((5, 6)).astype(np.float64)

    def fn(x, w, h, d):
        a = F.layer_norm(F.gelu(x), (129,), w, w)
        b = (F.log_softmax(x, -1) * x.sigmoid()).sum(0) + x.argmax(1).to("f32").sum()
        c = (h.exp() + h.tanh()).to("f32").amax(-1)
        e = (d.erf() ** 2).transpose(0, 1).reshape([10, 3]).amin(0)
        return a, b, c, e, tilefuse.cat([x[:, :3], x[:, -3:]], 1).abs().sqrt()
    return tilefuse.trace(fn, x, w, h, d)


CORPUS = None


def corpus():
    global CORPUS
    if CORPUS is None:
        CORPUS = dict(_workload_graphs(), **{"op mix": _op_mix_graph()})
    return CORPUS


@pytest.mark.parametrize("name", ["gpt2_mini forward", "op mix"])
def test_every_kernel_names_its_source_ops(name):
    src = corpus()[name]._graph.cuda_source("cuda:sm_90")
    kernels = src.count('extern "C" __global__')
    assert kernels >= 1
    assert src.count("; fuses graph.") == kernels
    assert "__shfl_xor_sync" in src  # block reductions


@needs_nvrtc
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("name", ["gpt2_mini forward", "gpt2_mini AdamW step",
                                  "gpt2_mini AdamW step bf16", "gpt2_mini AdamW step fp16",
                                  "mlp_mnist Adam step", "deepfm AdamW step", "op mix"])
def test_corpus_compiles_without_spills(name, arch):
    graph = corpus()[name]
    rows = graph._graph.compile_cuda(arch)
    src = graph._graph.cuda_source(arch)
    own = [r for r in rows if not r["name"].startswith("tf_attention_")]
    assert len(own) == src.count('extern "C" __global__'), rows
    spilling = [r for r in rows if r["spill_stores"] or r["spill_loads"]]
    assert not spilling, f"{name} for {arch}: kernels spill registers: {spilling}"
    assert all(0 < r["registers"] <= 255 for r in rows), rows


def test_cuda_source_refuses_a_cpu_target():
    with pytest.raises(tilefuse.CompileError, match="not a CUDA target"):
        corpus()["op mix"]._graph.cuda_source("cpu")


@needs_nvrtc
def test_nvrtc_errors_name_the_architecture():
    g = tilefuse.trace(lambda x: x + 1, np.zeros(4, np.float32))
    with pytest.raises(tilefuse.CompileError, match="sm_1"):
        g._graph.compile_cuda("cuda:sm_1")


# ---------------------------------------------------------------------------
# The cubin disk cache
# ---------------------------------------------------------------------------

def _small_graph():
    x = np.ones((8, 300), np.float32)
    return tilefuse.trace(lambda x: (F.softmax(x, -1) + x.exp()).sum(0), x)


@needs_nvrtc
def test_cubin_cache_hits_and_rebuilds_corrupt_entries(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEFUSE_CACHE_DIR", str(tmp_path))
    g = _small_graph()._graph
    first = g.compile_cuda("cuda:sm_90")
    assert first and not any(r["cached"] for r in first)
    entries = sorted((tmp_path / "cubin").glob("*.cubin"))
    assert len(entries) == len(first)
    second = g.compile_cuda("cuda:sm_90")
    assert all(r["cached"] for r in second)
    assert [r["registers"] for r in second] == [r["registers"] for r in first]
    # A truncated entry and one with a flipped byte are compiled again.
    data = entries[0].read_bytes()
    entries[0].write_bytes(data[: len(data) // 2])
    if len(entries) > 1:
        other = bytearray(entries[1].read_bytes())
        other[-10] ^= 0xFF
        entries[1].write_bytes(bytes(other))
    third = g.compile_cuda("cuda:sm_90")
    assert sum(not r["cached"] for r in third) == min(2, len(entries))
    assert all(r["cached"] for r in g.compile_cuda("cuda:sm_90"))
    # Another architecture is another key.
    assert not any(r["cached"] for r in g.compile_cuda("cuda:sm_80"))


@needs_nvrtc
def test_concurrent_processes_share_the_cache(tmp_path):
    import os
    import subprocess
    import sys
    code = ("import numpy as np, tilefuse, tilefuse.functional as F\n"
            "x = np.ones((8, 300), np.float32)\n"
            "g = tilefuse.trace(lambda x: (F.softmax(x, -1) + x.exp()).sum(0), x)\n"
            "print(sorted((r['name'], r['registers']) for r in g._graph.compile_cuda('cuda:sm_90')))\n")
    env = dict(os.environ, TILEFUSE_CACHE_DIR=str(tmp_path))
    procs = [subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(3)]
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err
    assert outs[0][0] == outs[1][0] == outs[2][0]
    assert not list((tmp_path / "cubin").glob("*.tmp.*")), "temporary files left behind"
    monkey = dict(env)
    out = subprocess.run([sys.executable, "-c", code.replace(
        "print(sorted((r['name'], r['registers'])", "print(all(r['cached']")], env=monkey,
        capture_output=True, text=True, check=True).stdout
    assert out.strip().startswith("True")


# ---------------------------------------------------------------------------
# What the emitted C becomes
# ---------------------------------------------------------------------------

@needs_nvrtc
def test_contiguous_blocks_become_128_bit_loads_and_stores():
    x = np.ones((4096, 1024), np.float32)
    chain = tilefuse.trace(lambda x, y: (x * y + x).abs().sqrt(), x, x)
    ptx = chain._graph.cuda_ptx("cuda:sm_90")
    assert "ld.global.nc.v4.f32" in ptx or "ld.global.v4.f32" in ptx, ptx[-3000:]
    assert "st.global.v4.f32" in ptx, ptx[-3000:]
    rows = tilefuse.trace(lambda x: F.softmax(x, -1), x)._graph.cuda_ptx("cuda:sm_90")
    assert "v4.f32" in rows and "shfl.sync.bfly.b32" in rows


@needs_nvrtc
@pytest.mark.parametrize("dtype", ["bf16", "f16"])
def test_contiguous_half_precision_blocks_are_packed_64_bit_accesses(dtype):
    """Four 16-bit lanes per thread move as one 8-byte access (two
    bf16x2/half2 words); the arithmetic between runs in f32."""
    t = f"tensor<1024x1024x{dtype}>"
    text = (f"func.func @f(%a: {t}, %b: {t}) -> {t} {{\n"
            f"  %0 = graph.mul %a, %b : {t}\n"
            f"  %1 = graph.tanh %0 : {t}\n"
            f"  return %1 : {t}\n}}\n")
    g = tilefuse._core.parse(text)
    ptx = g.cuda_ptx("cuda:sm_90")
    assert ptx.count("ld.global.nc.v4.u16") >= 2, ptx[-3000:]
    assert "st.global.v4.u16" in ptx, ptx[-3000:]
    src = g.cuda_source("cuda:sm_90")
    ctype = "__nv_bfloat16" if dtype == "bf16" else "__half"
    assert f"tf_load<{ctype}, 4, 1>" in src and "tanhf(" in src, src
    for arch in ARCHS:
        for k in g.compile_cuda(arch):
            assert k["spill_stores"] == 0 and k["spill_loads"] == 0, (arch, k)


@needs_nvrtc
def test_resource_report_has_shared_memory_of_block_reductions():
    rows = _small_graph()._graph.compile_cuda("cuda:sm_90")
    assert all(r["shared_bytes"] >= 0 for r in rows), rows
    assert any(r["shared_bytes"] > 0 for r in rows), rows  # the reductions' partials


@needs_nvrtc
@pytest.mark.parametrize("arch", ARCHS)
def test_gather_and_scatter_artifacts_carry_the_library_kernels(arch, tmp_path):
    # deepfm's step gathers embeddings and scatter-adds their gradients:
    # the artifact needs the runtime library's cubin, compiled for `arch`.
    path = tmp_path / "deepfm.tfa"
    corpus()["deepfm AdamW step"].export(path, arch)
    data = path.read_bytes()
    assert b"tf_library" in data and b"tf_scatter_add_f32_i64" in data


@needs_nvrtc
def test_cubin_cache_entries_are_checked_against_their_key(tmp_path, monkeypatch):
    """Two valid entries swapped under each other's names are misses (each
    entry holds its key), a directory where an entry belongs is a miss, and
    temporary files a killed process left behind go after an hour."""
    import os
    import time
    monkeypatch.setenv("TILEFUSE_CACHE_DIR", str(tmp_path))
    x = np.ones((8, 300), np.float32)
    g = tilefuse.trace(lambda x: (x.exp() * 2, x.tanh().sum(0)), x)._graph
    first = g.compile_cuda("cuda:sm_90")
    entries = sorted((tmp_path / "cubin").glob("*.cubin"))
    assert len(first) >= 2 and len(entries) == len(first)
    a, b = entries[0].read_bytes(), entries[1].read_bytes()
    entries[0].write_bytes(b)
    entries[1].write_bytes(a)
    second = g.compile_cuda("cuda:sm_90")
    assert sum(not r["cached"] for r in second) == 2, second
    assert sorted((r["name"], r["registers"]) for r in second) == \
        sorted((r["name"], r["registers"]) for r in first)
    # A directory at an entry's path: compiled again, no error.
    entries[0].unlink()
    entries[0].mkdir()
    third = g.compile_cuda("cuda:sm_90")
    assert sum(not r["cached"] for r in third) == 1
    # Stale temporaries (a kill between write and rename) are removed.
    stale = tmp_path / "cubin" / "x.cubin.tmp.1.2"
    fresh = tmp_path / "cubin" / "y.cubin.tmp.3.4"
    stale.write_bytes(b"partial")
    fresh.write_bytes(b"being written")
    old = time.time() - 7200
    os.utime(stale, (old, old))
    g.compile_cuda("cuda:sm_90")
    assert not stale.exists() and fresh.exists()
