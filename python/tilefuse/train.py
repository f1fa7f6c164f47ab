"""compile_train_step: one compiled graph per training step."""
import inspect

import numpy as np

from . import _pytree
from ._core import CompileError
from ._tracing import Graph, _short_errors, trace
from .compiler import resolve_device
from .optim import LossScale
from .runtime import _check_array, _check_keys, _check_scalar


class TrainStep:
    """A compiled training step. Parameters and optimizer state live in the
    runtime between calls (the step's new values replace them in place);
    `step(batch)` runs forward, backward and the update and returns the loss
    computed before the update.

    `state_dict()` is everything the next step depends on besides the batch
    and what was compiled in (the loss function, the optimizer's
    hyperparameters): parameters, optimizer state, the loss scaler's state
    (with loss scaling), step count, lr and seed.
    `load_state_dict()` restores it into a step compiled the same way, which
    then continues bitwise as the saved one would have;
    `tilefuse.runtime.save(step.state_dict(), path)` and
    `tilefuse.runtime.load_state_dict(path)` keep it in an .npz file."""

    def __init__(self, graph, names, params, state_names, step_state, batch_spec, groups, seed,
                 uses_seed, device, optimizer_kind="", parallel=None):
        self._graph = graph
        self.device = device
        self._compiled = graph.compile(device)
        # (mode, process group) of a data-parallel step: the program
        # compared across ranks before any other collective, its group bound
        # to the process group, rank 0's parameters on every rank (as DDP
        # does).
        self._parallel = parallel
        self._shards = None
        if parallel is not None:
            from . import distributed
            distributed.check_same_program(graph.mlir(), parallel[1])
            distributed.bind(self._compiled._exe, parallel[1])
            params = distributed.broadcast_arrays(params, parallel[1])
            if parallel[0] in distributed.SHARDED:
                # ZeRO: this rank keeps its shards of the parameters (and
                # of their optimizer state), not the parameters.
                _, _, rank, size = distributed.world(parallel[1])
                self._shards = distributed.ShardLayout(
                    graph._artifact_interface()["shards"], [p.shape for p in params],
                    [p.dtype for p in params], size)
                params = self._shards.split(params, rank)
        self._names = names
        self._n_params = len(params)
        exe = self._compiled._exe
        # What the step keeps between calls is what its program says: each
        # (result, argument) alias. Their initial values, in argument order:
        # parameters, zeroed optimizer state, the step-wide state.
        aliases = sorted(exe.aliases, key=lambda ra: ra[1])
        self._kept = [a for _, a in aliases]
        initial = (list(params) + [np.zeros_like(p) for _ in state_names for p in params] +
                   [value for _, value in step_state])
        if len(self._kept) != len(initial):
            raise CompileError(f"the compiled training step keeps {len(self._kept)} arguments; "
                               f"its parameters, optimizer and loss scaler need {len(initial)}")
        self._kept_sigs = [(v.shape, v.dtype) for v in initial]
        self._optimizer_kind = optimizer_kind
        for a, value in zip(self._kept, initial):
            exe.make_persistent(a, value)
        for r, a in aliases:
            exe.carry(r, a)
        interface = graph._artifact_interface()
        self._n_args = len(interface["argument_names"])
        # (name, shape) of each batch leaf, checked at every call.
        self._batch_leaves = list(zip(
            [n for n in interface["argument_names"] if n == "batch" or n.startswith("batch/")],
            [tuple(s) for s in interface["batch_shapes"]]))
        self._state_names = state_names
        self._step_state = [name for name, _ in step_state]
        self._batch_spec = batch_spec
        self._seed = int(seed)
        self._uses_seed = uses_seed
        # torch.optim-style: [{"params": names, "lr": float, "weight_decay":
        # float}]; each group's "lr" is read at every call (a schedule sets
        # it), its weight decay was compiled in.
        self.param_groups = [dict(g) for g in groups]
        self.step_count = 0

    @property
    def graph(self):
        """The training-step Graph (its IR: `step.graph.mlir()`)."""
        return self._graph

    @property
    def compiled(self):
        """The compiled step (its kernels: `step.compiled.report()`)."""
        return self._compiled

    @property
    def compile_stages(self):
        """(stage name, seconds) of the step's compile, in pipeline order
        (CompiledFunction.compile_stages)."""
        return self._compiled.compile_stages

    def report(self, profile=False):
        """The compiled step's kernels as a table (CompiledFunction.report)."""
        return self._compiled.report(profile)

    def memory_plan(self):
        """The step's memory plan (CompiledFunction.memory_plan): the
        activations, gradients and temporaries of one step in one arena;
        parameters and optimizer state live beside it."""
        return self._compiled.memory_plan()

    def export(self, path, target="cpu"):
        """Writes this step as an ahead-of-time artifact (Graph.export):
        `tilefuse.load(path)` gives a LoadedTrainStep; its
        `load_state_dict(step.kept_state())` continues from here, called as
        `loaded(batch, [seed,] step, lr...)`."""
        self._graph.export(path, target)

    def kept_state(self):
        """The kept arguments only (parameters, optimizer state, loss
        scaler), under the artifact's names: what a LoadedTrainStep of
        export() takes in load_state_dict."""
        exe = self._compiled._exe
        return {key: exe.persistent(a) for a, key in zip(self._kept, self._state_keys())}

    def numerics_report(self, batch):
        """This step's kernels against f32 on `batch` and the current
        parameters and state (Graph.numerics_report), without changing
        them: one row per kernel output of forward, backward and update,
        its error, the bound its precision promises, those over it."""
        leaves, spec = _pytree.flatten(batch)
        if spec != self._batch_spec:
            raise CompileError("the batch does not have the structure (keys, nesting) of the "
                               "example batch the step was compiled with")
        args = self._arguments(leaves)
        exe = self._compiled._exe
        for a in self._kept:
            args[a] = exe.persistent(a)
        return self._graph.numerics_report(*args, device=self.device)

    def _arguments(self, leaves):
        """The step's arguments for the next call: None for the kept ones."""
        for (name, shape), leaf in zip(self._batch_leaves, leaves):
            if np.shape(leaf) != shape:
                raise CompileError(
                    f"{name} has shape {tuple(np.shape(leaf))}; the step was compiled for "
                    f"{shape}" + (" (with accumulate=k, k micro-batches stacked along a new "
                                  "first dimension)" if len(shape) == np.ndim(leaf) + 1 else ""))
        t = self.step_count + 1
        rest = [np.asarray(x) for x in leaves]
        if self._uses_seed:
            rest.append(np.int64(self._seed + t - 1))
        rest += [np.int64(t)] + [np.float64(g["lr"]) for g in self.param_groups]
        kept, it = set(self._kept), iter(rest)
        return [None if i in kept else next(it) for i in range(self._n_args)]

    def profile(self, on=True):
        """Times every kernel of the following steps, for report(profile=True)."""
        self._compiled.profile(on)

    def __call__(self, batch):
        leaves, spec = _pytree.flatten(batch)
        if spec != self._batch_spec:
            raise CompileError(
                "the batch does not have the structure (keys, nesting) of the example batch "
                "the step was compiled with"
            )
        args = self._arguments(leaves)
        (loss,) = self._compiled._exe.run(args, [0])
        self.step_count += 1
        return float(loss)

    def _whole(self, kept):
        """Per-parameter arrays of kept arguments `kept` (parameters or one
        optimizer state slot); a ZeRO step gathers its shards from every
        rank (so every rank must call)."""
        exe = self._compiled._exe
        values = [exe.persistent(a) for a in kept]
        if self._shards is None:
            return values
        from . import distributed
        return self._shards.join([distributed.all_gather_array(v, self._parallel[1])
                                  for v in values])

    def params(self):
        """Current parameters, as a dict of numpy arrays (copies). With
        parallel="zero*", gathered from every rank's shards: a collective
        call, made by every rank."""
        return _pytree.unflatten(self._names, self._whole(self._kept[:self._n_params]))

    def state(self):
        """Optimizer state: {slot name: params-shaped dict} (gathered like
        params() with parallel="zero*")."""
        n = self._n_params
        return {name: _pytree.unflatten(self._names,
                                        self._whole(self._kept[n * (1 + i):n * (2 + i)]))
                for i, name in enumerate(self._state_names)}

    def _leaf_names(self):
        return _pytree.leaf_names(self._names)

    @property
    def lr(self):
        """The learning rate (of the first parameter group); setting it sets
        every group's."""
        return self.param_groups[0]["lr"]

    @lr.setter
    def lr(self, value):
        for g in self.param_groups:
            g["lr"] = float(value)

    def _lrs(self):
        lrs = [float(g["lr"]) for g in self.param_groups]
        return np.float64(lrs[0]) if len(lrs) == 1 else np.array(lrs, np.float64)

    @property
    def loss_scale(self):
        """The current loss scale (a float), None without loss scaling."""
        if "scaler/scale" not in self._step_state:
            return None
        return float(self._step_value("scaler/scale"))

    @property
    def applied_steps(self):
        """Updates applied so far: step_count less the steps that loss
        scaling skipped (without loss scaling, step_count)."""
        if "scaler/applied_steps" not in self._step_state:
            return self.step_count
        return int(self._step_value("scaler/applied_steps"))

    def _step_value(self, name):
        index = self._kept[len(self._kept) - len(self._step_state) +
                           self._step_state.index(name)]
        return self._compiled._exe.persistent(index)

    def _state_keys(self):
        """Keys of the kept arguments in argument order: "params/<name>",
        then "<slot>/<name>" per optimizer state slot (names: dotted pytree
        paths, "l1.w" for params["l1"]["w"]), then the step-wide state
        ("scaler/scale", "scaler/growth_tracker", "scaler/applied_steps")."""
        leaf = _pytree.leaf_names(self._names)
        if len(set(leaf)) != len(leaf):
            seen, repeated = set(), []
            for n in leaf:
                if n in seen:
                    repeated.append(n)
                seen.add(n)
            raise CompileError(f"parameter names {sorted(set(repeated))} stand for more than "
                               "one parameter (keys containing '.' clash with nesting); "
                               "rename them to use state_dict()")
        if self._shards is not None:  # this rank's shards (distributed.save_sharded)
            leaf = [f"shard{b}" for b in range(len(self._shards.members))]
        keys = []
        for section in ["params"] + list(self._state_names):
            keys += [f"{section}/{n}" if n else section for n in leaf]
        return keys + self._step_state

    def state_dict(self):
        """Parameters, optimizer state, step count, lr, dropout seed base and
        optimizer kind, as {name: numpy array or scalar} (copies):
        "params/<name>", "<slot>/<name>" (momentum; exp_avg, exp_avg_sq),
        with loss scaling "scaler/scale", "scaler/growth_tracker" and
        "scaler/applied_steps", then "step", "lr", "seed", "optimizer".
        With parallel="zero*" the tensors are whole, gathered from every
        rank's shards (every rank calls it);
        tilefuse.distributed.save_sharded keeps the shards instead."""
        if self._shards is None:
            return self._shard_state_dict()
        n, leaf = self._n_params, _pytree.leaf_names(self._names)
        out = {}
        for i, section in enumerate(["params"] + list(self._state_names)):
            whole = self._whole(self._kept[n * i:n * (i + 1)])
            out.update({f"{section}/{name}" if name else section: v
                        for name, v in zip(leaf, whole)})
        exe = self._compiled._exe
        rest = self._kept[n * (1 + len(self._state_names)):]
        out.update({key: exe.persistent(a) for a, key in zip(rest, self._step_state)})
        out.update(self._meta())
        return out

    def _meta(self):
        return {"step": np.int64(self.step_count),
                "lr": self._lrs(),  # one per parameter group when there are several
                "seed": np.int64(self._seed), "optimizer": np.str_(self._optimizer_kind)}

    def _shard_state_dict(self):
        """The kept arguments as they are (a ZeRO step: this rank's shards,
        "params/shard<b>", "<slot>/shard<b>") and the step's counters."""
        exe = self._compiled._exe
        out = {key: exe.persistent(a) for a, key in zip(self._kept, self._state_keys())}
        out.update(self._meta())
        return out

    def _to_shards(self, state):
        """A whole-tensor state dict as this rank's shards (ZeRO)."""
        from . import distributed
        who = "TrainStep.load_state_dict"
        leaf = _pytree.leaf_names(self._names)
        out = dict(state)
        _, _, rank, _ = distributed.world(self._parallel[1])
        for section in ["params"] + list(self._state_names):
            keys = [f"{section}/{name}" if name else section for name in leaf]
            missing = [k for k in keys if k not in state]
            if missing:
                raise CompileError(f"{who}: the state dict has no {missing[:3]} (a ZeRO step "
                                   "takes whole tensors, as state_dict() gives them)")
            arrays = [_check_array(state, key, tuple(shape), np.dtype(dtype), who)
                      for key, shape, dtype in zip(keys, self._shards.shapes, self._shards.dtypes)]
            for key in keys:
                del out[key]
            for b, shard in enumerate(self._shards.split(arrays, rank)):
                out[f"{section}/shard{b}"] = shard
        return out

    def load_state_dict(self, state):
        """Restores a state_dict() (of this or another step compiled from the
        same loss function, example shapes and optimizer): every key must be
        there with its shape and dtype, else CompileError naming it; nothing
        changes unless all of them check out. A ZeRO step takes whole
        tensors (any world size's state_dict(), or a one-process step's)
        and keeps its shards of them, or its own shards (load_sharded)."""
        who = "TrainStep.load_state_dict"
        if (self._shards is not None and isinstance(state, dict) and
                "params/shard0" not in state):
            state = self._to_shards(state)
        keys = self._state_keys()
        _check_keys(state, keys + ["step", "lr", "seed", "optimizer"], who)
        values = [_check_array(state, key, shape, dtype, who)
                  for key, (shape, dtype) in zip(keys, self._kept_sigs)]
        step = _check_scalar(state, "step", "iu", who)
        if len(self.param_groups) == 1:
            lrs = [_check_scalar(state, "lr", "fiu", who)]
        else:
            lrs = _check_array(state, "lr", (len(self.param_groups),), np.float64, who)
        seed = _check_scalar(state, "seed", "iu", who)
        kind = _check_scalar(state, "optimizer", "U", who)
        if kind != self._optimizer_kind:
            raise CompileError(f"{who}: the state dict is of a {kind!r} optimizer, this step "
                               f"was compiled with {self._optimizer_kind!r}")
        if step < 0:
            raise CompileError(f"{who}: 'step' must be >= 0, got {step}")
        exe = self._compiled._exe
        for a, value in zip(self._kept, values):
            exe.make_persistent(a, value)
        self.step_count = int(step)
        for g, lr in zip(self.param_groups, lrs):
            g["lr"] = float(lr)
        self._seed = int(seed)


def compile_train_step(loss_fn, params, example_batch, optimizer, device="auto", seed=0,
                       memory_budget=None, precision="fp32", keep_fp32=(), loss_scale="auto",
                       accumulate=1, state=None, parallel=None, process_group=None,
                       bucket_bytes=None):
    """Compiles loss_fn(params, batch) or loss_fn(params, batch, seed) into one
    training step. `params` and `example_batch` are (nested) dicts of numpy
    arrays; `seed` (when loss_fn takes it) is a 0-d int64 tensor equal to
    `seed + t - 1` at step t, for dropout.

    `memory_budget` (bytes): the most the step may allocate: its arena
    (`step.memory_plan().peak`), the parameters and optimizer state it
    keeps, and on a GPU the batch's copy. Over it, the step is compiled
    again with rematerialization allowed to add more bytes moved (25%, then
    100% of the step's, instead of 5%); if it still does not fit,
    CompileError says by how much and what is live at the peak (then:
    a smaller batch, or `tilefuse.checkpoint` around blocks).

    `precision` ("fp32", "bf16", "fp16"): the mixed-precision policy of
    Graph.autocast applied to the loss before differentiation; parameters
    and optimizer state stay f32 (master weights), their gradients come
    back in f32. `keep_fp32`: op kinds to keep in f32.

    `loss_scale`: "auto" (dynamic loss scaling for fp16, none otherwise),
    "dynamic" (tilefuse.optim.LossScale()), a tilefuse.optim.LossScale, or
    None (off). See LossScale; `step.loss_scale` is the current scale.

    `accumulate=k`: gradient accumulation in one step. Every batch leaf
    stacks k micro-batches along a new first dimension ([k, b, ...]); the
    step's loss is the mean of their losses, its gradients the mean of
    theirs (as k backward passes of loss / k in PyTorch), and the optimizer
    updates once.

    `state`: model state that the forward pass updates and no optimizer
    touches (batch norm's running statistics), a (nested) dict of arrays.
    The loss function then takes it after the parameters and returns it
    updated: loss_fn(params, state, batch[, seed]) -> (loss, new state of
    the same structure, shapes and dtypes). The step keeps it between calls;
    `step.state_dict()` holds it under "state/<name>".

    `parallel="ddp"`: data parallel over `process_group` (a torch.distributed
    group; None: the default one, which must be initialised, e.g. under
    torchrun). Every rank runs this same call on its own part of the batch
    (`example_batch` is one rank's part); the step averages the gradients
    over the ranks, all-reduced in buckets of up to `bucket_bytes` (25 MiB)
    started as soon as the backward pass has produced them, so every rank
    applies the same update. Parameters start as rank 0's. The step returns
    this rank's loss, as PyTorch's DistributedDataParallel does. On the CPU
    the collectives run on the process group (gloo); on a GPU on NCCL,
    loaded at run time (not yet run on a GPU).
    `parallel="zero1"`/`"zero2"` (one program: ZeRO stages 1 and 2):
    each rank keeps one shard of the parameters and of the optimizer state,
    all-gathers the parameters at the start of the step (`bucket_bytes` per
    shard), reduce-scatters the gradients and updates its shards; "zero3"
    also gathers the parameters again in the backward pass, so none stays
    gathered from the forward pass. `step.params()` and `step.state()`
    gather whole tensors (every rank calls them); `state_dict()` is this
    rank's shards (tilefuse.distributed.save_sharded / load_sharded: one
    file per rank and an index, loadable at another world size)."""
    device = resolve_device(device)
    parallel_group = _parallel_config(parallel, process_group, bucket_bytes)
    graph, names, param_leaves, batch_spec, uses_seed, step_state, groups = _build_train_step(
        loss_fn, params, example_batch, optimizer, seed, precision, keep_fp32, loss_scale,
        accumulate, state, parallel=parallel_group)

    def build():
        return TrainStep(graph, names, [p.copy() for p in param_leaves],
                         optimizer.state_names(), step_state, batch_spec, groups, seed,
                         uses_seed, device, optimizer._config()["kind"],
                         parallel=None if parallel is None else (parallel, process_group))
    if memory_budget is None:
        return build()
    return _fit_memory_budget(build, int(memory_budget), param_leaves, optimizer,
                              example_batch, device)


def _parallel_config(parallel, process_group, bucket_bytes, world_size=None):
    """The train step config's data-parallel fields, or None for one
    process. The group's size comes from `world_size` (a graph only) or the
    initialised torch.distributed group."""
    if parallel is None:
        if process_group is not None or bucket_bytes is not None:
            raise CompileError("process_group= and bucket_bytes= need parallel=\"ddp\"")
        return None
    if parallel not in ("ddp", "zero1", "zero2", "zero3"):
        raise CompileError(f"parallel must be \"ddp\", \"zero1\", \"zero2\", \"zero3\" or None, "
                           f"got {parallel!r}")
    if world_size is None:
        from . import distributed
        world_size = distributed.world(process_group)[3]
    config = {"parallel": parallel, "group": "dp", "group_size": int(world_size)}
    if bucket_bytes is not None:
        if not (isinstance(bucket_bytes, int) and bucket_bytes >= 1):
            raise CompileError(f"bucket_bytes must be a whole number >= 1, got {bucket_bytes!r}")
        config["bucket_bytes"] = bucket_bytes
    return config


def _resolve_loss_scale(loss_scale, precision):
    """The LossScale a step compiles in, or None."""
    if isinstance(loss_scale, LossScale):
        return loss_scale
    if isinstance(loss_scale, str) and loss_scale == "auto":
        return LossScale() if str(precision) in ("fp16", "f16", "float16") else None
    if isinstance(loss_scale, str) and loss_scale == "dynamic":
        return LossScale()
    if loss_scale is None or loss_scale is False:
        return None
    raise CompileError(f"loss_scale must be 'auto', 'dynamic', a tilefuse.optim.LossScale or "
                       f"None, got {loss_scale!r}")


# Shares of the step's bytes moved that rematerialization may add, tried in
# turn until a step fits its memory budget (the compiler's default first).
_REMAT_SHARES = (None, "25", "100")


def _size(n):
    """Bytes for people: 300 bytes, 12.0 KiB, 3.2 MiB, 1.5 GiB."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"


def _fit_memory_budget(build, budget, param_leaves, optimizer, example_batch, device):
    import os
    if budget <= 0:
        raise CompileError(f"memory_budget must be a positive number of bytes, got {budget}")
    kept = sum(p.nbytes for p in param_leaves) * (1 + len(optimizer.state_names()))
    batch_leaves, _ = _pytree.flatten(example_batch)
    batch = sum(np.asarray(b).nbytes for b in batch_leaves) if device == "cuda" else 0
    previous = os.environ.get("TILEFUSE_REMATERIALIZE")
    tried = []
    best = None  # (need, plan) of the smallest step tried
    try:
        for share in _REMAT_SHARES:
            if share is None:
                if previous is None:
                    os.environ.pop("TILEFUSE_REMATERIALIZE", None)
                else:
                    os.environ["TILEFUSE_REMATERIALIZE"] = previous
            else:
                os.environ["TILEFUSE_REMATERIALIZE"] = share
            step = build()
            plan = step.memory_plan()
            need = plan.peak + kept + batch
            tried.append((share or previous or "5", need))
            if need <= budget:
                return step
            if best is None or need < best[0]:
                best = (need, plan)
    finally:
        if previous is None:
            os.environ.pop("TILEFUSE_REMATERIALIZE", None)
        else:
            os.environ["TILEFUSE_REMATERIALIZE"] = previous
    need, plan = best
    live = plan.live_bytes()
    at = max(range(len(live)), key=live.__getitem__) - 1
    biggest = sorted((b for b in plan.buffers if b.first <= at <= b.last),
                     key=lambda b: -b.bytes)[:5]
    rows = "; ".join(f"{b.name} {b.dtype}{list(b.shape)} {_size(b.bytes)} ({b.phase}, "
                     f"{b.op}{' at ' + b.line if b.line else ''})" for b in biggest)
    where = plan.step_phases[at] if 0 <= at < plan.steps else "the results"
    raise CompileError(
        f"the training step needs {need} bytes, {need - budget} ({_size(need - budget)}) "
        f"more than memory_budget={budget}: arena {plan.peak} (its lower bound "
        f"{plan.lower_bound}), parameters and optimizer state {kept}"
        + (f", the batch {batch}" if batch else "")
        + f"; rematerialization tried at "
        f"{', '.join(f'{s}% ({n} bytes)' for s, n in tried)} of the bytes moved, the "
        f"smallest shown. Live at the peak (step {at}, {where}): {rows}. Use a smaller "
        "batch or tilefuse.checkpoint around blocks")


def train_step_graph(loss_fn, params, example_batch, optimizer, seed=0, precision="fp32",
                     keep_fp32=(), loss_scale="auto", accumulate=1, state=None, parallel=None,
                     process_group=None, world_size=None, bucket_bytes=None):
    """The training-step Graph compile_train_step compiles, without
    compiling it (for Graph.export): arguments (parameters, optimizer state
    per parameter and state name, [the loss scaler's scale, growth tracker
    and applied steps,] [model state,] batch leaves, [seed,] step, lr),
    results (loss, new parameters, new state[, new scaler state][, new
    model state]). With parallel="ddp", the gradients are averaged over a
    group of `world_size` ranks (default: the size of `process_group`, or of
    the initialised default group)."""
    if parallel is not None and world_size is None:
        from . import distributed
        world_size = distributed.world(process_group)[3]
    config = _parallel_config(parallel, process_group, bucket_bytes, world_size)
    return _build_train_step(loss_fn, params, example_batch, optimizer, seed, precision,
                             keep_fp32, loss_scale, accumulate, state, parallel=config)[0]


def _accumulating(loss_fn, k, example_batch, uses_seed):
    """loss_fn over k micro-batches stacked along a new leading dimension
    of every batch leaf: the mean of the k losses, so the gradients are the
    mean of the micro-batches' (PyTorch's loss / k per backward, summed).
    Micro-batch i of a seeded loss gets seed * k + i."""
    if not (isinstance(k, int) and k >= 1):
        raise CompileError(f"accumulate must be a whole number >= 1, got {k!r}")
    leaves, spec = _pytree.flatten(example_batch)
    for leaf in leaves:
        shape = np.shape(leaf)
        if not shape or shape[0] != k:
            raise CompileError(f"accumulate={k}: every batch leaf must stack the {k} "
                               f"micro-batches along its first dimension, got shape "
                               f"{tuple(shape)}")

    def accumulated(params, batch, *seed):
        flat, _ = _pytree.flatten(batch)
        total = None
        for i in range(k):
            micro = _pytree.unflatten(spec, [leaf[i] for leaf in flat])
            extra = (seed[0] * k + i,) if uses_seed else ()
            loss = loss_fn(params, micro, *extra)
            total = loss if total is None else total + loss
        return total / k
    if not uses_seed:
        return lambda params, batch: accumulated(params, batch)
    return accumulated


def _with_state(loss_fn, state_spec):
    """loss_fn(params, state, batch[, seed]) -> (loss, new state) as a
    function of flat state leaves returning (loss, *new state leaves),
    checking that the new state has the state's structure."""
    def flat(params, state_leaves, batch, *seed):
        state = _pytree.unflatten(state_spec, list(state_leaves))
        out = loss_fn(params, state, batch, *seed)
        if not isinstance(out, tuple) or len(out) != 2:
            raise CompileError("with state=, the loss function returns (loss, new state), got "
                               f"{type(out).__name__}")
        leaves, spec = _pytree.flatten(out[1])
        if spec != state_spec:
            raise CompileError("the loss function's new state does not have the structure "
                               "(keys, nesting) of the state it was given")
        return (out[0], *leaves)
    return flat


def _build_train_step(loss_fn, params, example_batch, optimizer, seed, precision="fp32",
                      keep_fp32=(), loss_scale="auto", accumulate=1, state=None, parallel=None):
    if not hasattr(optimizer, "_config"):
        raise CompileError(f"optimizer must be a tilefuse.optim optimizer, got {optimizer!r}")
    config = optimizer._config()
    if parallel:
        config.update(parallel)
    scaler = _resolve_loss_scale(loss_scale, precision)
    if scaler:
        config.update(scaler._config())  # (checks the fields first)
    step_state = scaler._state() if scaler else []
    try:
        n_args = len(inspect.signature(loss_fn).parameters)
    except (TypeError, ValueError):
        n_args = 2
    state_leaves = []
    if state is not None:
        if accumulate != 1:
            raise CompileError("compile_train_step: accumulate=k with state= (model state such "
                               "as batch norm statistics) is not supported yet; use "
                               "accumulate=1")
        state_leaves, state_spec = _pytree.flatten(state)
        state_leaves = [np.asarray(v) for v in state_leaves]
        step_state = step_state + [(f"state/{n}" if n else "state", v) for n, v in zip(
            _pytree.leaf_names(state_spec), state_leaves)]
        n_args -= 1
        loss_fn = _with_state(loss_fn, state_spec)
    uses_seed = n_args >= 3
    param_leaves, names = _pytree.flatten(params)
    param_leaves = [np.asarray(p) for p in param_leaves]
    for p in param_leaves:
        if p.dtype.kind != "f":
            raise CompileError(f"parameters must be floating point, got a {p.dtype} array")
    _, batch_spec = _pytree.flatten(example_batch)
    param_names = _pytree.leaf_names(names)
    resolved = optimizer._resolve_groups(param_names, param_leaves)
    if resolved is None:
        groups = [{"params": param_names, "lr": float(optimizer.lr),
                   "weight_decay": float(optimizer.weight_decay)}]
    else:
        member, decay, lrs, group_names = resolved
        config.update(param_group=member, param_weight_decay=decay, num_groups=len(lrs))
        groups = [{"params": n, "lr": lr, "weight_decay": float(
            optimizer.param_groups[i].get("weight_decay", optimizer.weight_decay))}
            for i, (n, lr) in enumerate(zip(group_names, lrs))]
    who = getattr(loss_fn, "__name__", "")
    who = f"the loss function {who}" if who.isidentifier() else "the loss function"
    if accumulate != 1:
        loss_fn = _accumulating(loss_fn, accumulate, example_batch, uses_seed)
    args = [params] + ([state_leaves] if state is not None else []) + [example_batch] + (
        [np.int64(seed)] if uses_seed else [])
    loss_graph = trace(loss_fn, *args)
    loss_graph._check_loss("compile_train_step", who)
    if precision != "fp32" or keep_fp32:
        loss_graph = loss_graph.autocast(precision, keep_fp32)
    graph = _short_errors(loss_graph._graph.train_step, len(param_leaves), config,
                          len(state_leaves))

    # The artifact's argument names: the state_dict() keys of TrainStep.
    batch_names = ["batch/" + n if n else "batch" for n in _pytree.leaf_names(batch_spec)]
    shards = [list(m) for m in graph.shard_layout]
    kept_names = [f"shard{b}" for b in range(len(shards))] if shards else param_names
    argument_names = ([f"params/{n}" for n in kept_names] +
                      [f"{slot}/{n}" for slot in optimizer.state_names() for n in kept_names] +
                      [name for name, _ in step_state] +
                      batch_names + (["seed"] if uses_seed else []) + ["step"] +
                      (["lr"] if len(groups) == 1 else [f"lr/{i}" for i in range(len(groups))]))
    # step_state: the initial values of the step-wide state, so a loaded
    # artifact's set_state() can take just the parameters and optimizer state.
    interface = {"kind": "train_step", "argument_names": argument_names,
                 "batch_spec": _pytree.spec_to_json(batch_spec), "uses_seed": uses_seed,
                 "batch_shapes": [list(np.shape(x)) for x in _pytree.flatten(example_batch)[0]],
                 "optimizer": config["kind"],
                 # ZeRO: the parameter indices of each shard (the kept
                 # parameters are this rank's shards).
                 "shards": shards,
                 # (model state, "state/...", has no default: it is set whole)
                 "step_state": [[name, value.item(), str(value.dtype)]
                                for name, value in step_state if not name.startswith("state")]}
    return (Graph(graph, interface=interface), names, param_leaves, batch_spec, uses_seed,
            step_state, groups)
