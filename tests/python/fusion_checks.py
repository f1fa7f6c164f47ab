"""Checks shared by the fusion tests (test_fusion.py, test_fusion_fuzz.py):
bit-for-bit comparison of results, and structural checks of a fused graph
read from its MLIR text and report()."""
import re
from collections import Counter

import numpy as np

from backend_checks import assert_close_to_scale

import tilefuse
from tilefuse import _pytree

KINDS = {"pointwise", "reduction", "matmul", "library"}
GENERATORS = {"full", "iota", "constant"}
REDUCTIONS = {"reduce_sum", "reduce_max", "reduce_min", "argmax"}
# Ops the pass may recompute in several kernels (FuseOps.cpp: views and
# isCheapToRecompute); every other op with more than one element is computed
# by exactly one kernel (or library call).
VIEWS = {"broadcast_in_dim", "reshape", "transpose", "slice"}
CHEAP = VIEWS | {"concat", "cast", "select", "eq", "ne", "lt", "le", "gt", "ge", "add",
                 "sub", "mul", "neg", "abs", "maximum", "minimum"}
LIBRARY = {"matmul", "gather", "scatter_add", "attention", "attention_grad"}
# A reshape between kernels and matmuls shares its operand's buffer: no
# kernel, no report row.
BUFFER_VIEWS = {"reshape"}


def flat(x):
    leaves, _ = _pytree.flatten(x if isinstance(x, (list, tuple, dict)) else [x])
    return [np.asarray(v) for v in leaves]


def assert_bit_identical(got, want, what=""):
    """Same structure, dtypes, shapes and bytes."""
    g, w = flat(got), flat(want)
    assert len(g) == len(w), f"{what}: {len(g)} results vs {len(w)} unfused"
    for i, (a, b) in enumerate(zip(g, w)):
        assert a.dtype == b.dtype, f"{what}: result {i} is {a.dtype}, unfused {b.dtype}"
        assert a.shape == b.shape, f"{what}: result {i} has shape {a.shape}, unfused {b.shape}"
        if np.ascontiguousarray(a).tobytes() != np.ascontiguousarray(b).tobytes():
            x = np.ascontiguousarray(a).reshape(-1).view(np.uint8).reshape(a.size, -1)
            y = np.ascontiguousarray(b).reshape(-1).view(np.uint8).reshape(b.size, -1)
            bad = np.flatnonzero((x != y).any(1))
            at = np.unravel_index(bad[0], a.shape) if a.ndim else ()
            raise AssertionError(
                f"{what}: result {i} ({a.dtype}{list(a.shape)}) differs from the unfused "
                f"graph in {len(bad)} element(s); first at {[int(k) for k in at]}: "
                f"fused {a[at]!r}, unfused {b[at]!r}")


def entry_body(text, name=None):
    """Lines of one function of `text` (the first, or the one called `name`)."""
    lines = text.splitlines()
    start = None
    for i, line in enumerate(lines):
        m = re.match(r"\s*func\.func (?:private )?@([\w$.]+)\(", line)
        if m and (name is None or m.group(1) == name):
            start = i
            break
    assert start is not None, f"no function {name} in\n{text}"
    body = []
    for line in lines[start + 1:]:
        if re.match(r"^  }\s*$", line):
            break
        body.append(line)
    return body


_OP = re.compile(r"=\s*graph\.(\w+)\b")


def numel(type_text):
    m = re.search(r"tensor<([^>]*)>", type_text)
    dims = m.group(1).split("x")[:-1]
    return int(np.prod([int(d) for d in dims])) if dims else 1


def ops_with_sizes(lines):
    """(op kind, result numel) of the graph ops on `lines` (fusion and yield
    excluded); the result type is the last tensor type on the line."""
    out = []
    for line in lines:
        m = _OP.search(line)
        if not m or m.group(1) in ("fusion",):
            continue
        types = re.findall(r"tensor<[^>]*>", line)
        out.append((m.group(1), numel(types[-1])))
    return out


def lowered_ops(graph, target="cpu"):
    """(kind, numel) of the primitive ops of `graph`'s entry function as the
    fusion pass receives it for `target` (attention recognised, decomposed,
    canonicalized, CSE'd; attention written out where the target has no
    fused kernels)."""
    lowered = graph._graph.primitive(target)
    return ops_with_sizes(entry_body(lowered.mlir(), lowered.entry))


def check_structure(fused):
    """Invariants of a fused entry function: only kernels, library calls and
    generators at the top level; report() agrees with the IR; kernels hold no
    library call unless they are 'matmul' epilogue kernels."""
    text = fused.mlir()
    rows = fused.report()
    top = []
    depth = 0
    for line in entry_body(text, fused._graph.entry):
        if depth == 0:
            m = _OP.search(line)
            if m:
                top.append(m.group(1))
        depth += line.count("{") - line.count("}")
    for op in top:
        assert op == "fusion" or op in LIBRARY | GENERATORS | BUFFER_VIEWS, (
            f"graph.{op} outside every kernel in the fused function")
    assert len(rows) == sum(1 for op in top if op not in GENERATORS | BUFFER_VIEWS), (
        f"report() has {len(rows)} rows for {top}")
    for r in rows:
        assert r["kind"] in KINDS, r
        assert r["ops"], f"empty kernel {r}"
        assert not (set(r["ops"]) & GENERATORS), f"report lists a generator: {r}"
        if r["kind"] == "library":
            assert len(r["ops"]) == 1 and r["ops"][0] in LIBRARY, r
        elif r["kind"] == "matmul":
            assert "matmul" in r["ops"], r
        else:
            assert not set(r["ops"]) & LIBRARY, f"a library call inside a {r['kind']} kernel: {r}"
            if r["kind"] == "reduction":
                assert set(r["ops"]) & REDUCTIONS, f"a reduction kernel without a reduction: {r}"
            else:
                assert not set(r["ops"]) & REDUCTIONS, f"a reduction in a pointwise kernel: {r}"
                assert r["reduced"] == (), f"a pointwise kernel with reduced dims: {r}"
    # Constants and fills are recomputed inside the kernels that read them,
    # never passed in, but for the streams of random ops (0-d i64 fills):
    # those are inputs so that kernels differing only in their stream are
    # one kernel. Every kernel result is read outside its kernel.
    lines = top_level(entry_body(text, fused._graph.entry))
    generated = set()
    for line in lines:
        m = re.match(r"\s*(%\w+) = graph\.(\w+)", line)
        stream = re.match(r"\s*%\w+ = graph\.full \S+ : tensor<i64>$", line)
        if m and m.group(2) in GENERATORS and not stream:
            generated.add(m.group(1))
        m = re.match(r"\s*%[\w:]+ = graph\.fusion \"(\w+)\"\(([^)]*)\)", line)
        if m:
            passed = generated & set(re.findall(r"%\w+", m.group(2)))
            assert not passed, f"{m.group(1)} takes generator results {sorted(passed)} as inputs"
    dead = dead_kernel_results(fused)
    assert not dead, f"kernel results {dead} are never read outside their kernel"


def check_coverage(fused, source_ops, what=""):
    """Every op kind of the unfused lowered function is computed by some
    kernel (or library call) and no kernel computes a kind the source does
    not have; an op that is neither cheap nor a 1-element value is computed
    at least once and at most twice (counted per kind and size): once by
    the fuser, once more where rematerialization recomputes a saved value
    in the backward kernel that reads it (passes/Rematerialize.cpp)."""
    rows = fused.report()
    computed = Counter(op for r in rows for op in r["ops"])
    # stop_gradient only marks a value for differentiation; fusion removes it.
    source_kinds = {k for k, _ in source_ops if k not in GENERATORS and k != "stop_gradient"}
    missing = source_kinds - set(computed)
    assert not missing, f"{what}: ops {sorted(missing)} of the unfused graph are in no kernel"
    extra = set(computed) - source_kinds
    assert not extra, f"{what}: kernels compute {sorted(extra)}, which the unfused graph has not"
    fused_ops = ops_with_sizes(entry_body(fused.mlir(), fused._graph.entry))
    once = lambda ops: Counter((k, n) for k, n in ops
                               if k not in CHEAP and k not in GENERATORS and n > 1
                               and k != "stop_gradient")
    fused_counts, source_counts = once(fused_ops), once(source_ops)
    lost = source_counts - fused_counts
    repeated = Counter({k: n for k, n in fused_counts.items() if n > 2 * source_counts[k]})
    assert not lost and not repeated, (
        f"{what}: expensive ops lost: {lost}; computed more than twice as often as in the "
        f"unfused graph: {repeated} (unfused {source_counts})")


def top_level(lines):
    """The lines of a function body outside every kernel body (MLIR numbers
    the values of an isolated region on its own, so names inside may repeat
    names outside)."""
    out, depth = [], 0
    for line in lines:
        if depth == 0:
            out.append(line)
        depth += line.count("{") - line.count("}")
    return out


def dead_kernel_results(fused):
    """Fusion results (%N or %N#i) that nothing outside the kernel reads."""
    top = top_level(entry_body(fused.mlir(), fused._graph.entry))
    dead = []
    for i, line in enumerate(top):
        m = re.match(r"\s*(%\w+)(?::(\d+))? = graph\.fusion", line)
        if not m:
            continue
        name, count = m.group(1), m.group(2)
        names = [name] if count is None else [f"{name}#{k}" for k in range(int(count))]
        rest = "\n".join(top[i + 1:])
        for n in names:
            if not re.search(re.escape(n) + r"(?![\w#])", rest):
                dead.append(n)
    return dead


# Compiled kernels against the reference interpreter. The interpreter rounds
# every op's double-precision result to the dtype; kernels compute f32 in
# f32 (polynomial exp/log/tanh/erf, reassociated reductions, BLAS GEMMs), so
# random chains of up to 40 ops with cancellations differ by more than one
# op's rounding. Bound per element: ATOL * max(1, max|want|) + RTOL * |want|.
COMPILED_TOLERANCES = {
    np.dtype(np.float32): (1e-4, 1e-4),
    np.dtype(np.float64): (1e-10, 1e-10),
}


def assert_compiled_close(got, want, what=""):
    """Same structure, dtypes and shapes; floats within COMPILED_TOLERANCES
    (NaN and infinities at the same places), everything else identical."""
    g, w = flat(got), flat(want)
    assert len(g) == len(w), f"{what}: {len(g)} results vs {len(w)} interpreted"
    for i, (a, b) in enumerate(zip(g, w)):
        assert a.dtype == b.dtype, f"{what}: result {i} is {a.dtype}, interpreted {b.dtype}"
        assert a.shape == b.shape, f"{what}: result {i} has shape {a.shape}, interpreted {b.shape}"
        if a.dtype not in COMPILED_TOLERANCES:
            if not np.array_equal(a, b):
                bad = np.flatnonzero((a != b).reshape(-1))
                at = np.unravel_index(bad[0], a.shape) if a.ndim else ()
                raise AssertionError(
                    f"{what}: result {i} ({a.dtype}{list(a.shape)}) differs in {len(bad)} "
                    f"element(s); first at {[int(k) for k in at]}: compiled {a[at]!r}, "
                    f"interpreted {b[at]!r}")
            continue
        rtol, atol = COMPILED_TOLERANCES[a.dtype]
        assert_close_to_scale(a, b, rtol, atol, f"{what}: result {i} ({a.dtype}{list(a.shape)})",
                              names=("compiled", "interpreted"))
