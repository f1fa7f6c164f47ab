"""PyTorch in, PyTorch out: whole training steps from nn.Modules.

`from_torch(module, example_inputs, optimizer)` captures the module's
forward pass and loss as an ATen graph (make_fx over torch.func's
functional_call, parameters and buffers by their state_dict names), turns
it into a tilefuse graph (aten_import) and compiles one training step of
it (forward, backward by tilefuse's autodiff, the optimizer) with
compile_train_step. Parameters live in the runtime; `step(*inputs)` runs
one step and returns the loss.
"""
import math
import os

import numpy as np

from ._core import CompileError


def _torch():
    try:
        import torch
    except ImportError:
        raise CompileError("tilefuse's PyTorch integration needs PyTorch (pip install torch)") \
            from None
    return torch


def _numpy(x):
    torch = _torch()
    if isinstance(x, torch.Tensor):
        t = x.detach()
        if t.device.type != "cpu":
            t = t.cpu()
        if t.dtype == torch.bfloat16:
            t = t.float()
        return t.numpy()
    return np.asarray(x)


def _check_values_readable(module, example_inputs):
    """from_torch reads the parameters, buffers and example inputs into
    host memory (the step keeps its own copies): tensors without values
    there (the meta device, say) are refused by name."""
    torch = _torch()
    named = list(module.named_parameters()) + list(module.named_buffers()) + [
        (f"example input {i}", x) for i, x in enumerate(example_inputs)]
    for name, t in named:
        if isinstance(t, torch.Tensor) and t.device.type not in ("cpu", "cuda"):
            raise CompileError(
                f"from_torch: {name} is a tensor on the {t.device.type} device, whose values "
                "tilefuse cannot read; move the module and inputs to the CPU or a CUDA GPU "
                "first (module.to('cpu'))")


def _loss_module(module, loss_fn):
    """An nn.Module whose forward is loss_fn(module, *inputs), or
    module(*inputs); `module` is its submodule "m"."""
    torch = _torch()

    class Loss(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = module

        def forward(self, *inputs):
            return loss_fn(self.m, *inputs) if loss_fn else self.m(*inputs)
    return Loss()


def capture(module, example_inputs, loss_fn=None):
    """(gm, names, buffers, state): the ATen FX graph of the module's loss,
    whose placeholders are the trained parameters (in `names` order, tied
    ones once), then the buffers the forward pass updates in place (`state`,
    in order: batch norm's running statistics), then the inputs; it returns
    (loss, *new values of `state`) when there is state, else the loss. Other
    buffers and frozen parameters (requires_grad False) are captured as
    constants. The module itself is left as it was."""
    torch = _torch()
    from torch.fx.experimental.proxy_tensor import make_fx
    from torch.func import functional_call

    # Parameters that do not require a gradient are frozen: constants of
    # the step, as buffers are (PyTorch's optimizers skip them).
    params = {n: p for n, p in module.named_parameters() if p.requires_grad}
    buffers = dict(module.named_buffers())
    buffers.update({n: p for n, p in module.named_parameters() if not p.requires_grad})
    names = list(params)
    wrapper = _loss_module(module, loss_fn)
    n = len(names)

    def run(params, buffers, inputs):
        values = {"m." + k: v for k, v in zip(names, params)}
        values.update({"m." + k: v for k, v in buffers.items()})
        return functional_call(wrapper, values, tuple(inputs))

    with torch.no_grad():
        # One eager run on copies of the buffers: its loss, and which
        # buffers it updates in place (their values change: batch norm's
        # running statistics, whose op does not move version counters).
        copies = {k: v.detach().clone() for k, v in buffers.items()}
        out = run([p.detach() for p in params.values()], copies, example_inputs)
        state = [k for k, v in copies.items()
                 if v.shape != buffers[k].shape or not torch.equal(v, buffers[k].detach())]
    if not isinstance(out, torch.Tensor) or out.ndim != 0 or not out.dtype.is_floating_point:
        raise CompileError(
            "from_torch: module(*inputs) must return the scalar loss (a 0-d float tensor), got "
            f"{type(out).__name__}{list(out.shape) if isinstance(out, torch.Tensor) else ''}; "
            "pass loss_fn=lambda module, *inputs: ... for modules that return something else")
    m = len(state)

    def loss(*flat):
        current = dict(buffers)
        current.update(zip(state, flat[n:n + m]))
        return run(flat[:n], current, flat[n + m:])

    with torch.no_grad():
        example = ([p.detach() for p in params.values()] +
                   [buffers[k].detach().clone() for k in state] + list(example_inputs))
        # Functionalized: in-place updates (through views too) become
        # plain ops, as the importer converts them, and the state's
        # updates copies into its placeholders at the end. Ops the importer
        # has no conversion for are reduced with PyTorch's decompositions
        # (the backend's table), the others kept whole.
        with _compiling(), _keep_attention_whole():
            gm = make_fx(torch.func.functionalize(loss, remove="mutations"),
                         decomposition_table=_capture_decompositions(),
                         record_stack_traces=True)(*example)
    if state:
        _state_as_outputs(gm, n, m)
    # Values nothing reads (batch norm's empty reserve buffer) go.
    gm.graph.eliminate_dead_code()
    gm.recompile()
    return gm, names, buffers, state


def _state_as_outputs(gm, n, m):
    """The copies into placeholders n..n+m (the state buffers' updates,
    which functionalization puts at the end) become outputs after the loss."""
    torch = _torch()
    placeholders = [p for p in gm.graph.nodes if p.op == "placeholder"]
    targets = placeholders[n:n + m]
    new = {}
    for node in list(gm.graph.nodes):
        if node.op == "call_function" and node.target is torch.ops.aten.copy_.default and \
                node.args[0] in targets:
            new[node.args[0]] = node.args[1]
            node.replace_all_uses_with(node.args[1])
            gm.graph.erase_node(node)
    output = next(node for node in gm.graph.nodes if node.op == "output")
    loss = output.args[0]
    # A buffer the forward pass rebinds instead of updating in place keeps
    # its value (no copy), as it would in PyTorch's module.
    output.args = ((loss, *[new.get(t, t) for t in targets]),)
    gm.graph.lint()
    gm.recompile()


class _compiling:
    """While from_torch captures a module, torch.compiler.is_compiling() is
    True, as it is under torch.compile: models take the paths they keep for
    compilers (HF transformers, for one, then never reads a tensor's values
    to choose a path, which a captured graph could not follow)."""

    def __enter__(self):
        import torch.compiler
        self._module = torch.compiler
        self._before = getattr(torch.compiler, "_is_compiling_flag", None)
        if self._before is not None:
            torch.compiler._is_compiling_flag = True

    def __exit__(self, *exc):
        if self._before is not None:
            self._module._is_compiling_flag = self._before


def _keep_attention_whole():
    """A mode under which F.scaled_dot_product_attention with dropout is
    captured as one op (tilefuse::attention_with_dropout), which the
    importer makes the fused attention with dropout: PyTorch writes it out
    on the CPU (matmul, softmax, bernoulli) before any converter sees it.
    Only for from_torch, which differentiates the graph itself: the op has
    no PyTorch backward."""
    torch = _torch()
    from torch.overrides import TorchFunctionMode

    from .aten.attention import attention_with_dropout
    sdpa = torch.nn.functional.scaled_dot_product_attention

    class KeepAttentionWhole(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if func is sdpa:
                call = _sdpa_arguments(*args, **kwargs)
                if call["dropout_p"] > 0:
                    return attention_with_dropout(**call)
            return func(*args, **kwargs)

    return KeepAttentionWhole()


def _sdpa_arguments(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False,
                    scale=None, enable_gqa=False):
    return {"q": query, "k": key, "v": value, "attn_mask": attn_mask,
            "dropout_p": float(dropout_p), "is_causal": bool(is_causal),
            "scale": None if scale is None else float(scale), "enable_gqa": bool(enable_gqa)}


def _capture_decompositions():
    """from_torch's decompositions: the backend's (_decompositions), for
    the ops the importer does not convert whole."""
    from . import aten_import
    from torch._decomp import decomposition_table
    table = {op: fn for op, fn in _decompositions().items()
             if aten_import._conversion(op) is None}
    # Batch norm in training mode updates its running statistics in place,
    # but native_batch_norm's schema does not say so: functionalization
    # sees the update only through PyTorch's decomposition (statistics,
    # then copy_ into the buffers). The backend leaves multi-output ops
    # whole for its partitions; from_torch converts the graph whole.
    batch_norm = _torch().ops.aten.native_batch_norm.default
    if batch_norm in decomposition_table:
        table[batch_norm] = decomposition_table[batch_norm]
    return table


def _source_line(node):
    """'File "...", line N, in f' of the user's code that made FX node
    `node`, or None."""
    trace = (node.meta.get("stack_trace") or "").strip().splitlines()
    frames = [t.strip() for t in trace if t.strip().startswith("File")]
    for frame in reversed(frames):
        if "/torch/" not in frame and "/tilefuse/" not in frame:
            return frame
    return frames[-1] if frames else None


class TorchTrainStep:
    """A compiled training step of an nn.Module (from_torch). `step(*inputs)`
    runs forward, backward and the update and returns the loss (a float)
    computed before the update. `state_dict()` holds the module's current
    parameters (and its buffers) under its own names, so
    `module.load_state_dict(step.state_dict())` or `step.copy_to(module)`
    brings them back; `train_step` is the tilefuse TrainStep underneath
    (optimizer state, report(), memory_plan(), numerics_report())."""

    def __init__(self, module, train_step, names, torch_optimizer=None, state=()):
        self.train_step = train_step
        self._names = names
        # A torch.optim optimizer given to from_torch is followed at every
        # step: its groups' learning rates (what LR schedulers change) are
        # read before each call; a change to anything compiled into the
        # step (momentum, betas, eps, weight decay) is refused.
        self._torch_optimizer = torch_optimizer
        self._compiled_options = (_compiled_options(torch_optimizer)
                                  if torch_optimizer is not None else None)
        # Every state_dict key of the module -> its parameter's name (tied
        # weights share one), or None for buffers.
        torch = _torch()
        by_id = {id(p): n for n, p in module.named_parameters() if p.requires_grad}
        self._keys = {}
        for key, value in module.state_dict(keep_vars=True).items():
            self._keys[key] = by_id.get(id(value))
        self._buffers = {k: v.detach().clone() for k, v in module.state_dict().items()
                         if self._keys[k] is None}
        # Buffers the step updates (model state), by state_dict key.
        self._state = list(state)
        self._torch = torch

    def __call__(self, *inputs):
        if self._torch_optimizer is not None:
            self._follow_torch_optimizer()
        return self.train_step(tuple(_numpy(x) for x in inputs))

    def _follow_torch_optimizer(self):
        opt = self._torch_optimizer
        now = _compiled_options(opt)
        if now != self._compiled_options:
            changed = sorted({k for before, after in zip(self._compiled_options, now)
                              for k in before if before[k] != after.get(k)}
                             | ({"param_groups"} if len(now) != len(self._compiled_options)
                                else set()))
            raise CompileError(
                f"from_torch: the torch optimizer's {', '.join(changed)} changed after the "
                "step was compiled; only each group's lr is read at every step (LR schedulers "
                "work), other options are compiled in: call from_torch again")
        for group, torch_group in zip(self.train_step.param_groups, opt.param_groups):
            group["lr"] = float(torch_group["lr"])

    @property
    def lr(self):
        return self.train_step.lr

    @lr.setter
    def lr(self, value):
        self.train_step.lr = float(value)

    @property
    def param_groups(self):
        """[{"params": names, "lr": ..., "weight_decay": ...}]: set a
        group's "lr" between steps for a schedule."""
        return self.train_step.param_groups

    def parameters(self):
        """{parameter name: numpy array} (copies; tied weights once)."""
        return self.train_step.params()

    def state_dict(self):
        """The module's state_dict keys -> torch tensors: the current
        parameters (a tied weight under each of its names) and the
        buffers."""
        params = self.train_step.params()
        kept = self.train_step.state_dict() if self._state else {}
        out = {}
        for key, name in self._keys.items():
            if key in self._state:
                out[key] = self._torch.from_numpy(np.array(kept["state/" + key]))
            elif name is None:
                out[key] = self._buffers[key].clone()
            else:
                out[key] = self._torch.from_numpy(np.array(params[name]))
        return out

    def copy_to(self, module):
        """Writes the current parameters into `module` (in place)."""
        module.load_state_dict(self.state_dict())
        return module

    def export(self, path, target="cpu"):
        """The whole step as an ahead-of-time artifact (TrainStep.export);
        `tilefuse.load(path).load_state_dict(step.train_step.kept_state())`
        continues from the current parameters."""
        self.train_step.export(path, target)

    def report(self, profile=False):
        return self.train_step.report(profile)

    def memory_plan(self):
        return self.train_step.memory_plan()


# Options of a torch optimizer's groups that the compiled step bakes in (lr
# is an operand of the step and is read at every call).
_BAKED_OPTIONS = ("momentum", "nesterov", "dampening", "betas", "eps", "weight_decay",
                  "amsgrad", "maximize", "alpha", "centered")


def _compiled_options(optimizer):
    """Per group of a torch optimizer: its options compiled into the step
    and its parameters (by identity)."""
    return [dict({k: g[k] for k in _BAKED_OPTIONS if k in g},
                 params=tuple(id(p) for p in g["params"])) for g in optimizer.param_groups]


def optimizer_from_torch(optimizer, module):
    """The tilefuse.optim optimizer doing what torch.optim `optimizer`
    (SGD, Adam, AdamW or RMSprop over `module`'s parameters) does, its param_groups
    kept (by parameter name: lr and weight_decay per group). Options that
    differ between groups other than those, and options tilefuse does not
    have (amsgrad, maximize, dampening, ...), are a CompileError."""
    from . import optim
    torch = _torch()
    kinds = {torch.optim.SGD: "sgd", torch.optim.Adam: "adam", torch.optim.AdamW: "adamw",
             torch.optim.RMSprop: "rmsprop"}
    kind = kinds.get(type(optimizer))
    if kind is None:
        raise CompileError(f"from_torch converts torch.optim.SGD, Adam, AdamW and RMSprop, not "
                           f"{type(optimizer).__name__}")
    names = {id(p): n for n, p in module.named_parameters() if p.requires_grad}
    frozen = {id(p) for p in module.parameters() if not p.requires_grad}
    groups, shared = [], {}
    same = {"sgd": ("momentum", "nesterov"), "adam": ("betas", "eps"),
            "adamw": ("betas", "eps"), "rmsprop": ("alpha", "eps", "momentum", "centered")}[kind]
    refused = {"amsgrad": False, "maximize": False, "dampening": 0, "differentiable": False}
    for i, g in enumerate(optimizer.param_groups):
        for key, ok in refused.items():
            if key in g and g[key] != ok:
                raise CompileError(f"from_torch: param_groups[{i}] has {key}={g[key]!r}, "
                                   "which tilefuse's optimizers do not support")
        for key in same:
            if shared.setdefault(key, g[key]) != g[key]:
                raise CompileError(f"from_torch: param_groups differ in {key} "
                                   f"({shared[key]!r} and {g[key]!r}); tilefuse's groups "
                                   "differ only in lr and weight_decay")
        missing = [p for p in g["params"] if id(p) not in names and id(p) not in frozen]
        if missing:
            raise CompileError(f"from_torch: param_groups[{i}] holds {len(missing)} tensors "
                               "that are not parameters of the module")
        groups.append({"params": [names[id(p)] for p in g["params"] if id(p) in names],
                       "lr": float(g["lr"]), "weight_decay": float(g["weight_decay"])})
    if kind == "sgd":
        return optim.SGD(lr=groups[0]["lr"], momentum=shared["momentum"],
                         nesterov=shared["nesterov"], param_groups=groups)
    if kind == "rmsprop":
        return optim.RMSprop(lr=groups[0]["lr"], alpha=shared["alpha"], eps=shared["eps"],
                             momentum=shared["momentum"], centered=shared["centered"],
                             param_groups=groups)
    cls = optim.Adam if kind == "adam" else optim.AdamW
    return cls(lr=groups[0]["lr"], betas=tuple(shared["betas"]), eps=shared["eps"],
               param_groups=groups)


def _autograd_function_call(error):
    """Where `error` is PyTorch's functional transforms refusing a
    torch.autograd.Function in a capture: the Function's name (or the
    source line applying it); else None."""
    import linecache
    torch = _torch()
    torch_dir = os.path.dirname(os.path.abspath(torch.__file__))
    # What PyTorch's functional transforms say of an autograd.Function
    # (without setup_context; with one: functionalize has no rule for it).
    refusals = ("autograd.Function with functorch transforms",
                "Functionalize rule for custom_function_call")
    e, seen = error, set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if any(r in str(e) for r in refusals):
            innermost, tb = None, e.__traceback__
            while tb is not None:
                cls = tb.tb_frame.f_locals.get("cls")
                if isinstance(cls, type) and issubclass(cls, torch.autograd.Function) and \
                        cls is not torch.autograd.Function:
                    return cls.__qualname__
                if not os.path.abspath(tb.tb_frame.f_code.co_filename).startswith(torch_dir):
                    innermost = tb  # the user's code nearest the refusal
                tb = tb.tb_next
            if innermost is None:
                return "(where unknown)"
            code = innermost.tb_frame.f_code
            line = linecache.getline(code.co_filename, innermost.tb_lineno).strip()
            return f"(File \"{code.co_filename}\", line {innermost.tb_lineno}: {line})"
        e = e.__cause__ or e.__context__
    return None


def from_torch(module, example_inputs, optimizer, loss_fn=None, device="auto", seed=0,
               precision="fp32", memory_budget=None, loss_scale="auto", accumulate=1,
               parallel=None, process_group=None, bucket_bytes=None):
    """One compiled training step of `module`: `module(*example_inputs)`
    returns the scalar loss (or `loss_fn(module, *inputs)` does). The
    forward pass and loss are captured as ATen ops, converted into a
    tilefuse graph, differentiated by tilefuse and followed by
    `optimizer` (a tilefuse.optim optimizer) in one step; parameters and
    optimizer state stay in the runtime. Buffers the forward pass updates in
    place (batch norm's running statistics) are state the step keeps and
    updates (its state_dict() has their current values); other buffers are
    constants of the step.
    `optimizer` may also be a torch.optim SGD/Adam/AdamW/RMSprop over the module's
    parameters (its param_groups kept: optimizer_from_torch); the step then
    reads each group's lr from it before every call, so PyTorch LR
    schedulers (`sched.step()`) drive it, and refuses a change to any other
    option (those are compiled in). The keyword
    arguments are compile_train_step's; with `accumulate=k` the example
    inputs are one micro-batch (what the module takes) and each call takes
    k of them stacked along a new first dimension. With parallel="ddp" (and
    process_group=, bucket_bytes=), each process of the group calls this on
    its own part of the batch and the ranks average their gradients (see
    compile_train_step)."""
    from . import aten_import
    from .train import compile_train_step

    torch = _torch()
    if not isinstance(module, torch.nn.Module):
        raise CompileError(f"from_torch needs a torch.nn.Module, got {type(module).__name__}")
    if not isinstance(example_inputs, (tuple, list)):
        example_inputs = (example_inputs,)
    torch_optimizer = None
    if isinstance(optimizer, torch.optim.Optimizer):
        torch_optimizer = optimizer
        optimizer = optimizer_from_torch(optimizer, module)
    _check_values_readable(module, example_inputs)
    try:
        gm, names, buffers, state = capture(module, example_inputs, loss_fn)
    except CompileError:
        raise
    except Exception as e:  # noqa: BLE001 (PyTorch's tracer failing on the inputs)
        function = _autograd_function_call(e)
        if function:
            raise CompileError(
                f"from_torch: the module applies a torch.autograd.Function {function}, "
                "whose backward is its own code: from_torch captures the forward pass and "
                "differentiates it itself, so it cannot follow that backward (nor tell whether "
                "it is the forward's derivative). Train this model with "
                "torch.compile(model, backend='tilefuse'), which compiles the Function's "
                "backward as written") from e
        hint = ""
        if accumulate != 1:
            hint = (f"; with accumulate={accumulate} the example inputs are one micro-batch "
                    "(what module(*inputs) takes), not the stacked inputs of a call")
        raise CompileError(f"from_torch: capturing module(*example_inputs) failed: "
                           f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
                           f"{hint}") from e
    unsupported = {}
    for n in gm.graph.nodes:
        if not aten_import.is_supported(n):
            unsupported.setdefault(str(n.target), []).append(_source_line(n))
    if unsupported:
        rows = []
        for op, lines in sorted(unsupported.items()):
            where = sorted({line for line in lines if line})
            rows.append(f"{op} x{len(lines)}" + (f" (from {'; '.join(where[:3])})"
                                                  if where else ""))
        raise CompileError("from_torch: tilefuse cannot convert these ops of the forward "
                           "pass: " + ", ".join(rows) + ". torch.compile(model, "
                           "backend=\"tilefuse\") runs such ops in PyTorch and the rest in "
                           "tilefuse")
    params = {n: _numpy(p) for n, p in module.named_parameters() if p.requires_grad}
    if not params:
        raise CompileError("from_torch: the module has no parameter that requires a gradient")
    batch = tuple(_numpy(x) for x in example_inputs)
    if accumulate != 1:
        batch = tuple(np.stack([x] * int(accumulate)) for x in batch)

    def run(p, s, b, step_seed=None):
        return aten_import.run_fx(gm, [p[n] for n in names] + [s[k] for k in state] + list(b),
                                  seed=step_seed)

    # Model state (batch norm's running statistics): the step keeps it and
    # the forward pass returns its new values after the loss.
    if state:
        def with_state(p, s, b, *step_seed):
            loss, *new = run(p, s, b, *step_seed)
            return loss, dict(zip(state, new))
        uses_seed = aten_import.uses_random(gm)
        loss = (lambda p, s, b, step_seed: with_state(p, s, b, step_seed)) if uses_seed \
            else (lambda p, s, b: with_state(p, s, b))
        initial = {k: _numpy(buffers[k]) for k in state}
    elif aten_import.uses_random(gm):  # dropout: a seed per step (seed + t - 1)
        def loss(p, b, step_seed):
            return run(p, {}, b, step_seed)
        initial = None
    else:
        def loss(p, b):
            return run(p, {}, b)
        initial = None

    step = compile_train_step(loss, params, batch, optimizer, device=device, seed=seed,
                              memory_budget=memory_budget, precision=precision,
                              loss_scale=loss_scale, accumulate=accumulate, state=initial,
                              parallel=parallel, process_group=process_group,
                              bucket_bytes=bucket_bytes)
    return TorchTrainStep(module, step, names, torch_optimizer, state)


# ---------------------------------------------------------------------------
# torch.compile(model, backend="tilefuse")
# ---------------------------------------------------------------------------

import logging

_log = logging.getLogger("tilefuse")

# ATen ops whose PyTorch decompositions tilefuse does not want: it converts
# them whole (its fused composites are faster than their pieces).
_KEPT_WHOLE = ("nll_loss_forward", "nll_loss_backward", "nll_loss2d_forward",
               "nll_loss2d_backward", "_log_softmax", "_softmax",
               # interpolation: per-dim taps computed once (aten/conv.py),
               # where PyTorch's decompositions compute every output
               # element's indices and weights in the graph
               "upsample_linear1d", "upsample_bicubic2d",
               "native_layer_norm", "gelu", "embedding", "embedding_dense_backward",
               "_scaled_dot_product_flash_attention_for_cpu",
               "_scaled_dot_product_attention_math")

# A forward op with several outputs saves some of them for a backward op of
# its own. Its decomposition is applied to the forward graph only, the
# backward op may stay whole (PyTorch runs it when tilefuse does not convert
# it), and it then reads the decomposition's outputs as if they were the
# op's: where they are not (SDPA's decomposition returns the probabilities
# where the op returns the log-sum-exp), gradients are silently wrong. So a
# multi-output op is decomposed only when every output of its decomposition
# is the op's own, checked against eager for each op listed here
# (tests/python/test_torch_decompositions.py); backward ops (outputs that
# are all gradients, read by nothing else) may always be.
_MULTI_OUTPUT_DECOMPOSITIONS_CHECKED = (
    "aten::_fused_rms_norm", "aten::var_mean", "aten::var_mean.dim", "aten::std_mean",
    "aten::std_mean.correction", "aten::std_mean.dim", "aten::aminmax",
    "aten::log_sigmoid_forward", "aten::_weight_norm_interface")


def _tensor_outputs(op):
    schema = getattr(op, "_schema", None)
    return 0 if schema is None else sum(1 for r in schema.returns if str(r.type) == "Tensor")


def _decompositions():
    """The decomposition table the backend hands to aot_autograd: PyTorch's
    core ATen decompositions, less the ops tilefuse converts whole
    (_KEPT_WHOLE) and the multi-output forward ops whose decompositions are
    not known to return exactly the op's outputs."""
    torch = _torch()
    from torch._decomp import core_aten_decompositions
    kept = {getattr(torch.ops.aten, name) for name in _KEPT_WHOLE}
    table = {}
    for op, fn in core_aten_decompositions().items():
        if getattr(op, "overloadpacket", op) in kept:
            continue
        if (_tensor_outputs(op) > 1 and not op.name().endswith("_backward")
                and op.name() not in _MULTI_OUTPUT_DECOMPOSITIONS_CHECKED):
            continue
        table[op] = fn
    return table


class _Stats:
    """What the backend did in this process: graphs it was given (Dynamo
    calls it again for every new shape: a recompilation), graphs compiled
    whole, partitioned or left to PyTorch, and the ops it could not convert
    (each logged once)."""

    def __init__(self):
        self.reset()

    def reset(self):
        self.graphs = 0          # Dynamo graphs handed to the backend
        self.recompiles = 0      # of those, the same code again with new shapes
        self.compiled = 0        # ATen graphs (forward or backward) compiled whole
        self.partitioned = 0     # ATen graphs split between tilefuse and PyTorch
        self.eager = 0           # ATen graphs left to PyTorch entirely
        self.unsupported = {}    # op -> number of nodes
        self.off_cpu = {}        # device type -> ATen graphs left to PyTorch for it
        self._seen_code = set()

    def __repr__(self):
        return (f"tilefuse backend: {self.graphs} graphs ({self.recompiles} recompilations), "
                f"ATen graphs compiled {self.compiled}, partitioned {self.partitioned}, "
                f"left to PyTorch {self.eager}; unsupported ops "
                f"{dict(sorted(self.unsupported.items())) or 'none'}"
                + (f"; graphs on other devices {dict(sorted(self.off_cpu.items()))}"
                   if self.off_cpu else ""))


stats = _Stats()


def _note_unsupported(left, gm=None):
    """Counts the ops left to PyTorch ({op: [node names]}) and logs each op
    once, with the user's source line of its first node when `gm` knows
    it."""
    nodes = {n.name: n for n in gm.graph.nodes} if gm is not None else {}
    for op in sorted(left):
        if op not in stats.unsupported:
            line = next((_source_line(nodes[name]) for name in left[op] if name in nodes
                         and _source_line(nodes[name])), None)
            _log.warning("tilefuse: %s is not supported; that part of the graph runs in "
                         "PyTorch%s", op, f" ({line})" if line else "")
        stats.unsupported[op] = stats.unsupported.get(op, 0) + 1


def _devices_off_cpu(gm):
    """The device types other than the CPU of the tensors that ATen graph
    `gm` reads or makes (e.g. {"cuda"}); empty for a CPU graph."""
    torch = _torch()
    found = set()
    for n in gm.graph.nodes:
        v = _val(n)
        for t in v if isinstance(v, (list, tuple)) else [v]:
            if isinstance(t, torch.Tensor) and t.device.type != "cpu":
                found.add(t.device.type)
    return found


# Why a graph off the CPU runs in PyTorch. The backend exchanges tensors with
# the compiled graph as numpy arrays in host memory: a CUDA graph's results
# would come back as CPU tensors, a meta graph has no values to read.
_OFF_CPU_REASON = "the torch.compile backend compiles graphs of CPU tensors only"


def _note_off_cpu(devices):
    for device in sorted(devices):
        if device not in stats.off_cpu:
            _log.warning("tilefuse: a graph of %s tensors runs in PyTorch: %s", device,
                         _OFF_CPU_REASON)
        stats.off_cpu[device] = stats.off_cpu.get(device, 0) + 1


def _numpy_dtype(torch_dtype):
    """The numpy dtype tilefuse exchanges a torch dtype's values in (bf16 as
    float32)."""
    torch = _torch()
    table = {torch.float32: np.float32, torch.float16: np.float16, torch.bfloat16: np.float32,
             torch.float64: np.float64, torch.int32: np.int32, torch.int64: np.int64,
             torch.bool: np.bool_}
    if torch_dtype not in table:
        from .aten_import import UnsupportedOp
        raise UnsupportedOp(f"dtype {torch_dtype}")
    return np.dtype(table[torch_dtype])


def _val(node):
    return node.meta.get("val", node.meta.get("example_value"))


def _memory_order(t):
    """The permutation p for which t.permute(p) is contiguous, where t is a
    dense tensor laid out in another order (a transposed view, say); None
    where t is contiguous, empty, or not dense in any order of its dims."""
    if t.is_contiguous() or t.numel() == 0:
        return None
    order = sorted(range(t.dim()), key=lambda d: -t.stride(d))
    return order if t.permute(order).is_contiguous() else None


def _input_view_chain(node, placeholders):
    """Whether FX node `node` is a chain of view ops, at least one of them
    transposing, over one of `placeholders`."""
    torch = _torch()
    aten = torch.ops.aten
    transposing = {aten.permute.default, aten.t.default, aten.transpose.int}
    reshaping = {aten.view.default, aten.alias.default}
    transposes = False
    while (isinstance(node, torch.fx.Node) and node.op == "call_function"
           and node.target in transposing | reshaping):
        transposes |= node.target in transposing
        node = node.args[0]
    return transposes and isinstance(node, torch.fx.Node) and node in placeholders


def _view_of_input(node, placeholders, args):
    """The view chain `node` (_input_view_chain) applied to the input tensor."""
    if node.op == "placeholder":
        return args[placeholders.index(node)]
    return node.target(_view_of_input(node.args[0], placeholders, args), *node.args[1:])


def _compiled_callable(gm, device, compile=True, updates=None, layouts=None):
    """A callable running FX graph `gm` (every node supported) through
    tilefuse, taking and returning torch tensors (CPU tensors share memory
    with the arrays tilefuse reads and returns). With compile=False the
    graph is only converted (explain), and None is returned. `updates`
    ({output index: input index}): outputs that are an input's new value
    (an optimizer's parameters and state, updated in place by PyTorch's
    code): they are written into that input's memory and the input itself
    is returned, so the caller's copy into the input is no copy at all.
    `layouts` (shared by a forward graph and its backward): the forward
    notes there, by node name, the outputs it returns laid out in another
    order than their dims' ({name: (shape, order)}); the backward reads
    those of its inputs so (its own graph says they are contiguous: the
    partitioner gives saved tensors fresh metadata)."""
    from . import aten_import
    from ._tracing import trace
    torch = _torch()
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    examples = []
    # Empty inputs of a dtype tilefuse lacks (batch norm's uint8 reserve
    # buffer, which its backward receives and ignores) go in as empty f32:
    # they hold no value to read.
    stand_ins = set()
    for j, n in enumerate(placeholders):
        v = _val(n)
        if not isinstance(v, torch.Tensor):
            raise aten_import.UnsupportedOp(f"a non-tensor input ({n.name}: {type(v).__name__})")
        if v.numel() == 0 and v.dtype in (torch.uint8, torch.int8, torch.int16):
            stand_ins.add(j)
            examples.append(np.zeros(tuple(v.shape), dtype=np.float32))
            continue
        if v.dtype == torch.bfloat16:  # traced as bf16, crossing as its bits
            from ._tracing import TypedExample
            examples.append(TypedExample("bf16", v.shape))
            continue
        examples.append(np.zeros(tuple(v.shape), dtype=_numpy_dtype(v.dtype)))
    # Inputs and outputs laid out in another order than their dims' (a
    # transposed view AOTAutograd's forward saves for the backward's weight
    # gradient, read there as the transpose it is) cross in memory order:
    # the graph permutes them, where the permute is free (a view a GEMM
    # reads transposed, or one permute undoing another), so neither side
    # copies them.
    in_orders = {}
    for j, n in enumerate(placeholders):
        order = _memory_order(_val(n)) if j not in stand_ins else None
        shape, saved_order = (layouts or {}).get(n.name, (None, None))
        if order is None and shape == tuple(_val(n).shape):
            order = saved_order
        if order is not None:
            in_orders[j] = order
            e = examples[j]
            shape = [_val(n).shape[d] for d in order]
            examples[j] = (type(e)(e.dtype, shape) if not isinstance(e, np.ndarray)
                           else np.zeros(shape, dtype=e.dtype))
    out_node = next(n for n in gm.graph.nodes if n.op == "output")
    outs = out_node.args[0]
    single = not isinstance(outs, (list, tuple))
    outs = [outs] if single else list(outs)
    # A backward graph returns None for inputs without a gradient; a graph
    # specialized to static shapes returns its sizes as plain numbers.
    # An empty tensor output (batch norm's CPU reserve buffer, say) has no
    # values to compute: it is made empty at each call.
    empties = {i: _val(o) for i, o in enumerate(outs) if isinstance(o, torch.fx.Node)
               and isinstance(_val(o), torch.Tensor) and _val(o).numel() == 0}
    # An output that is an input itself (AOTAutograd's forward saving a
    # parameter for the backward) is that very tensor, as running the graph
    # in PyTorch gives: nothing to compute or copy.
    inputs_returned = {i: placeholders.index(o) for i, o in enumerate(outs)
                       if isinstance(o, torch.fx.Node) and o.op == "placeholder"
                       and i not in empties}
    # An output that is an input transposed (x^T, saved for a weight's
    # gradient), through views, is that view of the input tensor, made by
    # PyTorch: no copy.
    input_views = {i: o for i, o in enumerate(outs)
                   if i not in empties and _input_view_chain(o, placeholders)}
    present = [i for i, o in enumerate(outs) if isinstance(o, torch.fx.Node)
               and i not in empties and i not in inputs_returned and i not in input_views]
    constants = {i: o for i, o in enumerate(outs)
                 if o is not None and not isinstance(o, torch.fx.Node)}
    out_vals = [_val(outs[i]) for i in present]
    if any(not isinstance(o, torch.Tensor) for o in out_vals):
        raise aten_import.UnsupportedOp("a graph output that is not a tensor")
    out_orders = {k: order for k, order in enumerate(map(_memory_order, out_vals))
                  if order is not None}
    if layouts is not None:
        for k, order in out_orders.items():
            layouts[outs[present[k]].name] = (tuple(out_vals[k].shape), order)
    random = aten_import.uses_random(gm)

    def uncomputed(args):
        """The outputs no kernel computes (numbers, None, empty tensors,
        inputs returned), in place; the computed ones left None for the
        caller to fill."""
        full = [constants.get(i) for i in range(len(outs))]
        for i, v in empties.items():
            full[i] = torch.empty(tuple(v.shape), dtype=v.dtype)
        for i, j in inputs_returned.items():
            full[i] = args[j]
        for i, view in input_views.items():
            full[i] = _view_of_input(view, placeholders, args)
        return full

    if not present:  # nothing to compute: every output empty, None, a number or an input (view)
        def nothing(*args):
            full = uncomputed(args)
            return full[0] if single else full
        return nothing if compile else None

    def fn(*xs):
        # With random ops, the last input is a seed drawn per call from
        # torch's generator (so torch.manual_seed makes runs repeatable).
        seed = xs[-1] if random else None
        xs = list(xs[:-1] if random else xs)
        for j, order in in_orders.items():
            xs[j] = xs[j].permute(*np.argsort(order).tolist())
        result = aten_import.run_fx(gm, xs, seed=seed)
        result = [result] if single else list(result)
        return tuple(result[i].permute(*out_orders[k]) if k in out_orders else result[i]
                     for k, i in enumerate(present))

    graph = trace(fn, *(examples + ([np.int64(0)] if random else [])))
    if not compile:
        return None
    compiled = graph.compile(device)
    exe = compiled._exe
    want = [o.dtype for o in out_vals]

    def run(*args):
        arrays = []
        for j, a in enumerate(args):
            if j in stand_ins:
                arrays.append(np.zeros(tuple(a.shape), dtype=np.float32))
                continue
            t = a.detach()
            if j in in_orders:
                t = t.permute(in_orders[j])
            t = t.contiguous().cpu()
            if t.dtype == torch.bfloat16:  # its bits: numpy has no bf16
                arrays.append(t.view(torch.int16).numpy().view(np.uint16))
                continue
            arrays.append(t.numpy())
        if random:
            arrays.append(np.int64(torch.randint(0, 2 ** 62, ()).item()))
        into = None
        in_place = {}
        if updates:
            for k, i in enumerate(present):
                j = updates.get(i)
                if j is None or j >= len(args) or k in out_orders:
                    continue
                target = args[j]
                if (target.dtype == want[k] and target.dtype != torch.bfloat16
                        and target.device.type == "cpu" and target.is_contiguous()
                        and tuple(target.shape) == tuple(out_vals[k].shape)):
                    in_place[k] = target
            if in_place:
                # The others come back as new arrays, made by the executor:
                # it knows their shapes (an output crossing in memory order
                # has its dims permuted) and their bits (bf16, which numpy
                # lacks).
                into = [in_place[k].detach().numpy() if k in in_place else None
                        for k in range(len(present))]
        results = exe.run(arrays, None, "bits", into)
        full = uncomputed(args)
        for k, (i, r, w) in enumerate(zip(present, results, want)):
            if k in in_place:
                full[i] = in_place[k]
                continue
            r = np.asarray(r)
            if r.dtype == np.uint16:  # a bf16 result's bits
                o = torch.from_numpy(r.view(np.int16)).view(torch.bfloat16)
            else:
                o = torch.from_numpy(r)
            o = o.to(w) if o.dtype != w else o
            full[i] = o.permute(*np.argsort(out_orders[k]).tolist()) if k in out_orders else o
        return full[0] if single else full
    run.tilefuse_compiled = compiled
    return run


def _statically_supported(node):
    """A call_function node the table converts and whose values are tensors
    (or a getitem of such a node)."""
    from . import aten_import
    torch = _torch()
    if node.op != "call_function":
        return False
    v = _val(node)
    tensors = v if isinstance(v, (list, tuple)) else [v]
    if not all(isinstance(t, torch.Tensor) for t in tensors):
        return False
    return aten_import.is_supported(node)


def _split_graph(gm, device, compile=True, updates=None, layouts=None):
    """(callable, {op: [node names]} left to PyTorch) for one ATen graph:
    compiled whole when every node converts, else split by torch.fx's
    capability-based partitioner so the converted parts run in tilefuse and
    the rest in PyTorch. A node whose conversion fails on its arguments
    (UnsupportedOp from the importer) joins the excluded ones and the graph
    is split again, so what is reported is what runs. With compile=False
    nothing is compiled (explain) and the callable is None."""
    import copy
    import operator
    from . import aten_import
    torch = _torch()
    from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
    from torch.fx.passes.operator_support import OperatorSupportBase
    original = gm
    calls = [n for n in gm.graph.nodes if n.op == "call_function"]
    excluded = {n.name: str(n.target) for n in calls
                if not aten_import.is_supported(n) and n.target is not operator.getitem}

    def left_out():
        ops = {}
        for name, op in excluded.items():
            ops.setdefault(op, []).append(name)
        return ops

    for _ in range(len(calls) + 1):
        # Partitioning rewrites its module in place: each try starts from a
        # copy of the graph (node names and meta survive it) over the same
        # attributes, never copied (a model's buffers may be meta or fake
        # tensors, which cannot be).
        gm = torch.fx.GraphModule(original, copy.deepcopy(original.graph))
        if not excluded:
            try:
                return _compiled_callable(gm, device, compile, updates, layouts), {}
            except aten_import.UnsupportedOp as e:
                if e.node is None or e.node in excluded:
                    raise
                excluded[e.node] = e.op
                continue

        class Support(OperatorSupportBase):
            def is_node_supported(self, submodules, node):
                return node.name not in excluded and _statically_supported(node)

        partitioner = CapabilityBasedPartitioner(gm, Support(),
                                                 allows_single_node_partition=False)
        partitions = partitioner.propose_partitions()
        if not partitions:
            return (original.forward if compile else None), left_out()
        fused = partitioner.fuse_partitions(partitions)
        retry = False
        failed = {}
        for name, sub in list(fused.named_children()):
            try:
                run = _compiled_callable(sub, device, compile)
            except aten_import.UnsupportedOp as e:
                if e.node is None or e.node in excluded:
                    raise
                excluded[e.node] = e.op
                retry = True
                break
            except CompileError as e:
                # A part tilefuse cannot compile runs in PyTorch; the rest
                # of the graph is still compiled.
                _log.warning("tilefuse: a part of a graph runs in PyTorch: %s", e)
                for n in sub.graph.nodes:
                    if n.op == "call_function" and n.target is not operator.getitem:
                        failed.setdefault(f"{n.target} (in a part that did not compile: "
                                          f"{str(e).splitlines()[0][:200]})", []).append(n.name)
                continue
            if compile:
                setattr(fused, name, _Callable(run))
        if retry:
            continue
        if compile:
            fused.recompile()
        return (fused.forward if compile else None), {**left_out(), **failed}
    raise CompileError("tilefuse: the graph did not settle into partitions")


def _has_symbolic_shapes(gm):
    """Whether the graph's inputs have shapes not known until run time
    (torch.compile(dynamic=True), or dimensions Dynamo marked dynamic)."""
    torch = _torch()
    for n in gm.graph.nodes:
        if n.op != "placeholder":
            continue
        v = _val(n)
        if isinstance(v, torch.SymInt):
            return True
        if isinstance(v, torch.Tensor) and not all(isinstance(d, int) for d in v.shape):
            return True
    return False


class _ShapeSpecialized:
    """A graph with symbolic shapes. tilefuse compiles static shapes, so each
    distinct set of input shapes (and scalar inputs) gets a compile of its
    own: the graph is retraced with those sizes (make_fx over fake tensors,
    the scalars baked in), compiled whole or split like any graph, and kept;
    every set after the first counts as a recompilation."""

    # Distinct size sets compiled per graph; past this (a float input that
    # changes every call, say) new ones run in PyTorch, as Dynamo's own
    # cache_size_limit stops recompiling.
    MAX_SPECIALIZATIONS = 8

    def __init__(self, gm, device):
        self.gm, self.device, self.compiled = gm, device, {}
        self.warned = False

    @staticmethod
    def _scalar(a):
        # A size is an int; a float or bool scalar input keeps its type.
        return a if isinstance(a, (bool, float)) else int(a)

    def __call__(self, *args):
        torch = _torch()
        key = tuple((tuple(a.shape), a.dtype) if isinstance(a, torch.Tensor)
                    else (type(a).__name__, self._scalar(a)) for a in args)
        fn = self.compiled.get(key)
        if fn is None:
            if len(self.compiled) >= self.MAX_SPECIALIZATIONS:
                if not self.warned:
                    self.warned = True
                    stats.eager += 1
                    _log.warning("tilefuse: a graph with dynamic shapes was compiled for %d "
                                 "sets of sizes; new ones run in PyTorch",
                                 self.MAX_SPECIALIZATIONS)
                return self.gm(*args)
            fn = self.compiled[key] = self._specialize(args)
        return fn(*[a for a in args if isinstance(a, torch.Tensor)])

    def _specialize(self, args):
        torch = _torch()
        from torch.fx.experimental.proxy_tensor import make_fx
        if self.compiled:
            stats.recompiles += 1
            _log.info("tilefuse: compiling a graph with dynamic shapes for new sizes %s "
                      "(%d recompilations so far)",
                      [tuple(a.shape) if isinstance(a, torch.Tensor) else self._scalar(a)
                       for a in args], stats.recompiles)
        positions = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor)]
        # The scalars only: the call's tensors must not outlive it (a backward
        # graph's inputs are freed as soon as it has read them).
        sizes = [None if isinstance(a, torch.Tensor) else self._scalar(a) for a in args]

        def static(*tensors):
            full = list(sizes)
            for i, t in zip(positions, tensors):
                full[i] = t
            return self.gm(*full)
        try:
            static_gm = make_fx(static, tracing_mode="fake")(*[args[i] for i in positions])
        except Exception as e:  # noqa: BLE001 (any retrace failure: PyTorch runs it)
            _log.warning("tilefuse: could not specialize a graph with dynamic shapes to "
                         "these sizes, it runs in PyTorch: %s: %s", type(e).__name__, e)
            stats.eager += 1
            return static
        return _compile_static_graph(static_gm, self.device)


def _share_openmp_threads():
    """PyTorch runs its ops (autograd, the optimizer) between the graphs the
    backend compiles, and its OpenMP threads spin for milliseconds after
    each, on the cores tilefuse's own workers need: tilefuse's CPU grids
    (compiled functions and loaded artifacts alike) run on those same
    OpenMP threads from then on (runtime/ThreadPool.h), where one OpenMP
    runtime serves the process."""
    from . import _core, _runtime
    for module in (_core, _runtime):
        module.cpu_thread_team("openmp")


def _input_updates(forward):
    """{output index: input index} of the outputs of the ATen graph being
    compiled that are new values of its inputs (aot_autograd returns a
    mutated input's new value first among a forward graph's outputs and
    copies it into the input after the call)."""
    if not forward:
        return None
    torch = _torch()
    ctx = torch._guards.TracingContext.try_get()
    meta = getattr(ctx, "fw_metadata", None) if ctx is not None else None
    indices = getattr(meta, "mutated_inp_runtime_indices", None)
    if not indices:
        return None
    return {k: int(i) for k, i in enumerate(indices)
            if meta.input_info[i].mutates_data and not meta.input_info[i].mutates_metadata}


def _compile_aten_graph(gm, example_inputs, device, forward=False, layouts=None):
    """One ATen graph from aot_autograd, compiled whole or split
    (_split_graph), or per input shapes where they are symbolic; the ops
    left to PyTorch are logged once and counted. A graph of tensors off the
    CPU runs in PyTorch (_OFF_CPU_REASON), logged once per device. A graph
    that computes nothing (a backward whose gradients are all None, say)
    is its own compiled form: there is no kernel to make."""
    if not any(n.op == "call_function" for n in gm.graph.nodes):
        stats.compiled += 1
        return _boxed(gm.forward)
    off_cpu = _devices_off_cpu(gm)
    if off_cpu:
        _note_off_cpu(off_cpu)
        stats.eager += 1
        return _boxed(gm.forward)
    from .compiler import resolve_device
    try:
        on_cpu = resolve_device(device) == "cpu"
    except CompileError:  # no such device here: _compile_static_graph says so
        on_cpu = False
    if on_cpu:
        _share_openmp_threads()
    if _has_symbolic_shapes(gm):
        return _boxed(_ShapeSpecialized(gm, device))
    return _boxed(_compile_static_graph(gm, device, _input_updates(forward), layouts))


def _compile_static_graph(gm, device, updates=None, layouts=None):
    """A callable for ATen graph `gm` with static shapes: tilefuse's
    compile of it, whole or split, or `gm` itself when nothing converts.
    `updates`, `layouts`: see _compiled_callable."""
    try:
        run, left = _split_graph(gm, device, updates=updates, layouts=layouts)
    except CompileError as e:
        _log.warning("tilefuse: could not compile a graph, it runs in PyTorch: %s", e)
        stats.eager += 1
        return gm.forward
    if left:
        _note_unsupported(left, gm)
        if run is gm.forward or getattr(run, "__self__", None) is gm:
            stats.eager += 1
        else:
            stats.partitioned += 1
    else:
        stats.compiled += 1
    return run


def _Callable(fn):
    """A compiled partition standing where its submodule was (an
    nn.Module, as FX's call_module needs)."""
    torch = _torch()

    class Compiled(torch.nn.Module):
        def forward(self, *args):
            return fn(*args)
    return Compiled()


def _boxed(fn):
    """aot_autograd's calling convention: one list of arguments, which the
    callee clears (so saved activations can be freed as soon as read)."""
    def run(args):
        mine = list(args)
        args.clear()
        return fn(*mine)
    run._boxed_call = True
    return run


def tilefuse_backend(gm, example_inputs, device="cpu"):
    """The torch.compile backend (`torch.compile(model, backend="tilefuse")`,
    registered as a torch_dynamo_backends entry point). Dynamo captures,
    aot_autograd makes forward and backward ATen graphs with PyTorch's
    decompositions (_decompositions: not those of the ops tilefuse converts
    whole, nor of multi-output ops whose decompositions could pair a
    forward with a backward it does not match), and tilefuse compiles each
    graph for `device`. An op the
    importer cannot convert runs in PyTorch (see `stats` and the log), as
    does a graph of tensors off the CPU (CUDA, meta)."""
    _torch()
    from torch._dynamo.backends.common import aot_autograd

    key = gm.code
    stats.graphs += 1
    if key in stats._seen_code:
        stats.recompiles += 1
        _log.info("tilefuse: recompiling a graph for new input shapes (%d so far)",
                  stats.recompiles)
    stats._seen_code.add(key)
    _keep_interpolation_whole(gm)

    # The saved tensors the forward returns as transposed views, which the
    # backward then reads in memory order (_compiled_callable).
    layouts = {}

    def fw_compiler(aten_gm, inputs):
        return _compile_aten_graph(aten_gm, inputs, device, forward=True, layouts=layouts)

    def bw_compiler(aten_gm, inputs):
        return _compile_aten_graph(aten_gm, inputs, device, layouts=layouts)

    # Inductor's partitioner: the backward recomputes views and cheap
    # pointwise ops instead of the forward saving them (a transposed weight
    # saved for the backward is a transposed copy the GEMM would otherwise
    # read in place); random ops are never recomputed.
    from torch._functorch.partitioners import min_cut_rematerialization_partition
    return aot_autograd(fw_compiler=fw_compiler, bw_compiler=bw_compiler,
                        partition_fn=min_cut_rematerialization_partition,
                        decompositions=_decompositions())(gm, example_inputs)


# F.interpolate's (bi/tri)linear and bicubic modes: PyTorch decomposes their
# ops at the autograd level while aot_autograd traces (before any
# decomposition table is read), so Dynamo's calls are redirected to
# tilefuse::upsample (aten/conv.py), whose backward op is its own: both reach
# the importer whole.
_UPSAMPLE_MODES = {("linear", 3): "linear", ("bilinear", 4): "linear",
                   ("bicubic", 4): "bicubic", ("trilinear", 5): "linear"}


def _interpolate_whole(input, size=None, scale_factor=None, mode="nearest", align_corners=None,
                       recompute_scale_factor=None, antialias=False):
    """F.interpolate, through tilefuse::upsample where the mode has it:
    the output size and the scales the kernel uses computed as
    F.interpolate computes them; anything else (antialias, nearest, area,
    a call F.interpolate refuses) goes to F.interpolate itself."""
    torch = _torch()

    def as_pytorch():
        return torch.nn.functional.interpolate(input, size, scale_factor, mode, align_corners,
                                               recompute_scale_factor, antialias)
    kind = _UPSAMPLE_MODES.get((mode, input.dim()))
    if kind is None or antialias or (size is None) == (scale_factor is None):
        return as_pytorch()
    d = input.dim() - 2
    if size is not None:
        out = [int(size)] * d if isinstance(size, int) else [int(v) for v in size]
        scales = [None] * d
    else:
        factors = [float(scale_factor)] * d if isinstance(scale_factor, (int, float)) \
            else [float(v) for v in scale_factor]
        if len(factors) != d:
            return as_pytorch()
        out = [math.floor(float(input.shape[2 + i]) * f) for i, f in enumerate(factors)]
        scales = [None] * d if recompute_scale_factor else factors
    if len(out) != d or min(out) < 1:
        return as_pytorch()
    from .aten.conv import upsample
    return upsample(input, out, kind, bool(align_corners), [s or 0.0 for s in scales])


def _keep_interpolation_whole(gm):
    """Redirects Dynamo graph `gm`'s F.interpolate calls to
    _interpolate_whole."""
    torch = _torch()
    changed = False
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target is torch.nn.functional.interpolate:
            node.target = _interpolate_whole
            changed = True
    if changed:
        gm.recompile()


class Explanation:
    """What `explain` found: `graphs`, one dict per ATen graph PyTorch made
    (kind "forward"/"backward", ops: its op count, unsupported: {op: [source
    lines]}); `unsupported_ops` over all of them; `print()` summarises."""

    def __init__(self, graphs, nothing_why=""):
        self.graphs = graphs
        # Why torch.compile handed over no graph at all (the model then runs
        # in PyTorch without tilefuse being called), where it is known.
        self.nothing_why = nothing_why

    @property
    def unsupported_ops(self):
        ops = {}
        for g in self.graphs:
            for op, lines in g["unsupported"].items():
                ops.setdefault(op, []).extend(lines)
        return ops

    @property
    def ok(self):
        return bool(self.graphs) and not self.unsupported_ops

    def __str__(self):
        if not self.graphs:
            return ("0 ATen graphs: torch.compile handed the backend nothing, so the model "
                    "runs in PyTorch without tilefuse" +
                    (f" ({self.nothing_why})" if self.nothing_why else ""))
        rows = [f"{len(self.graphs)} ATen graphs; "
                + ("every op converts" if self.ok else
                   f"{len(self.unsupported_ops)} ops do not convert (they run in PyTorch)")]
        for i, g in enumerate(self.graphs):
            bad = g["unsupported"]
            rows.append(f"  graph {i} ({g['kind']}): {g['ops']} ops, "
                        + ("all convert" if not bad else "not converted: " + ", ".join(
                            f"{op} x{len(lines)}" for op, lines in sorted(bad.items()))))
            for op, lines in sorted(bad.items()):
                for line in sorted(set(lines))[:3]:
                    rows.append(f"      {op} from {line}")
        return "\n".join(rows)

    __repr__ = __str__


def explain(model, *inputs):
    """Runs `model(*inputs)` (and its backward when it returns a scalar that
    needs a gradient) under torch.compile with the tilefuse backend's
    capture and partitioning, converting each graph but compiling nothing
    (the model runs in PyTorch), and lists per ATen graph the ops left to
    PyTorch, with the source lines they come from."""
    torch = _torch()
    from torch._dynamo.backends.common import aot_autograd

    graphs = []

    def recorder(kind):
        def compiler(gm, example_inputs):
            bad = {}
            calls = [n for n in gm.graph.nodes if n.op == "call_function"]
            by_name = {n.name: n for n in calls}
            off_cpu = _devices_off_cpu(gm)
            try:
                if off_cpu:
                    left = {f"the whole graph (tensors on {', '.join(sorted(off_cpu))}: "
                            f"{_OFF_CPU_REASON})": []}
                else:
                    _, left = _split_graph(gm, "cpu", compile=False)
            except CompileError as e:
                left = {f"the whole graph ({e})": []}
            for op, names in left.items():
                for name in names or [None]:
                    n = by_name.get(name)
                    trace = ((n.meta.get("stack_trace") if n is not None else "") or ""
                             ).strip().splitlines()
                    where = next((t.strip() for t in reversed(trace)
                                  if t.strip().startswith("File")), "(no source line)")
                    bad.setdefault(op, []).append(where)
            graphs.append({"kind": kind, "ops": len(calls), "unsupported": bad})
            return _boxed(gm.forward)
        return compiler

    aot = aot_autograd(fw_compiler=recorder("forward"), bw_compiler=recorder("backward"),
                       decompositions=_decompositions())

    def backend(gm, example_inputs):  # what tilefuse_backend hands aot_autograd
        _keep_interpolation_whole(gm)
        return aot(gm, example_inputs)
    torch._dynamo.reset()
    try:
        out = torch.compile(model, backend=backend, dynamic=False)(*inputs)
        if isinstance(out, torch.Tensor) and out.ndim == 0 and out.requires_grad:
            out.backward()
    finally:
        torch._dynamo.reset()
    return Explanation(graphs, "" if graphs else _why_no_graph(model))


def _why_no_graph(model):
    """What explains torch.compile handing over no graph for `model`."""
    torch = _torch()
    ddp = torch.nn.parallel.DistributedDataParallel
    inner = getattr(model, "module", None)
    if isinstance(model, ddp) and type(inner).__module__.startswith("torch.nn"):
        return (f"DistributedDataParallel wraps torch.nn.{type(inner).__name__} directly, and "
                "Dynamo does not trace a torch.nn module's forward as a frame of its own under "
                "DDP; wrap it in a module class of your own")
    return ""
