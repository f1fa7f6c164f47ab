"""The CPU JIT gives the same results on every x86-64 CPU and in any process.

Each case runs in a fresh Python process that imports nothing but tilefuse
(and numpy), so no other library can supply a builtin the kernels call, with
kernels compiled for this machine's CPU and for the x86-64 levels it can run
(TILEFUSE_CPU). The casts are those whose machine code calls half/bfloat16
conversion builtins on some CPU (f64 -> f16 on every x86-64); the f16
training step casts its f64 learning rate.
"""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tilefuse

_SCRIPT = textwrap.dedent(r'''
    import sys
    import numpy as np
    import tilefuse
    import tilefuse.functional as F

    rng = np.random.default_rng(0)
    # Doubles around the half range: ties, just-off ties, subnormals, overflow.
    x64 = np.concatenate([
        rng.standard_normal(4096) * np.exp2(rng.integers(-26, 17, 4096)),
        [1 + 2.0**-11, 1 + 2.0**-11 + 2.0**-40, 1 + 3 * 2.0**-11, 2.0**-25,
         2.0**-25 * (1 + 1e-9), 65504.0, 65519.99, 65520.0, 1e300, -0.0,
         np.inf, -np.inf, 5e-324],
    ]).astype(np.float64)
    x32 = x64.astype(np.float32)
    h16 = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16)
    h16 = h16[~np.isnan(h16)]

    def check(name, fn, arg, want):
        got = tilefuse.compile(fn, arg, device="cpu")(arg)
        assert got.dtype == want.dtype, (name, got.dtype, want.dtype)
        bad = np.flatnonzero(got.view(f"u{got.itemsize}") != want.view(f"u{want.itemsize}"))
        assert bad.size == 0, (f"{name}: {bad.size} of {got.size} differ, first at input "
                               f"{arg[bad[0]]!r}: got {got[bad[0]]!r}, want {want[bad[0]]!r}")

    check("f64->f16", lambda t: t.to("f16"), x64, x64.astype(np.float16))
    check("f32->f16", lambda t: t.to("f16"), x32, x32.astype(np.float16))
    check("f16->f32", lambda t: t.to("f32"), h16, h16.astype(np.float32))
    check("f16->f64", lambda t: t.to("f64"), h16, h16.astype(np.float64))
    # bfloat16 comes back as float32; rounding to nearest even on the bits.
    finite = x32[np.isfinite(x32) & (np.abs(x32) < 3e38)]
    bits = finite.view(np.uint32).astype(np.uint64)
    bf16 = (((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16).astype(np.uint32).view(np.float32)
    check("f32->bf16->f32", lambda t: t.to("bf16").to("f32"), finite, bf16)

    # An f16 training step (its f64 learning rate is cast to f16).
    params = {"w": rng.standard_normal((8, 4)).astype(np.float16),
              "b": np.zeros(4, np.float16)}
    batch = {"x": rng.standard_normal((16, 8)).astype(np.float16),
             "y": rng.standard_normal((16, 4)).astype(np.float16)}
    def loss_fn(p, b):
        return F.mse_loss(b["x"] @ p["w"] + p["b"], b["y"])
    step = tilefuse.compile_train_step(loss_fn, params, batch,
                                       optimizer=tilefuse.optim.SGD(lr=0.1), device="cpu")
    losses = [float(step(batch)) for _ in range(3)]
    assert all(np.isfinite(losses)) and losses[2] < losses[0], losses

    others = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "jax", "scipy"))
    assert not others, f"the check imported {others}"
    print("ok")
''')


def _x86_levels():
    levels = ["host", "x86-64", "x86-64-v2"]
    flags = open("/proc/cpuinfo").read() if os.path.exists("/proc/cpuinfo") else ""
    if " avx2" in flags:
        levels.append("x86-64-v3")
    if " avx512f" in flags and " avx512bw" in flags and " avx512vl" in flags:
        levels.append("x86-64-v4")
    return levels


def _run(cpu, script):
    env = dict(os.environ, TILEFUSE_CPU=cpu, PYTHONPATH=os.pathsep.join(sys.path))
    return subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=600)


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="x86-64 CPU levels")
@pytest.mark.parametrize("cpu", _x86_levels())
def test_casts_and_f16_step_in_a_fresh_process(cpu):
    out = _run(cpu, _SCRIPT)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), (
        f"TILEFUSE_CPU={cpu}: exit {out.returncode}\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")


def test_an_unknown_cpu_is_refused_by_name(monkeypatch):
    monkeypatch.setenv("TILEFUSE_CPU", "pentium-9000")
    x = np.ones(3, np.float32)
    with pytest.raises(tilefuse.CompileError, match=r"TILEFUSE_CPU='pentium-9000' is not a CPU"):
        tilefuse.compile(lambda t: t * 2, x, device="cpu")(x)
