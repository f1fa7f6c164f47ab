"""Runs tilefuse's CUDA programs on the CPU: the emitted CUDA C compiled as
host C++ against tests/cuda_emu/CudaEmu.h, loaded by the CPU double of the
driver (tests/unit/fakecuda) in place of cubins, executed by the real
CudaExecutor inside `tilefuse-run`.

    result = emulate(graph, args, workdir)   # numpy results, or raises

The artifact is the one `Graph.export(path, "cuda:sm_90")` writes (its
cubins compiled by NVRTC, so the kernels are also proven to compile for the
GPU); only its code blobs are replaced by "emu:<library>" entries. The run
happens in a child process: NVRTC loads libcuda.so.1 itself and must never
meet the driver double in one process.
"""
import os
import re
import struct
import subprocess
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HEADER = os.path.join(ROOT, "tests", "cuda_emu", "CudaEmu.h")
CUDA_INCLUDE = "/usr/local/cuda/include"
_HEAD = 8 + 4 + 8 + 8  # magic, version, payload bytes, payload hash
_FNV_BASIS, _FNV_PRIME = 14695981039346656037, 1099511628211


class EmulationFailure(AssertionError):
    """The emulated program failed: an emulator report, or a wrong answer."""


def fake_driver_dir():
    build = os.environ.get("TILEFUSE_BUILD_DIR", os.path.join(ROOT, "build"))
    d = os.path.join(build, "tests", "fakecuda")
    return d if os.path.exists(os.path.join(d, "libcuda.so.1")) else None


def unavailable_reason():
    """Why emulation cannot run here, or None."""
    import shutil
    import tilefuse
    if fake_driver_dir() is None:
        return "the CPU double of the CUDA driver was not built (no CUDA toolkit)"
    if not hasattr(tilefuse._core, "cuda_library_source"):
        return "this build has no NVRTC (CUDA toolkit not found)"
    if shutil.which("g++") is None or shutil.which("tilefuse-run") is None:
        return "g++ or tilefuse-run is not on PATH"
    if not os.path.exists(os.path.join(CUDA_INCLUDE, "cuda_fp16.h")):
        return f"no CUDA headers in {CUDA_INCLUDE}"
    return None


def _fnv(data):
    h = _FNV_BASIS
    for b in data:
        h = ((h ^ b) * _FNV_PRIME) & 0xFFFFFFFFFFFFFFFF
    return h


_KERNEL = re.compile(r'extern "C" __global__ void (?:__launch_bounds__\((\d+)\) )?(\w+)\(')
_GATHER = re.compile(r"^TF_GATHER\([^,]+,\s*(\w+)\)", re.M)
_SCATTER = re.compile(r"^TF_SCATTER\((\w+),", re.M)


def _entries(source, library):
    """TF_EMU_ENTRY lines for every kernel of `source`."""
    kernels = [(name, bounds or "1024") for bounds, name in _KERNEL.findall(source)]
    if library:  # kernels the runtime library declares through its macros
        kernels += [("tf_gather_" + s, "1024") for s in _GATHER.findall(source)]
        kernels += [(n, "1024") for n in _SCATTER.findall(source)]
    # (NAME: the parameter of the library's own kernel-defining macro)
    return "\n".join(f"TF_EMU_ENTRY({n}, {b})" for n, b in kernels if n != "NAME") + "\n"


def build_library(source, path, library=False, defines=()):
    """Compiles CUDA C `source` with the emulation header into shared
    library `path` (`defines`: extra -D options, e.g. TF_ATTENTION_MMA=0 for
    the attention kernels GPUs before sm_80 run)."""
    cu = path + ".cu"
    with open(cu, "w") as f:
        f.write(source + "\n" + _entries(source, library))
    # -fsanitize=bounds: an index past a __shared__ array (a static here)
    # stops the run with the array and the index, as a GPU would not.
    cmd = ["g++", "-std=c++20", "-O1", "-shared", "-fPIC", "-w", "-fsanitize=bounds",
           "-fno-sanitize-recover=bounds", *("-D" + d for d in defines), "-include", HEADER,
           "-I", CUDA_INCLUDE, "-x", "c++", cu, "-o", path]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise EmulationFailure("the emitted CUDA C does not compile as host C++ against "
                               f"CudaEmu.h:\n$ {' '.join(cmd)}\n{r.stderr[-4000:]}")
    return path


def _blobs(data):
    """[(name, start, end)] of the code blobs of artifact bytes `data`."""
    pos = _HEAD

    def u64():
        nonlocal pos
        pos += 8
        return struct.unpack_from("<Q", data, pos - 8)[0]

    def skip():
        nonlocal pos
        n = u64()
        pos += n
        return pos - n, pos

    skip()  # target
    for _ in range(u64()):
        skip()  # CPU features
    skip()  # program
    out = []
    for _ in range(u64()):
        s, e = skip()
        name = data[s:e].decode()
        cs, ce = skip()
        u64()  # code hash
        out.append((name, cs, ce))
    return out


def emulated_artifact(artifact, kernels_so, runtime_sos):
    """The artifact's bytes with every code blob replaced by its library:
    `runtime_sos` maps the runtime's own blobs (tf_library, tf_attention)
    to theirs, the program's kernels go to `kernels_so` (a repeated
    kernel's blob, which names the kernel whose code it shares, stays: the
    executor resolves it)."""
    data = open(artifact, "rb").read()
    payload, last = bytearray(), _HEAD
    for name, start, end in _blobs(data):
        if data[start:end].startswith(b"tilefuse-alias:"):
            continue
        code = ("emu:" + runtime_sos.get(name, kernels_so)).encode()
        # Each blob: u64 length (the 8 bytes before `start`), code, u64 hash.
        payload += data[last:start - 8]
        payload += struct.pack("<Q", len(code)) + code + struct.pack("<Q", _fnv(code))
        last = end + 8
    payload += data[last:]
    return data[:12] + struct.pack("<QQ", len(payload), _fnv(payload)) + bytes(payload)


def _leaves(args):
    from tilefuse import _pytree
    leaves, _ = _pytree.flatten(list(args))
    return [np.asarray(v) for v in leaves]


def emulate(graph, args, workdir, repeat=1, graphs=True, tensor_cores=True):
    """Results of `graph` on `args`, computed by its CUDA program under
    emulation (`repeat` calls: the first eager or captured, the others
    replayed when `graphs`; `tensor_cores` False: the 16-bit attention
    kernels of GPUs before sm_80)."""
    emu = emulated_export(graph, workdir, tensor_cores)
    inputs = []
    for i, a in enumerate(_leaves(args)):
        inputs.append(os.path.join(workdir, f"in{i}.npy"))
        np.save(inputs[-1], a)
    out = os.path.join(workdir, "out")
    cmd = ["tilefuse-run", emu, f"--repeat={repeat}", f"--save={out}"]
    if inputs:
        cmd.append("--inputs=" + ",".join(inputs))
    if not graphs:
        cmd.append("--no-graphs")
    r = subprocess.run(cmd, capture_output=True, text=True, env=emulation_env(), timeout=600)
    if r.returncode != 0:
        raise EmulationFailure(f"$ LD_LIBRARY_PATH={fake_driver_dir()} {' '.join(cmd)}\n"
                               f"exit {r.returncode}\n{r.stderr[-6000:]}")
    n = len([f for f in os.listdir(out) if f.startswith("result")])
    return [np.load(os.path.join(out, f"result{i}.npy")) for i in range(n)]


def emulation_env():
    """The environment of a process that runs CUDA programs emulated."""
    return dict(os.environ, LD_LIBRARY_PATH=fake_driver_dir())


def emulated_export(graph, workdir, tensor_cores=True):
    """`graph` exported for sm_90 with its code replaced by emulated
    libraries: the path of that artifact."""
    import tilefuse
    os.makedirs(workdir, exist_ok=True)
    art = os.path.join(workdir, "model.tfa")
    graph.export(art, "cuda:sm_90")
    kernels = build_library(graph._graph.cuda_source("cuda:sm_90"),
                            os.path.join(workdir, "kernels.so"))
    data = open(art, "rb").read()
    names = {name for name, _, _ in _blobs(data)}
    runtime_sos = {}
    if "tf_library" in names:
        runtime_sos["tf_library"] = build_library(tilefuse._core.cuda_library_source(),
                                                  os.path.join(workdir, "library.so"),
                                                  library=True)
    if "tf_attention" in names:
        runtime_sos["tf_attention"] = build_library(
            graph._graph.cuda_attention_source("cuda:sm_90"), os.path.join(workdir, "attention.so"),
            defines=() if tensor_cores else ("TF_ATTENTION_MMA=0",))
    emu = os.path.join(workdir, "model.emu.tfa")
    with open(emu, "wb") as f:
        f.write(emulated_artifact(art, kernels, runtime_sos))
    return emu


def check_emulated(graph, args, workdir, rtol, atol, name="", **kwargs):
    """Runs `graph` under emulation and compares every result with the
    reference interpreter; returns the largest error per result."""
    got = emulate(graph, args, workdir, **kwargs)
    want = [np.asarray(w) for w in graph._graph.interpret(_leaves(args))]
    if len(got) != len(want):
        raise EmulationFailure(f"{name}: {len(got)} results, the interpreter gives {len(want)}")
    errors = []
    for i, (g, w) in enumerate(zip(got, want)):
        if g.shape != w.shape:
            raise EmulationFailure(f"{name}: result {i} has shape {g.shape}, expected {w.shape}")
        g64, w64 = g.astype(np.float64), w.astype(np.float64)
        err = float(np.max(np.abs(g64 - w64), initial=0.0))
        errors.append(err)
        if not np.allclose(g64, w64, rtol=rtol, atol=atol, equal_nan=True):
            raise EmulationFailure(f"{name}: result {i} ({w.dtype}{list(w.shape)}) differs from "
                                   f"the interpreter by up to {err:.3g} (rtol {rtol}, atol {atol})")
    return errors


if __name__ == "__main__":
    print(unavailable_reason() or "emulation available", file=sys.stderr)
