"""Running ahead-of-time artifacts (.tfa): needs only the runtime module,
so it works in a runtime-only installation (no compiler) too."""
from ._runtime import CompileError, load_artifact


class LoadedFunction:
    """A graph loaded from an artifact. Call it with the graph's arguments
    (flat: numpy arrays, or DLPack tensors of the artifact's device such as
    torch CUDA tensors, passed without a copy); returns numpy arrays."""

    def __init__(self, program, target, graph_text):
        self._program = program
        self.target = target
        self.graph_text = graph_text

    @property
    def device(self):
        """Where it runs: "cpu" or "cuda:0 (<GPU name>)"."""
        return self._program.device

    @property
    def arguments(self):
        """(name, dtype, shape) of every argument."""
        return [(n, d, tuple(s)) for n, d, s in self._program.arguments]

    @property
    def results(self):
        """(name, dtype, shape) of every result."""
        return [(n, d, tuple(s)) for n, d, s in self._program.results]

    def __call__(self, *args):
        results = self._program.run(list(args))
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

    def report(self):
        """One dict per step: name, kind, source ops, bytes, launch shape."""
        return self._program.kernels()

    @property
    def graph_stats(self):
        """(CUDA graphs captured, calls that replayed one)."""
        return tuple(self._program.graph_stats)


class LoadedTrainStep(LoadedFunction):
    """An artifact of a training step (tilefuse-compile --train): results
    that are an argument's next value (parameters, optimizer state) stay on
    the device between calls. set_state() gives their initial values; a
    call takes the other arguments (batch, seed, step, learning rate) and
    returns the loss."""

    def __init__(self, program, target, graph_text):
        super().__init__(program, target, graph_text)
        self._aliases = sorted(program.aliases, key=lambda ra: ra[1])
        self._kept = [a for _, a in self._aliases]
        self._ready = False

    @property
    def state_arguments(self):
        """Indices of the arguments kept on the device, in set_state order."""
        return list(self._kept)

    def set_state(self, values):
        """Initial values of the kept arguments (parameters, then optimizer
        state, in argument order)."""
        values = list(values)
        if len(values) != len(self._kept):
            raise CompileError(f"the training step keeps {len(self._kept)} arguments, "
                               f"got {len(values)} values")
        for a, v in zip(self._kept, values):
            self._program.make_persistent(a, v)
        if not self._ready:
            for r, a in self._aliases:
                self._program.carry(r, a)
            self._ready = True

    def state(self):
        """Current values of the kept arguments, as numpy arrays."""
        self._require_state()
        return [self._program.persistent(a) for a in self._kept]

    def __call__(self, *args):
        self._require_state()
        n = len(self._program.arguments)
        if len(args) != n - len(self._kept):
            raise CompileError(f"the training step takes {n - len(self._kept)} arguments "
                               f"besides its kept state, got {len(args)}")
        rest = iter(args)
        full = [None if i in self._kept else next(rest) for i in range(n)]
        return self._program.run(full, results=[0])[0]

    def _require_state(self):
        if not self._ready:
            raise CompileError("call set_state() with the initial parameters and optimizer "
                               "state first")


def load(path, cuda_graphs=True, allow_tf32=False):
    """Loads an artifact written by Graph.export or tilefuse-compile: a
    LoadedTrainStep for a training step, else a LoadedFunction. CPU
    artifacts run here; CUDA ones on the first GPU (replaying a CUDA graph
    per call unless cuda_graphs=False; f32 GEMMs in full f32 unless
    allow_tf32=True). A truncated, corrupt, other-version, other-CPU or
    other-GPU-architecture artifact raises CompileError."""
    program, target, text = load_artifact(str(path), cuda_graphs, allow_tf32)
    cls = LoadedTrainStep if program.aliases else LoadedFunction
    return cls(program, target, text)
