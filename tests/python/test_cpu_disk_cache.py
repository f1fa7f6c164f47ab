"""The on-disk cache of CPU compiles (frontend/DiskCache.cpp): a process
that compiles a graph another process compiled before loads the machine
code from <TILEFUSE_CACHE_DIR>/cpu instead of running MLIR.

The in-process cache answers a second compile in the same process, so every
case here runs fresh Python processes (each with the test's own tmp_path as
TILEFUSE_CACHE_DIR) and compares what they report:
* a cold run's compile_stages are the whole pipeline (FULL), a warm run's
  are ["disk cache"];
* a warm run computes bit-identical results (the same machine code), and
  both are within 1e-4 of a float64 numpy reference;
* corrupt, truncated, foreign or blocked entries are misses: the compile
  runs, its results are right, and the entry is written again;
* the key covers the input shapes, TILEFUSE_CPU, and the cache can be
  switched off (TILEFUSE_CPU_CACHE=0) or capped (TILEFUSE_CPU_CACHE_MB,
  least recently used first).
"""
import json
import math
import os
import re
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

FULL = ["primitives", "fuse", "tile", "machine code"]
DISK = ["disk cache"]
TOL = 1e-4  # compiled float32 vs the float64 numpy reference

_SCRIPT = textwrap.dedent(r'''
    import json, sys
    import numpy as np
    import tilefuse
    import tilefuse.functional as F
    from tilefuse import optim

    out, kind = sys.argv[1], sys.argv[2]

    def mlp_args(batch):
        rng = np.random.default_rng(7)
        x = rng.standard_normal((batch, 32)).astype(np.float32)
        w1, w2, w3 = (rng.standard_normal((32, 32)).astype(np.float32) * 0.2 for _ in range(3))
        b1, b2 = (rng.standard_normal(32).astype(np.float32) * 0.1 for _ in range(2))
        return x, w1, b1, w2, b2, w3

    def mlp(x, w1, b1, w2, b2, w3):
        # The same Linear+GELU block twice (different weights, same shapes):
        # one kernel's code runs for both (a kernel alias).
        h = F.gelu(F.linear(x, w1, b1)) + x
        h = F.gelu(F.linear(h, w2, b2)) + h
        z = h @ w3
        p = F.softmax(z, -1)
        return p, (p * z).sum(-1)

    def describe(fn, info):
        exe = fn._exe
        info["stages"] = [name for name, _ in exe.compile_stages]
        info["cache_hit"] = bool(exe.cache_hit)
        rows = fn.report()
        info["report"] = [dict(r) for r in rows]
        info["report_text"] = str(rows)
        info["fused_ir"] = fn.fused_ir
        info["tile_ir"] = fn.tile_ir
        info["memory_plan"] = str(fn.memory_plan())

    info = {}
    if kind.startswith("mlp"):
        batch = int(kind.split(":")[1]) if ":" in kind else 8
        args = mlp_args(batch)
        fn = tilefuse.compile(mlp, *args, device="cpu")
        describe(fn, info)
        results = list(fn(*args))
        fn.profile(True)
        fn(*args)
        info["profiled"] = [r["name"] for r in fn.report(profile=True)]
        if kind.startswith("mlp_again"):
            # The same graph once more in this process, past its own cache:
            # loaded from disk beside the code already linked.
            tilefuse.clear_cache()
            again = tilefuse.compile(mlp, *args, device="cpu")
            info["again_stages"] = [name for name, _ in again._exe.compile_stages]
            results += list(again(*args))
    elif kind == "train":
        rng = np.random.default_rng(3)
        params = {"w1": rng.standard_normal((16, 32)).astype(np.float32) * 0.3,
                  "b1": np.zeros(32, np.float32),
                  "w2": rng.standard_normal((32, 32)).astype(np.float32) * 0.3,
                  "b2": np.zeros(32, np.float32),
                  "w3": rng.standard_normal((32, 5)).astype(np.float32) * 0.3}
        batch = {"x": rng.standard_normal((12, 16)).astype(np.float32),
                 "y": rng.integers(0, 5, 12).astype(np.int64)}
        def loss_fn(p, b, seed):
            h = F.gelu(F.linear(b["x"], p["w1"].T, p["b1"]))
            h = F.gelu(F.linear(h, p["w2"].T, p["b2"])) + h
            h = F.dropout(h, 0.1, seed=seed)
            return F.cross_entropy(h @ p["w3"], b["y"])
        step = tilefuse.compile_train_step(loss_fn, params, batch,
                                           optimizer=optim.AdamW(lr=1e-2), device="cpu")
        describe(step._compiled, info)
        losses = [np.asarray(step(batch)) for _ in range(3)]
        after = step.params()
        results = losses + [after[k] for k in sorted(after)]
    else:
        raise SystemExit(f"unknown kind {kind!r}")
    np.savez(out + ".npz", *results)
    with open(out + ".json", "w") as f:
        json.dump(info, f)
''')

# Settings of the caller's environment that would change what is compiled
# or cached; each run sets what it tests.
_CLEARED = ("TILEFUSE_CPU", "TILEFUSE_CPU_CACHE", "TILEFUSE_CPU_CACHE_MB", "TILEFUSE_REMATERIALIZE",
            "TILEFUSE_MEMORY_PLAN", "TILEFUSE_COMPILE_CACHE", "TILEFUSE_PROGRESS")


def _start(cache, out, kind, **settings):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), TILEFUSE_CACHE_DIR=str(cache))
    for name in _CLEARED:
        env.pop(name, None)
    env.update(settings)
    return subprocess.Popen([sys.executable, "-c", _SCRIPT, str(out), kind], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finish(proc, what):
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, (f"{what}: the process failed (exit {proc.returncode})\n"
                                  f"{stdout[-3000:]}\n{stderr[-3000:]}")


def _load(out):
    with open(f"{out}.json") as f:
        info = json.load(f)
    with np.load(f"{out}.npz") as z:
        results = [z[f"arr_{i}"] for i in range(len(z.files))]
    return info, results


class _Runs:
    """Subprocess runs of one test, each writing its results under tmp_path."""

    def __init__(self, tmp_path):
        self.tmp = tmp_path
        self.n = 0

    def out(self):
        self.n += 1
        return self.tmp / f"run{self.n}"

    def __call__(self, cache, what, kind="mlp", **settings):
        out = self.out()
        _finish(_start(cache, out, kind, **settings), what)
        return _load(out)


def _entries(cache):
    folder = os.path.join(str(cache), "cpu")
    if not os.path.isdir(folder):
        return []
    return sorted(os.path.join(folder, n) for n in os.listdir(folder) if n.endswith(".tfa"))


def _temporaries(cache):
    folder = os.path.join(str(cache), "cpu")
    if not os.path.isdir(folder):
        return []
    return sorted(n for n in os.listdir(folder) if ".tmp." in n)


def _only_entry(cache, what):
    entries = _entries(cache)
    assert len(entries) == 1, f"{what}: expected exactly one .tfa in {cache}/cpu, found {entries}"
    return entries[0]


def _assert_stages(info, want, what):
    assert info["stages"] == want, (
        f"{what}: compile_stages {info['stages']}, expected {want} "
        f"({'a disk cache hit' if want == DISK else 'a full compile'})")


def _assert_bitwise(got, want, what):
    assert len(got) == len(want), f"{what}: {len(got)} results, expected {len(want)}"
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == w.dtype and g.shape == w.shape, (
            f"{what}: result {i} is {g.dtype}{list(g.shape)}, expected {w.dtype}{list(w.shape)}")
        bits = f"u{g.itemsize}"
        differ = np.flatnonzero(g.reshape(-1).view(bits) != w.reshape(-1).view(bits))
        assert differ.size == 0, (
            f"{what}: result {i} differs bitwise from the cold run in {differ.size} of {g.size} "
            f"elements, first at flat index {differ[0]}: {g.reshape(-1)[differ[0]]!r} vs "
            f"{w.reshape(-1)[differ[0]]!r}")


def _mlp_reference(batch=8):
    """mlp of the script in float64 numpy, on the same arguments."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((batch, 32)).astype(np.float32)
    w1, w2, w3 = (rng.standard_normal((32, 32)).astype(np.float32) * 0.2 for _ in range(3))
    b1, b2 = (rng.standard_normal(32).astype(np.float32) * 0.1 for _ in range(2))
    x, w1, w2, w3, b1, b2 = (a.astype(np.float64) for a in (x, w1, w2, w3, b1, b2))
    erf = np.vectorize(math.erf)
    gelu = lambda t: 0.5 * t * (1 + erf(t / math.sqrt(2)))  # noqa: E731
    h = gelu(x @ w1.T + b1) + x
    h = gelu(h @ w2.T + b2) + h
    z = h @ w3
    e = np.exp(z - z.max(-1, keepdims=True))
    p = e / e.sum(-1, keepdims=True)
    return [p, (p * z).sum(-1)]


def _assert_mlp_correct(results, what, batch=8):
    want = _mlp_reference(batch)
    assert len(results) >= 2, f"{what}: {len(results)} results, expected 2"
    for i, (g, w) in enumerate(zip(results, want)):
        assert g.shape == w.shape, f"{what}: result {i} shape {g.shape}, expected {w.shape}"
        err = float(np.abs(g.astype(np.float64) - w).max())
        assert err <= TOL * max(1.0, float(np.abs(w).max())), (
            f"{what}: result {i} off the float64 numpy reference by {err:.3g} (> {TOL})")


# ---------------------------------------------------------------------------


def test_cold_then_warm_loads_from_disk_bitwise(tmp_path):
    run, cache = _Runs(tmp_path), tmp_path / "cache"
    cold, cold_results = run(cache, "cold run")
    _assert_stages(cold, FULL, "cold run (empty cache folder)")
    _assert_mlp_correct(cold_results, "cold run")
    entry = _only_entry(cache, "after the cold run")
    # The model repeats a kernel: its entry keeps an alias (the second
    # block's kernel runs the first one's code), which the warm run links.
    with open(entry, "rb") as f:
        assert re.search(rb"mlp_kernel1_\w+ mlp_kernel0_\w+", f.read()), (
            "precondition: the two Linear+GELU blocks no longer compile to one kernel's code "
            "(no alias in the entry); change the model so that aliases are exercised")

    warm, warm_results = run(cache, "warm run")
    _assert_stages(warm, DISK, "warm run (same graph, entry on disk)")
    _assert_bitwise(warm_results, cold_results, "warm run vs cold run")
    assert _entries(cache) == [entry], (
        f"warm run: expected the one entry {entry} unchanged, found {_entries(cache)}")
    assert not _temporaries(cache), f"warm run: temporaries left: {_temporaries(cache)}"

    # Loaded from disk in a process that already linked the same kernels
    # (its own cache cleared): both executables compute the same.
    again, again_results = run(cache, "warm run, compiled twice", kind="mlp_again")
    _assert_stages(again, DISK, "warm run, first compile")
    assert again["again_stages"] == DISK, (
        f"after tilefuse.clear_cache(), the second compile in a process: compile_stages "
        f"{again['again_stages']}, expected {DISK}")
    _assert_bitwise(again_results, cold_results + cold_results,
                    "warm run, both compiles in one process vs cold run")


def test_training_step_warm_from_disk_same_losses(tmp_path):
    run, cache = _Runs(tmp_path), tmp_path / "cache"
    cold, cold_results = run(cache, "cold training step", kind="train")
    _assert_stages(cold, FULL, "cold training step")
    losses = [float(v) for v in cold_results[:3]]
    assert all(np.isfinite(losses)) and losses[2] < losses[0], (
        f"cold training step: losses {losses} are not finite and decreasing")
    _only_entry(cache, "after the cold training step")
    warm, warm_results = run(cache, "warm training step", kind="train")
    _assert_stages(warm, DISK, "warm training step")
    _assert_bitwise(warm_results[:3], cold_results[:3],
                    "warm training step: losses of steps 1-3 vs the cold process")
    _assert_bitwise(warm_results[3:], cold_results[3:],
                    "warm training step: parameters after 3 steps vs the cold process")


def _truncate(data):
    return data[:len(data) // 2]


def _flip_middle(data):
    b = bytearray(data)
    b[len(b) // 2] ^= 0x5A
    return bytes(b)


def _flip_last(data):
    b = bytearray(data)
    b[-1] ^= 0x01
    return bytes(b)


def _flip_header(data):
    b = bytearray(data)
    b[20] ^= 0x01  # in the header (magic, version, size, checksum)
    return bytes(b)


def _garbage(data):
    return np.random.default_rng(5).integers(0, 256, len(data), np.uint8).tobytes()


def _empty(data):
    return b""


@pytest.mark.parametrize("damage", [_truncate, _flip_middle, _flip_last, _flip_header, _garbage,
                                    _empty, "foreign"],
                         ids=["truncated", "flipped_middle", "flipped_last", "flipped_header",
                              "garbage", "empty", "foreign"])
def test_damaged_entry_is_recompiled_and_replaced(tmp_path, damage):
    run, cache = _Runs(tmp_path), tmp_path / "cache"
    name = damage if isinstance(damage, str) else damage.__name__.lstrip("_")
    _, cold_results = run(cache, f"{name}: cold run")
    entry = _only_entry(cache, f"{name}: after the cold run")
    with open(entry, "rb") as f:
        good = f.read()
    if damage == "foreign":
        # A valid entry of another graph (another batch) under this name:
        # checksums pass, the key inside does not.
        other_cache = tmp_path / "other"
        run(other_cache, f"{name}: cold run of batch 4", kind="mlp:4")
        with open(_only_entry(other_cache, f"{name}: batch 4"), "rb") as f:
            bad = f.read()
    else:
        bad = damage(good)
    assert bad != good, f"{name}: the damage did not change the entry"
    with open(entry, "wb") as f:
        f.write(bad)

    info, results = run(cache, f"{name}: run on the damaged entry")
    _assert_stages(info, FULL, f"{name}: run on the damaged entry (a miss)")
    _assert_mlp_correct(results, f"{name}: run on the damaged entry")
    _assert_bitwise(results, cold_results, f"{name}: recompiled vs cold run")
    assert _entries(cache) == [entry], (
        f"{name}: expected the entry {entry} rewritten, found {_entries(cache)}")
    with open(entry, "rb") as f:
        assert f.read() != bad, f"{name}: the damaged entry was not replaced"
    assert not _temporaries(cache), f"{name}: temporaries left: {_temporaries(cache)}"

    info, results = run(cache, f"{name}: run after the rewrite")
    _assert_stages(info, DISK, f"{name}: run after the damaged entry was replaced")
    _assert_bitwise(results, cold_results, f"{name}: warm run after the rewrite vs cold run")


def test_blocked_entry_or_cache_folder_still_compiles(tmp_path):
    run = _Runs(tmp_path)
    cache = tmp_path / "cache"
    _, cold_results = run(cache, "cold run")
    entry = _only_entry(cache, "after the cold run")

    # A folder where the entry should be: nothing to load, nothing written.
    os.remove(entry)
    os.mkdir(entry)
    with open(os.path.join(entry, "keep"), "w") as f:
        f.write("not a cache entry")
    for attempt in ("first", "second"):
        info, results = run(cache, f"folder at the entry's path, {attempt} run")
        _assert_stages(info, FULL, f"folder at the entry's path, {attempt} run")
        _assert_bitwise(results, cold_results, f"folder at the entry's path, {attempt} run")
        assert os.path.isdir(entry), f"folder at the entry's path: {entry} is no longer a folder"
        assert not _temporaries(cache), (
            f"folder at the entry's path, {attempt} run: temporaries left: {_temporaries(cache)}")

    # The cache root, then its cpu folder, a regular file.
    root_file = tmp_path / "root_is_a_file"
    root_file.write_bytes(b"a file, not a folder")
    info, results = run(root_file, "cache root is a regular file")
    _assert_stages(info, FULL, "cache root is a regular file")
    _assert_bitwise(results, cold_results, "cache root is a regular file")
    assert root_file.read_bytes() == b"a file, not a folder", (
        "cache root is a regular file: the file was changed")

    cpu_file_root = tmp_path / "cpu_is_a_file"
    cpu_file_root.mkdir()
    (cpu_file_root / "cpu").write_bytes(b"a file, not a folder")
    info, results = run(cpu_file_root, "<root>/cpu is a regular file")
    _assert_stages(info, FULL, "<root>/cpu is a regular file")
    _assert_bitwise(results, cold_results, "<root>/cpu is a regular file")
    assert (cpu_file_root / "cpu").read_bytes() == b"a file, not a folder", (
        "<root>/cpu is a regular file: the file was changed")


def test_key_covers_shapes_cpu_and_the_switch(tmp_path):
    run, cache = _Runs(tmp_path), tmp_path / "cache"
    _, cold8 = run(cache, "batch 8, cold")
    first = _only_entry(cache, "batch 8, cold")

    info, results4 = run(cache, "batch 4 after batch 8", kind="mlp:4")
    _assert_stages(info, FULL, "batch 4 after batch 8 (another shape is another key)")
    _assert_mlp_correct(results4, "batch 4 after batch 8", batch=4)
    assert len(_entries(cache)) == 2 and first in _entries(cache), (
        f"batch 4 after batch 8: expected 2 entries including {first}, found {_entries(cache)}")
    info, _ = run(cache, "batch 4, warm", kind="mlp:4")
    _assert_stages(info, DISK, "batch 4, warm")
    info, results = run(cache, "batch 8 after batch 4")
    _assert_stages(info, DISK, "batch 8 after batch 4 (its own entry still there)")
    _assert_bitwise(results, cold8, "batch 8 after batch 4 vs cold")

    if os.uname().machine == "x86_64":
        info, results = run(cache, "TILEFUSE_CPU=x86-64-v2, cold", TILEFUSE_CPU="x86-64-v2")
        _assert_stages(info, FULL, "TILEFUSE_CPU=x86-64-v2 after the host CPU's compile")
        _assert_mlp_correct(results, "TILEFUSE_CPU=x86-64-v2")
        assert len(_entries(cache)) == 3, (
            f"TILEFUSE_CPU=x86-64-v2: expected a third entry, found {_entries(cache)}")
        info, v2 = run(cache, "TILEFUSE_CPU=x86-64-v2, warm", TILEFUSE_CPU="x86-64-v2")
        _assert_stages(info, DISK, "TILEFUSE_CPU=x86-64-v2, warm")
        _assert_bitwise(v2, results, "TILEFUSE_CPU=x86-64-v2, warm vs cold")
        info, _ = run(cache, "host CPU after x86-64-v2")
        _assert_stages(info, DISK, "host CPU after x86-64-v2 (its own entry still there)")

    # Off: entries on disk are neither read nor written.
    before = {e: os.stat(e).st_mtime_ns for e in _entries(cache)}
    for attempt in ("first", "second"):
        info, results = run(cache, f"TILEFUSE_CPU_CACHE=0, {attempt} run", TILEFUSE_CPU_CACHE="0")
        _assert_stages(info, FULL, f"TILEFUSE_CPU_CACHE=0 with an entry on disk, {attempt} run")
        _assert_bitwise(results, cold8, f"TILEFUSE_CPU_CACHE=0, {attempt} run")
    after = {e: os.stat(e).st_mtime_ns for e in _entries(cache)}
    assert after == before, (
        f"TILEFUSE_CPU_CACHE=0: the cache folder changed: {before} -> {after}")
    empty = tmp_path / "off"
    for attempt in ("first", "second"):
        info, _ = run(empty, f"TILEFUSE_CPU_CACHE=0, empty folder, {attempt} run",
                      TILEFUSE_CPU_CACHE="0")
        _assert_stages(info, FULL, f"TILEFUSE_CPU_CACHE=0, empty folder, {attempt} run")
    written = [os.path.join(d, f) for d, _, fs in os.walk(empty) for f in fs]
    assert not written, f"TILEFUSE_CPU_CACHE=0: files written: {written}"


def test_zero_capacity_keeps_nothing(tmp_path):
    run, cache = _Runs(tmp_path), tmp_path / "cache"
    folder = cache / "cpu"
    folder.mkdir(parents=True)
    # A temporary left by a writer killed two hours ago goes at the next
    # store; a fresh one (another writer's, still writing) stays.
    stale, fresh = folder / "0123456789abcdef.tfa.tmp.1.2", folder / "fedcba9876543210.tfa.tmp.3.4"
    stale.write_bytes(b"x" * 100)
    fresh.write_bytes(b"y" * 100)
    two_hours_ago = time.time() - 7200
    os.utime(stale, (two_hours_ago, two_hours_ago))
    for attempt in ("first", "second"):
        info, results = run(cache, f"TILEFUSE_CPU_CACHE_MB=0, {attempt} run",
                            TILEFUSE_CPU_CACHE_MB="0")
        _assert_stages(info, FULL, f"TILEFUSE_CPU_CACHE_MB=0, {attempt} run (nothing kept)")
        _assert_mlp_correct(results, f"TILEFUSE_CPU_CACHE_MB=0, {attempt} run")
        assert not _entries(cache), (
            f"TILEFUSE_CPU_CACHE_MB=0, {attempt} run: expected no .tfa, found {_entries(cache)}")
        assert _temporaries(cache) == [fresh.name], (
            f"TILEFUSE_CPU_CACHE_MB=0, {attempt} run: expected only the fresh temporary "
            f"{fresh.name} left (the two-hour-old one removed), found {_temporaries(cache)}")


def test_least_recently_used_entry_goes_first(tmp_path):
    run, cache = _Runs(tmp_path), tmp_path / "cache"
    run(cache, "entry A (batch 8)")
    (a,) = _entries(cache)
    run(cache, "entry B (batch 4)", kind="mlp:4")
    (b,) = [e for e in _entries(cache) if e != a]
    # Entry C's size, from a folder of its own.
    probe = tmp_path / "probe"
    run(probe, "entry C (batch 2), size probe", kind="mlp:2")
    size_c = os.path.getsize(_only_entry(probe, "entry C, size probe"))
    now = time.time()
    os.utime(a, (now - 200, now - 200))
    os.utime(b, (now - 100, now - 100))
    info, _ = run(cache, "entry A loaded (now the most recently used)")
    _assert_stages(info, DISK, "entry A loaded")
    # A filler (recent) makes A + C + filler half of B under 1 MiB, and
    # A + B + C + filler half of B over: storing C under
    # TILEFUSE_CPU_CACHE_MB=1 must drop B, the least recently used, only.
    filler = cache / "cpu" / "filler.tfa"  # counted like an entry
    filler.write_bytes(
        b"\0" * ((1 << 20) - os.path.getsize(a) - size_c - os.path.getsize(b) // 2))
    os.utime(filler, (now + 3600, now + 3600))
    info, _ = run(cache, "entry C stored under a 1 MiB cap", kind="mlp:2",
                  TILEFUSE_CPU_CACHE_MB="1")
    _assert_stages(info, FULL, "entry C, cold")
    names = sorted(os.listdir(cache / "cpu"))
    assert os.path.exists(a) and not os.path.exists(b) and filler.exists() and len(names) == 3, (
        f"1 MiB cap: expected B ({os.path.basename(b)}, least recently used) evicted and A "
        f"({os.path.basename(a)}, loaded last), C and the filler kept; the folder holds {names}")
    info, _ = run(cache, "entry A after the eviction", TILEFUSE_CPU_CACHE_MB="1")
    _assert_stages(info, DISK, "entry A after B was evicted")


def test_warm_executable_reports_like_the_cold_one(tmp_path):
    run, cache = _Runs(tmp_path), tmp_path / "cache"
    cold, _ = run(cache, "cold run")
    warm, _ = run(cache, "warm run")
    _assert_stages(warm, DISK, "warm run")
    names = [r["name"] for r in cold["report"]]
    assert [r["name"] for r in warm["report"]] == names, (
        f"report() on a disk cache hit lists {[r['name'] for r in warm['report']]}, "
        f"the cold run {names}")
    assert sum(r["kind"] != "library" for r in cold["report"]) >= 3, (
        f"precondition: expected at least 3 kernels in the cold report, got {names}")
    for c, w in zip(cold["report"], warm["report"]):
        assert c == w, f"report() row {c['name']}: warm {w}, cold {c}"
    assert warm["report_text"] == cold["report_text"], (
        f"printed report differs:\nwarm:\n{warm['report_text']}\ncold:\n{cold['report_text']}")
    assert warm["profiled"] == names, (
        f"report(profile=True) on a disk cache hit lists {warm['profiled']}, expected {names}")
    for what, marker in (("fused_ir", "graph.fusion"), ("tile_ir", "tile.store")):
        assert marker in cold[what], f"cold run: {what} lacks {marker!r}"
        assert warm[what] == cold[what], (
            f"{what} on a disk cache hit differs from the cold run's "
            f"({len(warm[what])} vs {len(cold[what])} characters)")
    assert warm["memory_plan"] == cold["memory_plan"], (
        f"memory_plan() on a disk cache hit:\n{warm['memory_plan']}\ncold:\n{cold['memory_plan']}")


def test_concurrent_cold_processes_share_one_entry(tmp_path):
    cache = tmp_path / "cache"
    outs = [tmp_path / f"parallel{i}" for i in range(4)]
    procs = [_start(cache, out, "mlp") for out in outs]
    for i, proc in enumerate(procs):
        _finish(proc, f"concurrent process {i}")
    runs = [_load(out) for out in outs]
    for i, (info, results) in enumerate(runs):
        assert info["stages"] in (FULL, DISK), f"concurrent process {i}: stages {info['stages']}"
        _assert_mlp_correct(results, f"concurrent process {i}")
        _assert_bitwise(results, runs[0][1], f"concurrent process {i} vs process 0")
    _only_entry(cache, "after 4 concurrent cold processes")
    assert not _temporaries(cache), (
        f"after 4 concurrent cold processes: temporaries left: {_temporaries(cache)}")
    info, results = _Runs(tmp_path)(cache, "run after the concurrent ones")
    _assert_stages(info, DISK, "run after the concurrent ones")
    _assert_bitwise(results, runs[0][1], "run after the concurrent ones vs process 0")


def test_source_lines_are_part_of_the_key(tmp_path):
    # The Program reports the user's source lines; the same graph traced
    # from other lines (the script edited) must not load the old ones.
    cache = tmp_path / "cache"
    infos = []
    for shift in (0, 2, 0):
        out = tmp_path / f"shift{shift}_{len(infos)}"
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), TILEFUSE_CACHE_DIR=str(cache))
        for name in _CLEARED:
            env.pop(name, None)
        proc = subprocess.run([sys.executable, "-c", "\n" * shift + _SCRIPT, str(out), "mlp"],
                              env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, f"script shifted by {shift} lines failed:\n{proc.stderr[-3000:]}"
        infos.append(_load(out)[0])
    first, shifted, again = infos
    _assert_stages(first, FULL, "the script as written")
    _assert_stages(shifted, FULL, "the script two lines lower (other source lines)")
    _assert_stages(again, DISK, "the script as written, once more")
    lines = [[r.get("source") for r in info["report"]] for info in infos]
    assert lines[0] == lines[2] and lines[0] != lines[1], (
        f"report sources: as written {lines[0]}, two lines lower {lines[1]}, "
        f"as written again {lines[2]}: expected the shifted run's own lines")
    assert len(_entries(cache)) == 2, f"expected one entry per source layout, found {_entries(cache)}"


def test_entry_others_could_write_is_not_loaded(tmp_path):
    # An entry is machine code the process runs: one writable by the group
    # (or anyone else) is a miss, recompiled and written back owner-only.
    run, cache = _Runs(tmp_path), tmp_path / "cache"
    run(cache, "cold run")
    entry = _only_entry(cache, "cold run")
    os.chmod(entry, 0o664)
    info, results = run(cache, "entry writable by the group")
    _assert_stages(info, FULL, "entry writable by the group")
    _assert_mlp_correct(results, "entry writable by the group")
    mode = os.stat(_only_entry(cache, "after the recompile")).st_mode & 0o777
    assert mode & 0o022 == 0, f"the rewritten entry has mode {oct(mode)}: expected no group/other write"
    info, _ = run(cache, "after the rewrite")
    _assert_stages(info, DISK, "the rewritten entry")
