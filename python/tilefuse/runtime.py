"""Running ahead-of-time artifacts (.tfa): needs only the runtime module,
so it works in a runtime-only installation (no compiler) too.

Also what both compiled and loaded functions share: `Report` (the table
report() returns) and state dicts (`save`, `load_state_dict`)."""
import json
import math
import os
import time
import zipfile
from collections.abc import Mapping

import numpy as np

from . import _pytree
from ._runtime import CompileError, load_artifact


# ---------------------------------------------------------------------------
# Reports
# ---------------------------------------------------------------------------

class Report(list):
    """The steps of a compiled or loaded function: a list with one dict per
    kernel or library call, in execution order (the keys report() documents),
    that prints as a table. `copy_gb_per_s` (profiled CPU reports) is the
    bandwidth of a numpy copy measured when the report was made, the
    reference of the "% copy" column; `calls` the number of timed calls."""

    def __init__(self, rows, device="", calls=None, copy_gb_per_s=None, copy_label=""):
        super().__init__(rows)
        self.device = device
        self.calls = calls
        self.copy_gb_per_s = copy_gb_per_s
        self.copy_label = copy_label

    @property
    def profiled(self):
        """Whether the rows carry timings (report(profile=True))."""
        return self.calls is not None

    def table(self):
        """The rows as aligned text columns, with a totals line."""
        return _render(self)

    def __str__(self):
        return _render(self)

    __repr__ = __str__

    def _repr_pretty_(self, printer, cycle):  # IPython
        printer.text(_render(self))


def _human_bytes(n):
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{int(n)} B"


def _human_seconds(s):
    if not math.isfinite(s):
        return "-"
    if s >= 1:
        return f"{s:.2f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.2f} ms"
    return f"{s * 1e6:.1f} us"


def _human_rate(gbps):
    if not math.isfinite(gbps):
        return "-"
    return f"{gbps:.0f}" if gbps >= 100 else f"{gbps:.1f}" if gbps >= 10 else f"{gbps:.2f}"


def _percent(gbps, copy):
    if not math.isfinite(gbps):
        return "-"
    pct = 100 * gbps / copy
    return "<1%" if 0 < pct < 1 else f"{pct:.0f}%"


def _plural(n, word):
    return f"{n} {word}" + ("" if n == 1 else "s")


def _short_ops(ops, width=46):
    """'broadcast_in_dim add x2 maximum reduce_sum': the ops without their
    dialect prefix, repeats counted, cut to `width` with '+N more'."""
    counts = {}
    for op in ops:
        name = op[len("graph."):] if op.startswith("graph.") else op
        counts[name] = counts.get(name, 0) + 1
    parts = [f"{name} x{c}" if c > 1 else name for name, c in counts.items()]
    text = ""
    for i, part in enumerate(parts):
        candidate = f"{text} {part}" if text else part
        rest = len(parts) - i - 1
        if len(candidate) + (len(f" +{rest} more") if rest else 0) > width and text:
            return f"{text} +{len(parts) - i} more"
        text = candidate
    return text


def _launch(row):
    if "grid" in row:
        text = f"grid {row['grid']} x block {row['block']}"
        if row.get("threads"):
            text += f", {row['threads']} thr"
        return text
    if row.get("kind") == "collective":
        name, size = row["group"]
        return f"{row['shape'][0]} elements, group {name} x{size}"
    if "shape" in row and row.get("name") == "gemm":
        b, m, n, k = row["shape"]
        return (f"b{b} " if b != 1 else "") + f"m{m} n{n} k{k}"
    if "shape" in row:
        return "x".join(str(d) for d in row["shape"])
    return "-"


def _source(row):
    """The user's lines a step came from: file name and line of the first,
    and how many more."""
    lines = row.get("source") or []
    if not lines:
        return "-"
    first = lines[0]
    path, _, line = first.rpartition(":")
    text = f"{os.path.basename(path)}:{line}" if path else first
    return text + (f" +{len(lines) - 1}" if len(lines) > 1 else "")


def _known(row, key):
    """row[key] as text; NVRTC reports -1 for what it did not say."""
    return str(row[key]) if row.get(key, -1) >= 0 else "?"


def _render(report):
    rows = list(report)
    profiled = report.profiled
    copy = report.copy_gb_per_s
    cuda = any("registers" in r for r in rows)
    header = ["#", "kernel", "kind", "fused ops", "bytes", "launch", "source"]
    right = {0, 4}
    if cuda:
        header += ["regs", "spill st/ld"]
        right |= {len(header) - 2, len(header) - 1}
    if profiled:
        header += ["time/call", "GB/s"]
        right |= {len(header) - 2, len(header) - 1}
        if copy:
            header.append("% copy")
            right.add(len(header) - 1)
    lines = []
    for i, r in enumerate(rows):
        cells = [str(i), str(r.get("name", "?")), str(r.get("kind", "?")),
                 _short_ops(r.get("ops", [])), _human_bytes(r.get("bytes", 0)), _launch(r),
                 _source(r)]
        if cuda:
            cells += ([_known(r, "registers"),
                       f"{_known(r, 'spill_stores')}/{_known(r, 'spill_loads')}"]
                      if "registers" in r else ["-", "-"])
        if profiled:
            gbps = r.get("gb_per_s", float("nan"))
            cells += [_human_seconds(r.get("seconds", float("nan"))), _human_rate(gbps)]
            if copy:
                cells.append(_percent(gbps, copy))
        lines.append(cells)
    kinds = {}
    for r in rows:
        kinds[r.get("kind", "?")] = kinds.get(r.get("kind", "?"), 0) + 1
    total_bytes = sum(r.get("bytes", 0) for r in rows)
    total = ["", "total", _plural(len(rows), "step"),
             ", ".join(f"{n} {k}" for k, n in sorted(kinds.items())),
             _human_bytes(total_bytes), "", ""]
    if cuda:
        total += ["", ""]
    if profiled:
        seconds = sum(r.get("seconds", 0.0) for r in rows)
        gbps = total_bytes / seconds / 1e9 if seconds > 0 else float("nan")
        total += [_human_seconds(seconds), _human_rate(gbps)]
        if copy:
            total.append(_percent(gbps, copy))
    widths = [max(len(c[j]) for c in [header, total] + lines) for j in range(len(header))]

    def fmt(cells):
        return "  ".join(c.rjust(w) if j in right else c.ljust(w)
                         for j, (c, w) in enumerate(zip(cells, widths))).rstrip()

    title = _plural(len(rows), "step") + (f" on {report.device}" if report.device else "")
    if profiled:
        title += f", time per call: mean over {_plural(report.calls, 'timed call')}"
    out = [title, fmt(header), fmt(["-" * w for w in widths])]
    out += [fmt(c) for c in lines]
    out += [fmt(["-" * w for w in widths]), fmt(total)]
    out.append("source: the traced line of the step's first op (+ other lines fused into it); "
               "bytes: the sizes of the buffers a step reads and writes" +
               ("; GB/s: bytes / time; total time: the steps' sum" if profiled else ""))
    if profiled:
        if copy:
            out.append(f"% copy: of {copy:.1f} GB/s, {report.copy_label}")
        else:
            out.append(f"% copy: not shown ({report.copy_label})")
    return "\n".join(out)


def _copy_bandwidth(nbytes=64 << 20, repeats=5):
    """GB/s of a numpy copy of `nbytes` (bytes read + written over the
    fastest of `repeats` copies), measured now."""
    src = np.ones(nbytes // 8, np.float64)
    dst = np.empty_like(src)
    np.copyto(dst, src)  # first touch of the destination pages
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - t0)
    return 2 * src.nbytes / best / 1e9, (
        f"a numpy copy of {nbytes >> 20} MiB (bytes read + written, fastest of {repeats}, "
        f"one thread) measured in this process when this report was made")


def _make_report(rows, exe, device, profile, profiling):
    """A Report of `rows`; with `profile`, the mean seconds and GB/s per
    step from the executor's timings. `profiling` is None when profile()
    was never called, else its last argument."""
    if not profile:
        return Report(rows, device)
    seconds, calls = exe.step_seconds()
    if profiling is None:
        raise CompileError("report(profile=True): profiling is off; call fn.profile() before "
                           "the calls you want timed, then fn.report(profile=True)")
    if not calls:
        if profiling:
            raise CompileError("report(profile=True): no call ran since fn.profile(); make "
                               "the calls you want timed first")
        raise CompileError("report(profile=True): fn.profile(False) switched profiling off "
                           "and cleared the timings; call fn.profile() before the calls you "
                           "want timed")
    for row, t in zip(rows, seconds):
        row["seconds"] = t / calls
        row["gb_per_s"] = row["bytes"] / row["seconds"] / 1e9 if row["seconds"] > 0 \
            else float("nan")
    if device.startswith("cpu"):
        copy, label = _copy_bandwidth()
    else:
        copy, label = None, ("no copy on this device is measured from Python; "
                             "bench/gpu/bench.py compares kernels with a device copy")
    return Report(rows, device, calls, copy, label)


# ---------------------------------------------------------------------------
# State dicts
# ---------------------------------------------------------------------------

def save(state_dict, path):
    """Writes a state dict (`step.state_dict()`: names -> numpy arrays or
    scalars) to `path` as an .npz archive, no pickled objects; the file is
    replaced only once it is complete. np.load(path) reads it too."""
    if not isinstance(state_dict, Mapping):
        raise CompileError(f"save: a state dict is a dict of arrays, got "
                           f"{type(state_dict).__name__}")
    arrays = {}
    for key, value in state_dict.items():
        if not isinstance(key, str) or not key:
            raise CompileError(f"save: state dict keys are non-empty strings, got {key!r}")
        a = np.asarray(value)
        if a.dtype.hasobject:
            raise CompileError(f"save: '{key}' is not a numeric array (dtype {a.dtype})")
        arrays[key] = a
    path = os.fspath(path)
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_STORED, allowZip64=True) as z:
            for key, a in arrays.items():
                with z.open(key + ".npy", "w", force_zip64=True) as f:
                    np.lib.format.write_array(f, a, allow_pickle=False)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def load_state_dict(path):
    """The state dict `save` wrote to `path` (any .npz of plain arrays): a
    dict of numpy arrays (scalars as 0-d arrays), in the order saved."""
    try:
        z = np.load(os.fspath(path), allow_pickle=False)
    except (OSError, ValueError) as e:
        raise CompileError(f"load_state_dict: cannot read {path}: {e}") from None
    if not isinstance(z, np.lib.npyio.NpzFile):
        raise CompileError(f"load_state_dict: {path} holds one array, not a state dict (.npz)")
    with z:
        try:
            return {key: z[key] for key in z.files}
        except ValueError as e:
            raise CompileError(f"load_state_dict: {path}: {e}") from None


def _listing(keys, limit=8):
    keys = list(keys)
    shown = ", ".join(repr(k) for k in keys[:limit])
    return shown + (f", ... ({len(keys)} in all)" if len(keys) > limit else "")


def _check_keys(state, expected, who, hint=""):
    if not isinstance(state, Mapping):
        hint = (" (read a file with tilefuse.runtime.load_state_dict(path))"
                if isinstance(state, (str, os.PathLike)) else "")
        raise CompileError(f"{who}: a state dict is a dict of arrays (names -> values), got "
                           f"{type(state).__name__}{hint}")
    missing = [k for k in expected if k not in state]
    unexpected = [k for k in state if k not in expected]
    if missing or unexpected:
        problems = ([f"missing {_listing(missing)}"] if missing else []) + \
                   ([f"unexpected {_listing(unexpected)}"] if unexpected else [])
        raise CompileError(f"{who}: the state dict does not match: {'; '.join(problems)} "
                           f"(expected keys: {_listing(expected)}){hint}")


def _describe(a):
    return f"{a.dtype}{tuple(a.shape)}"


def _check_array(state, key, shape, dtype, who):
    """state[key] as a C-contiguous array after checking its shape and dtype."""
    a = np.asarray(state[key])
    if a.shape != tuple(shape) or a.dtype != np.dtype(dtype):
        raise CompileError(f"{who}: '{key}' is {_describe(a)}, the step holds "
                           f"{np.dtype(dtype)}{tuple(shape)}")
    # (np.ascontiguousarray would make a 0-d array 1-d)
    return np.require(a, requirements="C")


def _check_scalar(state, key, kinds, who):
    """state[key] as a Python scalar (a 0-d array or scalar of a dtype kind in `kinds`)."""
    a = np.asarray(state[key])
    if a.shape != () or a.dtype.kind not in kinds:
        want = {"iu": "an integer", "fiu": "a real number", "U": "a string"}[kinds]
        raise CompileError(f"{who}: '{key}' must be {want} (a 0-d array or scalar), got "
                           f"{_describe(a)}")
    return a.item()


_NUMPY = {"f32": np.float32, "f64": np.float64, "f16": np.float16, "bf16": np.float32,
          "i32": np.int32, "i64": np.int64, "i1": np.bool_}


# ---------------------------------------------------------------------------
# Artifacts
# ---------------------------------------------------------------------------

class LoadedFunction:
    """A graph loaded from an artifact. Call it with the arguments the traced
    function took (numpy arrays, or DLPack tensors of the artifact's device
    such as torch CUDA tensors, passed without a copy; nested in the same
    dicts, lists and tuples); returns numpy arrays in the structure the
    traced function returned. Artifacts of parsed or command-line graphs
    record no structure: their arguments are flat, named arg0, arg1, ..."""

    def __init__(self, program, target, graph_text, metadata=""):
        self._program = program
        self.target = target
        self.graph_text = graph_text
        self._profiling = None
        try:
            self.interface = json.loads(metadata) if metadata else {}
        except ValueError as e:
            raise CompileError(f"corrupt artifact: its interface record is not JSON ({e})")
        spec = self.interface.get("in_spec")
        self._in_spec = None if spec is None else _pytree.spec_from_json(spec)
        spec = self.interface.get("out_spec")
        self._out_spec = None if spec is None else _pytree.spec_from_json(spec)
        names = self.interface.get("argument_names")
        self._names = names if names and len(names) == len(program.arguments) else None

    @property
    def device(self):
        """Where it runs: "cpu" or "cuda:0 (<GPU name>)"."""
        return self._program.device

    @property
    def arguments(self):
        """(name, dtype, shape) of every argument: the traced argument's path
        ("0.w1" for args[0]["w1"]) where the artifact recorded it."""
        return [(self._names[i] if self._names else n, d, tuple(s))
                for i, (n, d, s) in enumerate(self._program.arguments)]

    @property
    def results(self):
        """(name, dtype, shape) of every result."""
        return [(n, d, tuple(s)) for n, d, s in self._program.results]

    def __call__(self, *args):
        if self._in_spec is not None:
            leaves, spec = _pytree.flatten(list(args))
            if spec != self._in_spec:
                want, got = len(self._in_spec[2]), len(spec[2])
                if want != got:
                    raise CompileError(f"the compiled function takes {want} arguments, got {got}")
                raise CompileError(
                    "the arguments do not have the structure (dicts, keys, nesting) the "
                    f"function was traced with: expected {_describe_spec(self._in_spec)}, got "
                    f"{_describe_spec(spec)}")
            args = leaves
        results = self._program.run(list(args))
        if self._out_spec is not None:
            return _pytree.unflatten(self._out_spec, list(results))
        return results[0] if len(results) == 1 else tuple(results)

    def run(self, args, out="numpy"):
        """All results as a list: numpy arrays; with out="dlpack" device
        arrays that torch.from_dlpack / cupy.from_dlpack take without a host
        copy (each owns a device copy); with out="view" device arrays that
        are the executor's own buffers, valid until the next call (no copy
        at all). On the CPU, numpy arrays in every case."""
        return list(self._program.run(list(args), out=out))

    def synchronize(self):
        """Waits for the device. Every call already returns after its work
        finished, so there is nothing left to wait for."""

    def report(self, profile=False):
        """One dict per step in execution order (name, kind, source ops,
        bytes, launch shape), as a `Report`: a list that prints as a table.
        With profile=True also `seconds` (mean per call) and `gb_per_s` from
        the calls made since profile(); CompileError if profile() was not
        called before them."""
        return _make_report(self._program.kernels(), self._program, self.device, profile,
                            self._profiling)

    def profile(self, on=True):
        """Starts (or stops, clearing the timings) timing every step of
        every call, for report(profile=True)."""
        self._program.set_profiling(bool(on))
        self._profiling = bool(on)

    def memory_plan(self):
        """The artifact's memory plan (`tilefuse.memory_plan.MemoryPlan`):
        the arena a call allocates, buffer by buffer."""
        from .memory_plan import MemoryPlan
        return MemoryPlan(self._program.memory_plan())

    @property
    def graph_stats(self):
        """(CUDA graphs captured, calls that replayed one)."""
        return tuple(self._program.graph_stats)


class LoadedTrainStep(LoadedFunction):
    """An artifact of a training step (tilefuse-compile --train): results
    that are an argument's next value (parameters, optimizer state) stay on
    the device between calls. set_state() gives their initial values; a
    call takes the other arguments (batch, seed, step, learning rate) and
    returns the loss.

    state_dict() / load_state_dict() save and restore the kept arguments
    under the artifact's argument names: "params/<name>" and
    "<slot>/<name>" (TrainStep.state_dict's keys) for steps exported from
    Python, arg0, arg1, ... for steps from tilefuse-compile. The step
    number and learning rate are arguments of every call, so the caller
    keeps them."""

    def __init__(self, program, target, graph_text, metadata=""):
        super().__init__(program, target, graph_text, metadata)
        self._aliases = sorted(program.aliases, key=lambda ra: ra[1])
        self._kept = [a for _, a in self._aliases]
        self._ready = False
        self.resumed = None

    @property
    def state_arguments(self):
        """Indices of the arguments kept on the device, in set_state order."""
        return list(self._kept)

    def set_state(self, values):
        """Initial values of the kept arguments (parameters, then optimizer
        state, then a loss scaler's state, in argument order). A step
        exported from Python knows its loss scaler's initial state: the
        parameters and optimizer state alone are then enough."""
        values = list(values)
        defaults = [np.array(v, dtype=d) for _, v, d in self.interface.get("step_state", [])]
        if defaults and len(values) == len(self._kept) - len(defaults):
            values += defaults
        if len(values) != len(self._kept):
            raise CompileError(f"the training step keeps {len(self._kept)} arguments, "
                               f"got {len(values)} values")
        for a, v in zip(self._kept, values):
            self._program.make_persistent(a, np.asarray(v))
        if not self._ready:
            for r, a in self._aliases:
                self._program.carry(r, a)
            self._ready = True

    def state(self):
        """Current values of the kept arguments, as numpy arrays."""
        self._require_state()
        return [self._program.persistent(a) for a in self._kept]

    def state_dict(self):
        """{argument name: current value} of the kept arguments (copies),
        in set_state order; `tilefuse.runtime.save` writes it to a file."""
        self._require_state()
        return dict(zip(self._kept_names(), self.state()))

    # What a TrainStep's state_dict() holds besides the kept arguments: the
    # caller of a loaded step passes step and lr at every call, so these are
    # only kept (`resumed`) for it to continue from.
    _CALLER_KEPT = ("step", "lr", "seed", "optimizer")

    def load_state_dict(self, state):
        """Restores the kept arguments from a state_dict() of a step loaded
        from the same artifact, or of the TrainStep that exported it (or any
        dict with the same names, shapes and dtypes); a first call may take
        the place of set_state(). A TrainStep's "step", "lr", "seed" and
        "optimizer" entries are checked (the optimizer must be the
        artifact's) and kept in `resumed` ({"step": int, "lr": float or
        [float per group], "seed": int}): calls take the step number and
        learning rate, so continue with loaded(batch, [seed,]
        resumed["step"] + 1, resumed["lr"])."""
        names, args = self._kept_names(), self.arguments
        who = "LoadedTrainStep.load_state_dict"
        extra = [k for k in self._CALLER_KEPT if isinstance(state, Mapping) and k in state]
        if extra and len(extra) != len(self._CALLER_KEPT):
            missing = [k for k in self._CALLER_KEPT if k not in extra]
            raise CompileError(f"{who}: the state dict has {_listing(extra)} but not "
                               f"{_listing(missing)}; a TrainStep's state_dict() has all four")
        # A ZeRO step's artifact keeps one rank's shards, never whole tensors.
        sharded = "params/shard0" in names
        _check_keys(state, names + extra, who, hint=(
            "; this artifact is a ZeRO step, whose kept arguments are one rank's shards: load "
            "this rank's TrainStep.kept_state(), or its rank<r>.npz written by "
            "tilefuse.distributed.save_sharded" if sharded else ""))
        values = [_check_array(state, name, args[a][2], _NUMPY[args[a][1]], who)
                  for name, a in zip(names, self._kept)]
        resumed = None
        if extra:
            kind = str(np.asarray(state["optimizer"]))
            want = self.interface.get("optimizer")
            if want is not None and kind != want:
                raise CompileError(f"{who}: the state dict is of a {kind!r} optimizer, this "
                                   f"step was compiled with {want!r}")
            lr = np.asarray(state["lr"], np.float64)
            resumed = {"step": int(np.asarray(state["step"])),
                       "lr": float(lr) if lr.ndim == 0 else [float(v) for v in lr],
                       "seed": int(np.asarray(state["seed"]))}
        self.set_state(values)
        if resumed is not None:
            self.resumed = resumed

    def _kept_names(self):
        names = [self.arguments[a][0] for a in self._kept]
        if len(set(names)) != len(names):
            raise CompileError("the artifact's kept arguments have repeated names: "
                               f"{_listing(names)}")
        return names

    def __call__(self, *args):
        """step(batch, [seed,] step, lr) -> loss (a float, as TrainStep's);
        the batch as the dict (or nesting) the step was traced with, or its
        leaves one by one."""
        self._require_state()
        spec = self.interface.get("batch_spec")
        if spec is not None and args and isinstance(args[0], (dict, list, tuple)):
            leaves, got = _pytree.flatten(args[0])
            if got != _pytree.spec_from_json(spec):
                raise CompileError(
                    "the batch does not have the structure the step was traced with: expected "
                    f"{_describe_spec(_pytree.spec_from_json(spec))}, got {_describe_spec(got)}")
            args = tuple(leaves) + tuple(args[1:])
        n = len(self._program.arguments)
        if len(args) != n - len(self._kept):
            raise CompileError(f"the training step takes {n - len(self._kept)} arguments "
                               f"besides its kept state, got {len(args)}")
        rest = iter(args)
        full = [None if i in self._kept else next(rest) for i in range(n)]
        return float(self._program.run(full, results=[0])[0])

    def _require_state(self):
        if not self._ready:
            raise CompileError("call set_state() with the initial parameters and optimizer "
                               "state first")


def load(path, cuda_graphs=True, allow_tf32=False, process_group=None):
    """Loads an artifact written by Graph.export or tilefuse-compile: a
    LoadedTrainStep for a training step, else a LoadedFunction. CPU
    artifacts run here; CUDA ones on the first GPU (replaying a CUDA graph
    per call unless cuda_graphs=False; f32 GEMMs in full f32 unless
    allow_tf32=True). A truncated, corrupt, other-version, other-CPU or
    other-GPU-architecture artifact raises CompileError.

    An artifact with collectives over more than one rank (a data-parallel
    step) runs in every process of `process_group` (None: torch.distributed's default group,
    e.g. under torchrun): its group is bound to it, after the ranks checked
    they loaded the same program (a collective call)."""
    program, target, text, metadata = load_artifact(str(path), cuda_graphs, allow_tf32)
    # (A group of one runs without a process group.)
    groups = [(name, size) for name, size in program.groups if size > 1]
    if groups:
        from . import distributed
        unknown = [name for name, _ in groups if name != distributed.GROUP]
        if unknown:
            raise CompileError(f"{path}: the artifact's collectives run over process groups "
                               f"{unknown}; tilefuse.load binds only {distributed.GROUP!r}")
        distributed.check_same_program(text, process_group)
        distributed.bind(program, process_group)
    cls = LoadedTrainStep if program.aliases else LoadedFunction
    return cls(program, target, text, metadata)


def _describe_spec(spec):
    """A pytree spec as a short Python-like text: {'w': *, 'b': *}, [*, *]."""
    kind, keys, specs = spec
    if kind == "leaf":
        return "*"
    inner = [_describe_spec(s) for s in specs]
    if kind == "dict":
        return "{" + ", ".join(f"{k!r}: {v}" for k, v in zip(keys, inner)) + "}"
    return ("(" if kind == "tuple" else "[") + ", ".join(inner) + (")" if kind == "tuple" else "]")
