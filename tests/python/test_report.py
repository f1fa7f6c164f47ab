"""report() of compiled and loaded functions: still the list of dicts, one
per step, but printed as a table (every kernel, a totals line; profiled:
time, GB/s and % of a numpy copy), and report(profile=True) refuses to
answer without timings instead of leaving the columns out."""
import re

import numpy as np
import pytest

import tilefuse
import tilefuse.functional as F
from tilefuse import runtime


def _mlp(x, w1, b1, w2):
    return F.softmax(F.relu(x @ w1 + b1) @ w2, -1)


def _mlp_args(rng):
    return [rng.standard_normal(s).astype(np.float32) for s in ((32, 24), (24, 40), (40,),
                                                               (40, 8))]


def _table_lines(report):
    return str(report).splitlines()


def _total_line(report):
    (line,) = [l for l in _table_lines(report) if l.split()[:1] == ["total"]]
    return line


def test_report_is_the_rows_and_prints_them_as_a_table(rng):
    args = _mlp_args(rng)
    fn = tilefuse.compile(_mlp, *args, device="cpu")
    report = fn.report()
    rows = fn._exe.kernels()
    assert isinstance(report, list) and list(report) == rows  # the same data
    assert repr(report) == str(report)
    lines = _table_lines(report)
    assert lines[0] == f"{len(rows)} steps on cpu"
    header = lines[1].split()
    assert header[:4] == ["#", "kernel", "kind", "fused"] and "launch" in header
    body = lines[3:3 + len(rows)]
    for i, (line, row) in enumerate(zip(body, rows)):
        cells = line.split()
        assert cells[:3] == [str(i), row["name"], row["kind"]], line
        if "grid" in row:
            assert f"grid {row['grid']} x block {row['block']}" in line
        if "shape" in row:
            _, m, n, k = row["shape"]
            assert f"m{m} n{n} k{k}" in line
    # Columns line up: every row's kind starts where the header's does.
    col = lines[1].index("kind")
    assert all(line[col:].split()[0] == row["kind"] for line, row in zip(body, rows))
    total = _total_line(report)
    kinds = {}
    for r in rows:
        kinds[r["kind"]] = kinds.get(r["kind"], 0) + 1
    assert f"{len(rows)} steps" in total
    assert ", ".join(f"{n} {k}" for k, n in sorted(kinds.items())) in total
    assert "time" not in lines[1] and "GB/s" not in lines[1]


def test_totals_line_sums_the_bytes():
    x = np.ones((4, 8), np.float32)
    fn = tilefuse.compile(lambda x: F.relu(x) * 2, x, device="cpu")
    (row,) = fn.report()
    assert row["bytes"] == 2 * x.nbytes  # reads x, writes the result
    assert re.search(r"total\s+1 step\s+1 pointwise\s+256 B", _total_line(fn.report()))


def test_fused_ops_are_shortened_and_counted():
    ops = ["graph.broadcast_in_dim", "graph.add", "graph.add", "graph.maximum"] + \
        [f"graph.op{i}" for i in range(30)]
    report = runtime.Report([{"name": "k0", "kind": "pointwise", "ops": ops, "bytes": 12,
                              "grid": 2, "block": 64}])
    line = _table_lines(report)[3]
    assert "broadcast_in_dim add x2 maximum op0" in line
    shown = len(re.search(r"maximum (.*?) \+(\d+) more", line).group(1).split()) + 3
    assert int(re.search(r"\+(\d+) more", line).group(1)) == 4 + 30 - 1 - shown
    assert "graph." not in line


def test_cuda_rows_show_registers_and_spills():
    """CUDA reports (rows with NVRTC's resources; no GPU needed to render)."""
    rows = [{"name": "main_kernel0", "kind": "pointwise", "ops": ["graph.add"], "bytes": 3000,
             "grid": 4, "block": 256, "threads": 128, "registers": 40, "spill_stores": 8,
             "spill_loads": 4, "seconds": 2e-6, "gb_per_s": 1.5},
            {"name": "gemm", "kind": "matmul", "ops": ["graph.matmul"], "bytes": 2_500_000,
             "shape": (2, 64, 32, 16), "seconds": 1e-5, "gb_per_s": 250.0}]
    report = runtime.Report(rows, "cuda", calls=3, copy_label="no copy measured")
    lines = _table_lines(report)
    assert "regs  spill st/ld" in lines[1] and "% copy" not in lines[1]
    assert re.search(r"grid 4 x block 256, 128 thr\s+-\s+40\s+8/4\s", lines[3])
    assert "b2 m64 n32 k16" in lines[4] and "2.5 MB" in lines[4] and "250" in lines[4]
    assert re.search(r"total\s+2 steps\s+1 matmul, 1 pointwise\s+2.5 MB\s+12.0 us\s+209",
                     _total_line(report))
    assert lines[-1] == "% copy: not shown (no copy measured)"


def test_profile_needs_profile_first(rng):
    args = _mlp_args(rng)
    fn = tilefuse.compile(_mlp, *args, device="cpu")
    fn(*args)
    with pytest.raises(tilefuse.CompileError,
                       match=r"call fn\.profile\(\) before the calls you want timed"):
        fn.report(profile=True)
    fn.profile()
    with pytest.raises(tilefuse.CompileError, match=r"no call ran since fn\.profile\(\)"):
        fn.report(profile=True)
    fn(*args)
    fn(*args)
    timed = fn.report(profile=True)
    assert timed.calls == 2 and timed.copy_gb_per_s > 0
    assert all(r["seconds"] > 0 and r["gb_per_s"] > 0 for r in timed)
    lines = _table_lines(timed)
    assert "mean over 2 timed calls" in lines[0]
    for col in ("time/call", "GB/s", "% copy"):
        assert col in lines[1]
    assert any(l.startswith("% copy: of ") and "numpy copy of 64 MiB" in l for l in lines)
    total = _total_line(timed)
    # The total time is the steps' sum, printed in the time column.
    seconds = sum(r["seconds"] for r in timed)
    assert runtime._human_seconds(seconds) in total
    fn.profile(False)
    with pytest.raises(tilefuse.CompileError, match=r"profile\(False\) switched profiling off"):
        fn.report(profile=True)
    assert list(fn.report()) == fn._exe.kernels()  # the plain report still works


def test_train_step_report(rng):
    params = {"w": rng.standard_normal((6, 3)).astype(np.float32)}
    batch = {"x": rng.standard_normal((5, 6)).astype(np.float32)}
    step = tilefuse.compile_train_step(lambda p, b: ((b["x"] @ p["w"]) ** 2).mean(), params,
                                       batch, tilefuse.optim.SGD(0.1), device="cpu")
    with pytest.raises(tilefuse.CompileError, match="call fn.profile"):
        step.report(profile=True)
    step.profile()
    step(batch)
    text = str(step.report(profile=True))
    for row in step.compiled.report():
        assert row["name"] in text


def test_loaded_function_report(rng, tmp_path):
    args = _mlp_args(rng)
    fn = tilefuse.compile(_mlp, *args, device="cpu")
    path = tmp_path / "mlp.tfa"
    fn.graph.export(path)
    loaded = tilefuse.load(path)
    report = loaded.report()
    assert isinstance(report, runtime.Report)
    assert [r["name"] for r in report] == [r["name"] for r in fn.report()]
    text = str(report)
    for row in report:
        assert row["name"] in text
    assert f"{len(report)} steps" in _total_line(report)
    with pytest.raises(tilefuse.CompileError, match=r"call fn\.profile\(\) before"):
        loaded.report(profile=True)
    loaded.profile()
    loaded(*args)
    timed = loaded.report(profile=True)
    assert timed.calls == 1 and all(r["seconds"] > 0 for r in timed)
    assert "GB/s" in _table_lines(timed)[1]


def test_rows_name_the_traced_source_lines(tmp_path):
    """Every step knows the user's lines it came from (file:line, backward
    kernels the forward line), and keeps them through an artifact."""
    import inspect
    import numpy as np
    import tilefuse
    import tilefuse.functional as F

    x = np.ones((8, 4), np.float32)
    w = np.ones((4, 3), np.float32)

    def f(x, w):
        h = x @ w
        return F.relu(h).sum()
    line = inspect.getsourcelines(f)[1]
    g = tilefuse.trace(f, x, w)
    rows = g.compile("cpu").report()
    where = {r["name"]: r["source"] for r in rows}
    assert all(src for src in where.values()), where
    assert any(f"{__file__}:{line + 1}" in src for src in where.values()), where
    assert any(f"{__file__}:{line + 2}" in src for src in where.values()), where
    assert "test_report.py:" in str(rows)
    back = g.value_and_grad(wrt=(1,)).compile("cpu").report()
    gemms = [r for r in back if r["name"] == "gemm"]
    assert len(gemms) == 2 and all(f"{__file__}:{line + 1}" in r["source"] for r in gemms), back
    path = tmp_path / "f.tfa"
    g.export(path)
    loaded = tilefuse.load(path).report()
    assert [r["source"] for r in loaded] == [r["source"] for r in rows]
