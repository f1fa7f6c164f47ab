"""The bad-input corpus (tests/corpus) run through every command-line tool.

* Every tests/corpus/mlir/*.mlir file goes through tilefuse-opt (as parsed,
  --tilefuse-fused, --emit=llvm, --emit=cuda) and tilefuse-compile. No tool
  may die of a signal or print a crash report; a file marked `error` is
  refused with its expected message (and tilefuse-compile writes nothing);
  a file marked `ok` compiles, and its artifact, run by tilefuse-run on
  seeded inputs, gives the reference interpreter's results.
* Every tests/corpus/npy/*.npy file is given to tilefuse-run as the input of
  an f32[4, 3] model; manifest.json says how each must be answered.
* Damaged copies of a freshly compiled artifact (truncated, bytes flipped
  with the checksum left stale, bytes of the payload flipped with the
  checksum repaired) are refused with a one-line reason or give the right
  answer; never a signal, a hang or a different answer.

The expectation syntax of the .mlir files is described in
tests/corpus/README.md.
"""
import json
import os
import random
import re
import shutil
import struct
import subprocess
import zlib

import numpy as np
import pytest

_TOOLS = ("tilefuse-opt", "tilefuse-compile", "tilefuse-run")
pytestmark = pytest.mark.skipif(
    any(shutil.which(t) is None for t in _TOOLS),
    reason="tilefuse-opt, tilefuse-compile and tilefuse-run must be on PATH "
           "(the ctest run puts build/bin there)")

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_CORPUS = os.path.join(_REPO, "tests", "corpus")
_MLIR_DIR = os.path.join(_CORPUS, "mlir")
_NPY_DIR = os.path.join(_CORPUS, "npy")

_CRASH_MARKERS = ("Stack dump", "LLVM ERROR", "terminate called", "Segmentation",
                  "std::bad_alloc", "PLEASE submit a bug report",
                  "Inconsistency detected by ld.so")
_TIMEOUT = 120
_COMMAND_NAMES = ("opt", "fused", "llvm", "cuda", "compile")


def _commands(src, out):
    """The five tool invocations every corpus file goes through, by name."""
    return {
        "opt": ["tilefuse-opt", src],
        "fused": ["tilefuse-opt", "--tilefuse-fused", src],
        "llvm": ["tilefuse-opt", "--emit=llvm", src],
        "cuda": ["tilefuse-opt", "--emit=cuda", "--target=cuda:sm_90", src],
        "compile": ["tilefuse-compile", src, "--target=cpu", "-o", out],
    }


_EXPECT = re.compile(rb"^// EXPECT(?:\(([a-z, ]+)\))?: (ok|error (.+))$")


def _expectations(data, name):
    """{command name: ("ok", None) or ("error", substring)} from the
    `// EXPECT: ...` first line and the optional `// EXPECT(cmd,...): ...`
    lines that override it for some commands."""
    lines = data.split(b"\n")
    first = _EXPECT.match(lines[0].rstrip(b"\r"))
    assert first and first.group(1) is None, \
        f"{name}: the first line must be '// EXPECT: error <substring>' or '// EXPECT: ok'"

    def one(m):
        return ("ok", None) if m.group(2) == b"ok" else ("error", m.group(3).decode())

    exp = {c: one(first) for c in _COMMAND_NAMES}
    for line in lines[1:]:
        m = _EXPECT.match(line.rstrip(b"\r"))
        if m and m.group(1):
            for c in m.group(1).decode().split(","):
                c = c.strip()
                assert c in exp, f"{name}: unknown command '{c}' in {line!r}"
                exp[c] = one(m)
    return exp


def _run(args, timeout=_TIMEOUT):
    return subprocess.run(args, capture_output=True, timeout=timeout)


def _text(b):
    return b.decode("utf-8", "replace")


def _crash_problems(out):
    """Why `out` (a CompletedProcess) looks like a crash, or []."""
    problems = []
    if out.returncode < 0:
        problems.append(f"killed by signal {-out.returncode}")
    err = _text(out.stderr)
    problems += [f"crash marker {m!r} in stderr" for m in _CRASH_MARKERS if m in err]
    return problems


def _describe(args, out):
    return (f"$ {' '.join(map(str, args))}\n  exit {out.returncode}\n  stderr: "
            + _text(out.stderr)[-1500:].replace("\n", "\n          "))


# -- reference comparison ----------------------------------------------------

_NP_DTYPES = {"f32": np.float32, "f64": np.float64, "f16": np.float16, "i32": np.int32,
              "i64": np.int64, "i1": np.bool_}


def _seeded_inputs(graph, name):
    """Deterministic inputs for the graph's arguments: normal floats,
    nonzero integers in [-20, 20] (so an integer division never divides by
    zero and sees both signs), random booleans."""
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    args = []
    for dtype, shape in graph.inputs:
        assert dtype in _NP_DTYPES, f"no input generator for {dtype}"
        if dtype == "i1":
            a = rng.integers(0, 2, size=shape).astype(np.bool_)
        elif dtype.startswith("i"):
            a = rng.integers(1, 21, size=shape) * rng.choice([-1, 1], size=shape)
            a = a.astype(_NP_DTYPES[dtype])
        else:
            a = rng.standard_normal(shape).astype(_NP_DTYPES[dtype])
        args.append(a)
    return args


def _mismatch(got, want, what):
    """A description of how `got` differs from `want`, or None."""
    want = np.asarray(want)
    if got.shape != want.shape:
        return f"{what}: shape {got.shape}, the interpreter's is {want.shape}"
    if np.issubdtype(want.dtype, np.floating):
        if not np.issubdtype(got.dtype, np.floating):
            return f"{what}: dtype {got.dtype}, the interpreter's is {want.dtype}"
        try:
            np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64),
                                       rtol=1e-5, atol=1e-6, equal_nan=True)
        except AssertionError as e:
            return f"{what}: {e}"
        return None
    if got.dtype != want.dtype:
        return f"{what}: dtype {got.dtype}, the interpreter's is {want.dtype}"
    if not np.array_equal(got, want):
        bad = np.argwhere(got != want)[:5].tolist()
        return (f"{what}: differs at {bad}: got {[got[tuple(i)] for i in bad]}, "
                f"want {[want[tuple(i)] for i in bad]}")
    return None


def _compare_saved(folder, want):
    """Problems with the result<i>.npy files in `folder` against `want`."""
    problems = []
    saved = sorted(f for f in os.listdir(folder) if re.fullmatch(r"result\d+\.npy", f))
    if len(saved) != len(want):
        return [f"saved {len(saved)} results, the interpreter gives {len(want)}"]
    for i, w in enumerate(want):
        m = _mismatch(np.load(os.path.join(folder, f"result{i}.npy")), w, f"result {i}")
        if m:
            problems.append(m)
    return problems


# -- the .mlir corpus --------------------------------------------------------

_MLIR_FILES = sorted(f for f in os.listdir(_MLIR_DIR) if f.endswith(".mlir")) \
    if os.path.isdir(_MLIR_DIR) else []
_ZERO_BYTES = "zero-byte-file"


def test_the_mlir_corpus_is_there():
    assert len(_MLIR_FILES) >= 20, _MLIR_FILES


@pytest.mark.parametrize("name", _MLIR_FILES + [_ZERO_BYTES])
def test_mlir_corpus_file(name, tmp_path):
    if name == _ZERO_BYTES:
        # A truly empty file cannot carry an EXPECT line: it is answered
        # as empty.mlir (comments only) is.
        src = tmp_path / "zero.mlir"
        src.write_bytes(b"")
        with open(os.path.join(_MLIR_DIR, "empty.mlir"), "rb") as f:
            exp = _expectations(f.read(), name)
    else:
        src = os.path.join(_MLIR_DIR, name)
        with open(src, "rb") as f:
            exp = _expectations(f.read(), name)
    out_tfa = tmp_path / "out.tfa"
    problems = []
    for cmd, args in _commands(str(src), str(out_tfa)).items():
        if out_tfa.exists():
            out_tfa.unlink()
        try:
            out = _run(args)
        except subprocess.TimeoutExpired:
            problems.append(f"[{cmd}] timed out after {_TIMEOUT} s: $ {' '.join(args)}")
            continue
        why = _crash_problems(out)
        kind, substring = exp[cmd]
        err = _text(out.stderr)
        if kind == "error":
            if out.returncode == 0:
                why.append("exit 0, but the file must be refused")
            if substring not in err:
                why.append(f"stderr lacks the expected {substring!r}")
            if cmd == "compile" and out_tfa.exists():
                why.append("left an output file behind")
        else:
            if out.returncode != 0:
                why.append(f"exit {out.returncode}, but the file must be accepted")
            elif cmd == "compile":
                why += _run_ok_artifact(src, out_tfa, tmp_path, name)
        if why:
            problems.append(f"[{cmd}] " + "; ".join(why) + "\n" + _describe(args, out))
    assert not problems, f"{name}:\n" + "\n".join(problems)


def _run_ok_artifact(src, tfa, tmp_path, name):
    """Runs a compiled `ok` file on seeded inputs; problems, or []."""
    import tilefuse
    with open(src, "rb") as f:
        graph = tilefuse.parse(f.read().decode())
    args = _seeded_inputs(graph, name)
    files = []
    for i, a in enumerate(args):
        files.append(str(tmp_path / f"in{i}.npy"))
        np.save(files[-1], a)
    want = graph.interpret(*args)
    if not isinstance(want, tuple):
        want = (want,)
    save = tmp_path / "saved"
    run = ["tilefuse-run", str(tfa), f"--save={save}"]
    if files:
        run.append("--inputs=" + ",".join(files))
    try:
        out = _run(run)
    except subprocess.TimeoutExpired:
        return [f"tilefuse-run timed out: $ {' '.join(run)}"]
    why = _crash_problems(out)
    if out.returncode != 0:
        why.append(f"tilefuse-run exit {out.returncode}")
    else:
        found = _compare_saved(save, want)
        if found:
            why.append("SILENT WRONG ANSWER: the compiled result differs from the interpreter's: "
                       + "; ".join(found))
    if why:
        why[-1] += "\n" + _describe(run, out)
    return why


# -- the .npy corpus ---------------------------------------------------------

with open(os.path.join(_NPY_DIR, "manifest.json")) as _f:
    _MANIFEST = json.load(_f)

_NEG_MODEL = """
func.func @f(%x: tensor<4x3xf32>) -> tensor<4x3xf32> {
  %0 = graph.neg %x : tensor<4x3xf32>
  return %0 : tensor<4x3xf32>
}
"""


@pytest.fixture(scope="module")
def neg_artifact(tmp_path_factory):
    """The f32[4, 3] -> -x artifact the .npy corpus is fed to."""
    d = tmp_path_factory.mktemp("neg")
    (d / "neg.mlir").write_text(_NEG_MODEL)
    out = _run(["tilefuse-compile", str(d / "neg.mlir"), "--target=cpu", "-o", str(d / "neg.tfa")])
    assert out.returncode == 0, _text(out.stderr)
    return d / "neg.tfa"


def test_every_npy_file_is_in_the_manifest():
    on_disk = sorted(f for f in os.listdir(_NPY_DIR) if f.endswith(".npy"))
    assert on_disk == sorted(_MANIFEST["files"]), \
        "tests/corpus/npy and its manifest.json list different files"


@pytest.mark.parametrize("name", sorted(_MANIFEST["files"]))
def test_npy_corpus_file(name, neg_artifact, tmp_path):
    exp = _MANIFEST["files"][name]
    path = os.path.join(_NPY_DIR, name)
    save = tmp_path / "saved"
    args = ["tilefuse-run", str(neg_artifact), f"--inputs={path}", f"--save={save}"]
    out = _run(args, timeout=30)
    why = _crash_problems(out)
    if "error" in exp:
        if out.returncode != 1 or exp["error"] not in _text(out.stderr):
            why.append(f"expected exit 1 and {exp['error']!r} in stderr")
        if save.exists() and os.listdir(save):
            why.append(f"saved {os.listdir(save)} although the input was refused")
    else:
        want = np.asarray(exp["ok"], np.float32)
        # The manifest's answer is numpy's answer for the file.
        np.testing.assert_array_equal(want, -np.load(path))
        if out.returncode != 0:
            why.append("expected exit 0")
        else:
            why += _compare_saved(save, [want])
    assert not why, "; ".join(why) + "\n" + _describe(args, out)


# -- damaged artifacts -------------------------------------------------------

# The artifact layout (runtime/Artifact.cpp): "TFARTIFT" | u32 version |
# u64 payload byte count | u64 checksum of the payload | payload.
_HEAD = 8 + 4 + 8 + 8
_FNV_PRIME = 1099511628211
# FNV-1a, 64-bit (runtime/ProgramIO.cpp), with the standard offset basis.
_FNV_BASIS = 14695981039346656037


def _fnv1a64(data):
    h = _FNV_BASIS
    for b in data:
        h = ((h ^ b) * _FNV_PRIME) & 0xFFFFFFFFFFFFFFFF
    return h


_SMALL_MODEL = """
func.func @loss(%w: tensor<16x8xf32>, %x: tensor<4x16xf32>) -> (tensor<4x8xf32>, tensor<f32>) {
  %0 = graph.matmul %x, %w : (tensor<4x16xf32>, tensor<16x8xf32>) -> tensor<4x8xf32>
  %1 = graph.tanh %0 : tensor<4x8xf32>
  %2 = graph.reduce_sum %1 {dims = array<i64: 0, 1>} : (tensor<4x8xf32>) -> tensor<f32>
  return %1, %2 : tensor<4x8xf32>, tensor<f32>
}
"""


def _layout(data):
    """[(start, end, field)] of the artifact's payload, as writeArtifact
    lays it out, so a failure names the field a damaged byte is in."""
    fields, pos = [], _HEAD

    def u64(name):
        nonlocal pos
        fields.append((pos, pos + 8, name))
        pos += 8
        return struct.unpack_from("<Q", data, pos - 8)[0]

    def string(name):
        nonlocal pos
        n = u64(f"length of {name}")
        fields.append((pos, pos + n, name))
        pos += n
        return data[pos - n:pos]

    string("the target")
    for _ in range(u64("the CPU feature count")):
        string("a CPU feature name")
    string("the program (it has its own checksum)")
    for _ in range(u64("the kernel count")):
        kernel = string("a kernel name").decode()
        string(f"the kernel code {kernel}")
        u64(f"the hash of {kernel}'s code")
    string("the graph text")
    string("the metadata")
    assert pos == len(data), "the artifact layout is not the one this test knows"
    return [(0, 8, "the magic"), (8, 12, "the version"), (12, 20, "the payload size"),
            (20, 28, "the checksum")] + fields


def _field(layout, pos):
    return next((name for start, end, name in layout if start <= pos < end), "?")


@pytest.fixture(scope="module")
def good_artifact(tmp_path_factory):
    """A fresh CPU artifact of a small model, its inputs as .npy files, the
    interpreter's results."""
    import tilefuse
    d = tmp_path_factory.mktemp("artifact")
    (d / "m.mlir").write_text(_SMALL_MODEL)
    out = _run(["tilefuse-compile", str(d / "m.mlir"), "--target=cpu", "-o", str(d / "m.tfa")])
    assert out.returncode == 0, _text(out.stderr)
    data = (d / "m.tfa").read_bytes()
    assert data[:8] == b"TFARTIFT"
    size, stored = struct.unpack_from("<QQ", data, 12)
    assert size == len(data) - _HEAD
    assert _fnv1a64(data[_HEAD:]) == stored, "the artifact's checksum is no FNV-1a-64 of its payload"
    rng = np.random.default_rng(7)
    args = [rng.standard_normal((16, 8)).astype(np.float32),
            rng.standard_normal((4, 16)).astype(np.float32)]
    files = []
    for i, a in enumerate(args):
        files.append(str(d / f"in{i}.npy"))
        np.save(files[-1], a)
    want = tilefuse.parse(_SMALL_MODEL).interpret(*args)
    # The undamaged artifact gives the interpreter's answer.
    problems = _run_variant(d / "m.tfa", files, want, d / "good_out")
    assert problems == "accepted", problems
    return {"dir": d, "data": data, "inputs": files, "want": want,
            "layout": _layout(data)}


def _run_variant(path, inputs, want, save):
    """Runs a (damaged) artifact: "refused", "accepted", or a problem."""
    args = ["tilefuse-run", str(path), "--inputs=" + ",".join(inputs), f"--save={save}"]
    try:
        out = _run(args, timeout=30)
    except subprocess.TimeoutExpired:
        return f"HANG (over 30 s): $ {' '.join(args)}"
    why = _crash_problems(out)
    err = _text(out.stderr).strip()
    if out.returncode == 0:
        found = _compare_saved(save, want)
        if found:
            why.append("SILENT WRONG ANSWER: " + "; ".join(found))
    elif out.returncode > 0 and (not err.startswith("tilefuse-run: ") or "\n" in err):
        why.append("refused without a one-line reason of its own")
    if why:
        return "; ".join(why) + "\n" + _describe(args, out)
    return "accepted" if out.returncode == 0 else "refused"


def _check_variants(good, variants, kind):
    """Runs every (label, bytes) variant; fails with the counts and the
    problems if any is answered by a signal, a hang, a message that is not
    one line, or a wrong result."""
    d = good["dir"] / kind
    d.mkdir()
    counts = {"refused": 0, "accepted": 0}
    problems = []
    for i, (label, data) in enumerate(variants):
        path = d / f"v{i}.tfa"
        path.write_bytes(data)
        result = _run_variant(path, good["inputs"], good["want"], d / f"out{i}")
        if result in counts:
            counts[result] += 1
        else:
            problems.append(f"{label}: {result}")
    summary = (f"{kind}: {len(variants)} variants, {counts['refused']} refused, "
               f"{counts['accepted']} accepted with the right answer, {len(problems)} wrong")
    print(summary)
    assert not problems, summary + "\n" + "\n".join(problems)
    return counts


def test_truncated_artifacts(good_artifact):
    data = good_artifact["data"]
    n = len(data)
    cuts = sorted({0, 1, 4, 8, 11, 12, 20, 27, 28, 29, n // 4, n // 2, n - 100, n - 1})
    counts = _check_variants(good_artifact, [(f"cut at {c} of {n}", data[:c]) for c in cuts],
                             "truncated")
    assert counts["accepted"] == 0, "a truncated artifact was run"


def test_artifacts_with_flipped_bytes_and_a_stale_checksum(good_artifact):
    data = good_artifact["data"]
    r = random.Random(20240611)
    variants = []
    # The header's bytes first, then positions anywhere in the file.
    positions = [0, 7, 8, 11, 12, 19, 20, 27] + [r.randrange(len(data)) for _ in range(32)]
    for pos in positions:
        mask = r.randrange(1, 256)
        b = bytearray(data)
        b[pos] ^= mask
        variants.append((f"byte {pos} ({_field(good_artifact['layout'], pos)}) ^= {mask:#04x}, "
                         "checksum stale", bytes(b)))
    counts = _check_variants(good_artifact, variants, "flipped")
    assert counts["accepted"] == 0, "an artifact whose checksum does not match was run"


def test_artifacts_with_flipped_payload_bytes_and_a_repaired_checksum(good_artifact):
    data = good_artifact["data"]
    r = random.Random(20240612 + int(os.environ.get("TILEFUSE_CORPUS_SEED", "0")))
    variants = []
    # TILEFUSE_CORPUS_FLIPS / _SEED: a longer or different run on demand.
    for _ in range(int(os.environ.get("TILEFUSE_CORPUS_FLIPS", "40"))):
        pos = r.randrange(_HEAD, len(data))
        mask = r.randrange(1, 256)
        b = bytearray(data)
        b[pos] ^= mask
        struct.pack_into("<Q", b, 20, _fnv1a64(b[_HEAD:]))
        variants.append((f"payload byte {pos} ({_field(good_artifact['layout'], pos)}) "
                         f"^= {mask:#04x}, checksum repaired", bytes(b)))
    _check_variants(good_artifact, variants, "repaired")
