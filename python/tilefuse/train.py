"""compile_train_step: one compiled graph per training step."""
import inspect

import numpy as np

from . import _pytree
from ._core import CompileError
from ._tracing import trace
from .compiler import resolve_device




class TrainStep:
    """A compiled training step. Parameters and optimizer state live in the
    runtime between calls (the step's new values replace them in place);
    `step(batch)` runs forward, backward and the update and returns the loss
    computed before the update."""

    def __init__(self, graph, names, params, state_names, batch_spec, lr, seed, uses_seed,
                 device):
        self._graph = graph
        self.device = device
        self._compiled = graph.compile(device)
        self._names = names
        self._n_params = len(params)
        self._n_kept = len(params) * (1 + len(state_names))
        exe = self._compiled._exe
        initial = list(params) + [np.zeros_like(p) for _ in state_names for p in params]
        # Arguments 0..n_kept-1 (params, then state) persist; results
        # 1..n_kept are their new values.
        for i, value in enumerate(initial):
            exe.make_persistent(i, value)
            exe.carry(1 + i, i)
        self._state_names = state_names
        self._batch_spec = batch_spec
        self._seed = int(seed)
        self._uses_seed = uses_seed
        self.lr = float(lr)
        self.step_count = 0

    @property
    def graph(self):
        """The training-step Graph (its IR: `step.graph.mlir()`)."""
        return self._graph

    @property
    def compiled(self):
        """The compiled step (its kernels: `step.compiled.report()`)."""
        return self._compiled

    def __call__(self, batch):
        leaves, spec = _pytree.flatten(batch)
        if spec != self._batch_spec:
            raise CompileError(
                "the batch does not have the structure (keys, nesting) of the example batch "
                "the step was compiled with"
            )
        t = self.step_count + 1
        args = [None] * self._n_kept + [np.asarray(x) for x in leaves]
        if self._uses_seed:
            args.append(np.int64(self._seed + t - 1))
        args += [np.int64(t), np.float64(self.lr)]
        (loss,) = self._compiled._exe.run(args, [0])
        self.step_count = t
        return float(loss)

    def params(self):
        """Current parameters, as a dict of numpy arrays (copies)."""
        exe = self._compiled._exe
        return _pytree.unflatten(self._names,
                                 [exe.persistent(i) for i in range(self._n_params)])

    def state(self):
        """Optimizer state: {slot name: params-shaped dict}."""
        exe, n = self._compiled._exe, self._n_params
        return {
            name: _pytree.unflatten(self._names,
                                    [exe.persistent(n * (1 + i) + k) for k in range(n)])
            for i, name in enumerate(self._state_names)
        }


def compile_train_step(loss_fn, params, example_batch, optimizer, device="auto", seed=0):
    """Compiles loss_fn(params, batch) or loss_fn(params, batch, seed) into one
    training step. `params` and `example_batch` are (nested) dicts of numpy
    arrays; `seed` (when loss_fn takes it) is a 0-d int64 tensor equal to
    `seed + t - 1` at step t, for dropout."""
    device = resolve_device(device)
    graph, names, param_leaves, batch_spec, uses_seed = _build_train_step(
        loss_fn, params, example_batch, optimizer, seed)
    return TrainStep(graph, names, [p.copy() for p in param_leaves],
                     optimizer.state_names(), batch_spec, optimizer.lr, seed, uses_seed,
                     device)


def train_step_graph(loss_fn, params, example_batch, optimizer, seed=0):
    """The training-step Graph compile_train_step compiles, without
    compiling it (for Graph.export): arguments (parameters, optimizer state
    per parameter and state name, batch leaves, [seed,] step, lr), results
    (loss, new parameters, new state)."""
    return _build_train_step(loss_fn, params, example_batch, optimizer, seed)[0]


def _build_train_step(loss_fn, params, example_batch, optimizer, seed):
    if not hasattr(optimizer, "_config"):
        raise CompileError(f"optimizer must be a tilefuse.optim optimizer, got {optimizer!r}")
    config = optimizer._config()
    try:
        n_args = len(inspect.signature(loss_fn).parameters)
    except (TypeError, ValueError):
        n_args = 2
    uses_seed = n_args >= 3
    param_leaves, names = _pytree.flatten(params)
    param_leaves = [np.asarray(p) for p in param_leaves]
    for p in param_leaves:
        if p.dtype.kind != "f":
            raise CompileError(f"parameters must be floating point, got a {p.dtype} array")
    _, batch_spec = _pytree.flatten(example_batch)
    args = [params, example_batch] + ([np.int64(seed)] if uses_seed else [])
    loss_graph = trace(loss_fn, *args)
    graph = loss_graph._graph.train_step(len(param_leaves), **config)
    from ._tracing import Graph

    return Graph(graph), names, param_leaves, batch_spec, uses_seed
