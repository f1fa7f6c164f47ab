"""Optimizers for `tilefuse.compile_train_step` (PyTorch semantics).

Each one describes an update that the compiler appends to the training step
as graph ops. The learning rate is an operand of the compiled step, so
changing `step.lr` between steps (a schedule) never recompiles.
"""
from dataclasses import dataclass
from typing import Optional, Tuple

from ._core import CompileError


def _check(cond, msg):
    if not cond:
        raise CompileError(msg)


class _Groups:
    """torch.optim-style parameter groups: `param_groups` is a list of dicts,
    each with "params" (parameter names, dotted paths as in state_dict(),
    or a predicate f(name, array) -> bool) and optionally "lr" and
    "weight_decay" (default: the optimizer's). Every parameter belongs to
    exactly one group; each group's learning rate is an operand of the
    step (`step.param_groups[i]["lr"]`), its weight decay compiled in."""

    def _resolve_groups(self, names, leaves):
        """(group of each parameter, weight decay of each, lr of each group,
        names of each group); None without param_groups."""
        groups = getattr(self, "param_groups", None)
        if not groups:
            return None
        _check(isinstance(groups, (list, tuple)) and all(isinstance(g, dict) for g in groups),
               f"{type(self).__name__}: param_groups must be a list of dicts, got {groups!r}")
        member = [None] * len(names)
        for gi, g in enumerate(groups):
            unknown = set(g) - {"params", "lr", "weight_decay"}
            _check(not unknown, f"{type(self).__name__}: param_groups[{gi}] has unknown keys "
                                f"{sorted(unknown)}; expected params, lr, weight_decay")
            _check("params" in g, f"{type(self).__name__}: param_groups[{gi}] has no 'params'")
            sel = g["params"]
            if callable(sel):
                hits = [i for i, (n, a) in enumerate(zip(names, leaves)) if sel(n, a)]
            else:
                sel = [sel] if isinstance(sel, str) else list(sel)
                missing = [n for n in sel if n not in names]
                _check(not missing, f"{type(self).__name__}: param_groups[{gi}] names "
                                    f"{missing}, which are not parameters ({names[:8]}...)")
                hits = [names.index(n) for n in sel]
            for i in hits:
                _check(member[i] is None, f"{type(self).__name__}: parameter {names[i]!r} is "
                                          f"in param_groups[{member[i]}] and [{gi}]")
                member[i] = gi
        orphans = [n for n, m in zip(names, member) if m is None]
        _check(not orphans, f"{type(self).__name__}: parameters {orphans} are in no parameter "
                            "group; every parameter must be in exactly one")
        wd = [float(groups[m].get("weight_decay", self.weight_decay)) for m in member]
        _check(all(w >= 0 for w in wd), f"{type(self).__name__}: weight_decay must be >= 0")
        lrs = [float(g.get("lr", self.lr)) for g in groups]
        _check(all(v >= 0 for v in lrs), f"{type(self).__name__}: lr must be >= 0")
        return member, wd, lrs, [[n for n, m in zip(names, member) if m == gi]
                                 for gi in range(len(groups))]


@dataclass
class SGD(_Groups):
    """torch.optim.SGD: L2 weight decay, momentum buffer buf = m*buf + g,
    Nesterov g + m*buf."""

    lr: float
    momentum: float = 0.0
    nesterov: bool = False
    weight_decay: float = 0.0
    clip_grad_norm: Optional[float] = None
    param_groups: Optional[list] = None

    def _config(self):
        _check(self.lr >= 0 and self.momentum >= 0 and self.weight_decay >= 0,
               f"SGD: lr, momentum and weight_decay must be >= 0, got {self}")
        _check(not self.nesterov or self.momentum > 0, "SGD: nesterov needs momentum > 0")
        return dict(kind="sgd", momentum=self.momentum, nesterov=self.nesterov, beta1=0.0,
                    beta2=0.0, eps=0.0, weight_decay=self.weight_decay,
                    clip_norm=self.clip_grad_norm or 0.0)

    def state_names(self):
        return ["momentum"] if self.momentum else []


@dataclass
class Adam(_Groups):
    """torch.optim.Adam: L2 weight decay added to the gradient."""

    lr: float
    betas: Tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    weight_decay: float = 0.0
    clip_grad_norm: Optional[float] = None
    param_groups: Optional[list] = None
    _kind = "adam"

    def _config(self):
        b1, b2 = self.betas
        _check(self.lr >= 0 and 0 <= b1 < 1 and 0 <= b2 < 1 and self.eps >= 0,
               f"{type(self).__name__}: need lr >= 0, 0 <= betas < 1, eps >= 0, got {self}")
        return dict(kind=self._kind, momentum=0.0, nesterov=False, beta1=b1, beta2=b2,
                    eps=self.eps, weight_decay=self.weight_decay,
                    clip_norm=self.clip_grad_norm or 0.0)

    def state_names(self):
        return ["exp_avg", "exp_avg_sq"]


@dataclass
class AdamW(Adam):
    """torch.optim.AdamW: decoupled weight decay p *= 1 - lr * weight_decay."""

    weight_decay: float = 0.01
    _kind = "adamw"


@dataclass
class RMSprop(_Groups):
    """torch.optim.RMSprop: square_avg = alpha*square_avg + (1-alpha)*g^2
    (g with L2 weight decay added), p -= lr * g / (sqrt(square_avg) + eps);
    `centered` subtracts the squared running mean of g under the root,
    `momentum` keeps a buffer buf = momentum*buf + g / (...) and steps by it.
    State slots: "square_avg", then "momentum_buffer" (momentum > 0) and
    "grad_avg" (centered)."""

    lr: float = 1e-2
    alpha: float = 0.99
    eps: float = 1e-8
    weight_decay: float = 0.0
    momentum: float = 0.0
    centered: bool = False
    clip_grad_norm: Optional[float] = None
    param_groups: Optional[list] = None

    def _config(self):
        _check(self.lr >= 0 and self.alpha >= 0 and self.eps >= 0 and self.momentum >= 0 and
               self.weight_decay >= 0,
               f"RMSprop: lr, alpha, eps, momentum and weight_decay must be >= 0, got {self}")
        return dict(kind="rmsprop", momentum=self.momentum, nesterov=False, beta1=0.0,
                    beta2=0.0, eps=self.eps, alpha=self.alpha, centered=bool(self.centered),
                    weight_decay=self.weight_decay, clip_norm=self.clip_grad_norm or 0.0)

    def state_names(self):
        return (["square_avg"] + (["momentum_buffer"] if self.momentum else []) +
                (["grad_avg"] if self.centered else []))


@dataclass
class LossScale:
    """Dynamic loss scaling with torch.amp.GradScaler's semantics, compiled
    into the training step (no host round-trip): the loss's gradient is
    seeded with `scale`, the gradients are divided by it, and a step whose
    gradients are not all finite is skipped (parameters, optimizer state and
    Adam's step count unchanged) and halves the scale (`backoff_factor`);
    `growth_interval` finite steps in a row double it (`growth_factor`).
    The scale, the run of finite steps and the count of applied updates are
    state of the step, saved and restored with the rest (state_dict keys
    "scaler/scale", "scaler/growth_tracker", "scaler/applied_steps")."""

    init_scale: float = 2.0 ** 16
    growth_factor: float = 2.0
    backoff_factor: float = 0.5
    growth_interval: int = 2000

    def _config(self):
        import numpy as np
        with np.errstate(over="ignore"):
            as_f32 = np.float32(self.init_scale)
        _check(self.init_scale > 0 and as_f32 > 0 and np.isfinite(as_f32),
               f"LossScale: init_scale must be a positive finite f32 (nonzero once rounded "
               f"to f32), got init_scale={self.init_scale}")
        _check(self.growth_factor > 1 and 0 < self.backoff_factor < 1,
               f"LossScale: need growth_factor > 1 and 0 < backoff_factor < 1, got {self}")
        _check(int(self.growth_interval) == self.growth_interval and
               1 <= self.growth_interval <= 2 ** 62,
               f"LossScale: growth_interval must be a whole number in [1, 2^62], got "
               f"growth_interval={self.growth_interval}")
        return dict(loss_scale=True, growth_factor=float(self.growth_factor),
                    backoff_factor=float(self.backoff_factor),
                    growth_interval=int(self.growth_interval))

    # The step-wide state the compiled step keeps, in argument order, with
    # initial values (the tracker and the applied count start at 0).
    def _state(self):
        import numpy as np
        return [("scaler/scale", np.array(self.init_scale, np.float32)),
                ("scaler/growth_tracker", np.array(0, np.int64)),
                ("scaler/applied_steps", np.array(0, np.int64))]
