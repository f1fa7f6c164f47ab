"""tilefuse.compile: a traced function compiled into fused kernels."""
from . import _pytree
from ._core import CompileError
from .runtime import _make_report


_NOTICED = []


def resolve_device(device):
    """The backend a device name selects here: "auto" is CUDA when a driver,
    a GPU and cuBLAS are there, else the CPU (saying why once); "cuda"
    without them raises CompileError with the reason."""
    from . import _core
    if device == "cpu":
        return "cpu"
    if device == "auto":
        gpus, why = _core.cuda_devices()
        if gpus:
            return "cuda"
        if not _NOTICED:
            _NOTICED.append(True)
            print(f"tilefuse: running on the CPU ({why})")
        return "cpu"
    if device == "cuda":
        gpus, why = _core.cuda_devices()
        if not gpus:
            raise CompileError(f"device='cuda' is not available: {why}; use device='cpu' or "
                               "'auto' (CUDA C for a GPU can be printed with "
                               "graph._graph.cuda_source('cuda:sm_90'), and an artifact "
                               "compiled with Graph.export(path, 'cuda:sm_90'))")
        return "cuda"
    raise CompileError(f"unknown device {device!r}; expected 'auto', 'cpu' or 'cuda'")


class CompiledFunction:
    """A graph compiled for a device. Call it with arrays shaped like the
    example arguments; it returns numpy arrays in the traced structure.

    On the CPU the results are computed straight into the arrays returned
    (no copy; their memory is recycled once they are freed), or into the
    caller's own: `fn(x, out=y)` (`out=` the results' structure of arrays,
    e.g. a tuple for two results; None entries get new arrays). `out=` may
    also be "dlpack" or "view" (see Executable.run) for device results."""

    def __init__(self, graph, executable, in_spec, out_spec, device):
        self.graph = graph
        self.device = device
        self._exe = executable
        self._in_spec = in_spec
        self._out_spec = out_spec
        self._profiling = None  # profile() not called yet

    def __call__(self, *args, out="numpy"):
        leaves, spec = _pytree.flatten(list(args))
        if self._in_spec is not None and len(args) != len(self._in_spec[2]):
            raise CompileError(f"the compiled function takes {len(self._in_spec[2])} "
                               f"arguments, got {len(args)}")
        if self._in_spec is not None and spec != self._in_spec:
            raise CompileError(
                "the arguments do not have the structure (nesting, keys) of the example "
                "arguments the function was compiled with")
        into = None
        if not isinstance(out, str):  # the caller's arrays, in the results' structure
            into, _ = _pytree.flatten(out)
            out = "numpy"
        results = self._exe.run(leaves, out=out, into=into)
        if self._out_spec is None:
            return results[0] if len(results) == 1 else tuple(results)
        return _pytree.unflatten(self._out_spec, results)

    def report(self, profile=False):
        """One dict per step in execution order: name, kind (pointwise,
        reduction, library, copy), the source ops it computes, bytes it
        reads and writes, and for kernels the grid and block size; on CUDA
        also threads per block, registers, spill stores/loads, shared and
        stack bytes, and NVRTC's `compile_log`. With profile=True, also
        `seconds` (mean wall time per call) and `gb_per_s`, from the calls
        made since profile(); CompileError if profile() was not called
        before them.

        Returns a `tilefuse.runtime.Report`: a list of those dicts that
        prints as a table (`print(fn.report())`), with a totals line and,
        profiled on the CPU, each step's GB/s as a percentage of a numpy
        copy measured when the report is made. The steps carry no source
        lines of the traced Python."""
        rows = self._exe.kernels()
        resources = self._exe.cuda_resources
        for row in rows:
            row.update(resources.get(row["name"], {}))
        return _make_report(rows, self._exe, self.device, profile, self._profiling)

    def profile(self, on=True):
        """Starts (or stops, clearing the timings) timing every step of
        every call, for report(profile=True)."""
        self._exe.set_profiling(bool(on))
        self._profiling = bool(on)

    def numerics_report(self, *args):
        """The compiled kernels against f32 on these arguments
        (Graph.numerics_report): one row per kernel output, its error, the
        bound its precision promises, the kernels over it."""
        return self.graph.numerics_report(*args, device=self.device)

    def memory_plan(self):
        """Where the compiled function's buffers live: a
        `tilefuse.memory_plan.MemoryPlan` (peak, lower bound, ratio, one row
        per buffer; `print()` it, `save_png()` draws it)."""
        from .memory_plan import MemoryPlan
        return MemoryPlan(self._exe.memory_plan())

    @property
    def fused_ir(self):
        """The graph after fusion (graph.fusion regions)."""
        return self._exe.fused_ir

    @property
    def tile_ir(self):
        """The tile kernels (one Triton-style program per fused region)."""
        return self._exe.tile_ir

    @property
    def compile_seconds(self):
        """Seconds this compile took (small when the kernel cache hit)."""
        return self._exe.compile_seconds

    @property
    def compile_stages(self):
        """Where this compile's time went: a list of (stage name, seconds)
        in pipeline order: "primitives" (composites lowered to primitive
        ops), "fuse", "tile" (tile kernels and the program), "machine code"
        (JIT or NVRTC). A compile served from the in-process cache repeats
        the stages of the compile that filled it (see `cache_hit`); one
        served from the disk cache has the single stage "disk cache"."""
        return list(self._exe.compile_stages)

    @property
    def cache_hit(self):
        """Whether the graph's kernels came from this process's cache."""
        return self._exe.cache_hit


def compile(fn, *example_args, device="auto", precision="fp32", keep_fp32=()):
    """Traces fn(*example_args) and compiles it into fused kernels for
    `device` ("auto", "cpu" or "cuda"). The compiled function takes numpy
    arrays (and, on CUDA, DLPack tensors such as torch CUDA tensors without
    a copy); with out="dlpack" it returns device arrays. `precision`
    ("fp32", "bf16", "fp16") applies the mixed-precision policy
    (Graph.autocast) before compiling."""
    from ._tracing import trace
    dev = resolve_device(device)
    graph = fn if hasattr(fn, "_graph") else trace(fn, *example_args)
    if precision != "fp32" or keep_fp32:
        graph = graph.autocast(precision, keep_fp32)
    return graph.compile(dev)
