"""JAX references of the WORKLOADS.md losses (for gradients) and numpy
references of the tilefuse optimizers (PyTorch semantics).

Written from WORKLOADS.md and the documented parameter names, layouts and
dropout stream order of tilefuse.workloads -- not from the tilefuse code, and
no tilefuse import here. JAX runs with x64 enabled and every reference is
evaluated in float64 (float32 parameters are widened first), so a float32
tilefuse result is compared with an exact-ish answer.

Dropout is an input here: each loss takes ``masks``, the list of boolean
keep-masks in stream order (None = no dropout), and computes
``where(keep, x / (1 - p), 0)``. ``*_dropout_masks`` builds the masks the
tilefuse graph draws for a given seed value, with numpy_reference's Philox:
keep = random_uniform(seed, stream, shape, graph dtype) >= p.
"""
import math

import numpy as np

import jax

jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp  # noqa: E402

import numpy_reference as R  # noqa: E402


# ---------------------------------------------------------------------------
# dropout masks
# ---------------------------------------------------------------------------

def keep_masks(seed, p, shapes, mask_dtype):
    """Keep-masks of consecutive streams 0, 1, ... for `shapes`, as
    graph.random_uniform in `mask_dtype` (the graph's float type) draws them."""
    mask_dtype = np.dtype(mask_dtype)
    return [R.random_uniform(seed, stream, shape, mask_dtype) >= mask_dtype.type(p)
            for stream, shape in enumerate(shapes)]


def gpt2_mini_dropout_masks(config, batch, seed, mask_dtype):
    """Stream 0: token+position sum [B, T, d]; block l: 1+3l attention
    probabilities [B, H, T, T], 2+3l attention output [B, T, d], 3+3l MLP
    output [B, T, d]."""
    B, T = batch["tokens"].shape[0], batch["tokens"].shape[1] - 1
    d, H = config["d_model"], config["n_head"]
    shapes = [(B, T, d)]
    for _ in range(config["n_layer"]):
        shapes += [(B, H, T, T), (B, T, d), (B, T, d)]
    return keep_masks(seed, config["dropout"], shapes, mask_dtype)


def mlp_mnist_dropout_masks(config, batch, seed, mask_dtype):
    """Streams 0 and 1: after the first and the second ReLU, [B, hidden] each."""
    B = batch["x"].shape[0]
    return keep_masks(seed, config["dropout"], [(B, config["hidden"])] * 2, mask_dtype)


def deepfm_dropout_masks(config, batch, seed, mask_dtype):
    return None  # DeepFM has no dropout


class _Dropper:
    def __init__(self, masks, p):
        self.masks = None if masks is None else list(masks)
        self.p = p
        self.used = 0

    def __call__(self, x):
        if self.masks is None or self.p == 0:
            return x
        keep = self.masks[self.used]
        self.used += 1
        assert keep.shape == x.shape, (keep.shape, x.shape)
        return jnp.where(keep, x * (1.0 / (1.0 - self.p)), 0.0)

    def check_all_used(self):
        if self.masks is not None and self.p != 0:
            assert self.used == len(self.masks), (self.used, len(self.masks))


# ---------------------------------------------------------------------------
# building blocks
# ---------------------------------------------------------------------------

def _dense(x, w, b=None):
    """PyTorch Linear: weight [out, in]."""
    y = jnp.einsum("...i,oi->...o", x, w)
    return y if b is None else y + b


def _layer_norm(x, w, b, eps):
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.var(x, axis=-1, keepdims=True)  # biased, as PyTorch's LayerNorm
    return (x - mean) * jax.lax.rsqrt(var + eps) * w + b


def _mean_target_nll(logp, target):
    picked = jnp.take_along_axis(logp, target[..., None], axis=-1)
    return -jnp.mean(picked)


# ---------------------------------------------------------------------------
# models: loss(params, batch, masks, config) in float64
# ---------------------------------------------------------------------------

def gpt2_mini_loss(params, batch, masks, config):
    """Pre-LN GPT-2 with a tied LM head; mean next-token cross-entropy."""
    tokens = jnp.asarray(batch["tokens"])
    ids, targets = tokens[:, :-1], tokens[:, 1:]
    B, T = ids.shape
    d, H = config["d_model"], config["n_head"]
    hd = d // H
    eps = config["layer_norm_eps"]
    drop = _Dropper(masks, config["dropout"])
    allowed = jnp.tril(jnp.ones((T, T), dtype=bool))  # query t attends to keys s <= t

    x = drop(jnp.take(params["wte"], ids, axis=0) + params["wpe"][:T][None])
    for layer in range(config["n_layer"]):
        P = lambda name: params[f"h{layer}.{name}"]  # noqa: E731
        a = _layer_norm(x, P("ln1.w"), P("ln1.b"), eps)
        q, k, v = jnp.split(_dense(a, P("attn.qkv.w"), P("attn.qkv.b")), 3, axis=-1)
        q, k, v = (t.reshape(B, T, H, hd) for t in (q, k, v))
        s = jnp.einsum("bthe,bshe->bhts", q, k) / math.sqrt(hd)
        s = jnp.where(allowed, s, -jnp.inf)
        att = drop(jax.nn.softmax(s, axis=-1))
        o = jnp.einsum("bhts,bshe->bthe", att, v).reshape(B, T, d)
        x = x + drop(_dense(o, P("attn.proj.w"), P("attn.proj.b")))
        m = _layer_norm(x, P("ln2.w"), P("ln2.b"), eps)
        m = jax.nn.gelu(_dense(m, P("mlp.fc.w"), P("mlp.fc.b")), approximate=True)
        x = x + drop(_dense(m, P("mlp.proj.w"), P("mlp.proj.b")))
    drop.check_all_used()
    x = _layer_norm(x, params["lnf.w"], params["lnf.b"], eps)
    logits = _dense(x, params["wte"])
    return _mean_target_nll(jax.nn.log_softmax(logits, axis=-1), targets)


def mlp_mnist_loss(params, batch, masks, config):
    x = jnp.asarray(batch["x"])
    drop = _Dropper(masks, config["dropout"])
    h = x.reshape(x.shape[0], -1)
    h = drop(jax.nn.relu(_dense(h, params["fc1.w"], params["fc1.b"])))
    h = drop(jax.nn.relu(_dense(h, params["fc2.w"], params["fc2.b"])))
    drop.check_all_used()
    logp = jax.nn.log_softmax(_dense(h, params["fc3.w"], params["fc3.b"]), axis=-1)
    return _mean_target_nll(logp, jnp.asarray(batch["y"]))


def deepfm_loss(params, batch, masks, config):
    """BCE (logs clamped at -100) of sigmoid(bias + first order + FM + MLP)."""
    assert masks is None
    user = jnp.asarray(batch["user"])
    movie = jnp.asarray(batch["movie"]) + config["n_users"]
    emb = jnp.stack([params["emb"][user], params["emb"][movie]], axis=1)  # [B, 2, k]
    first = params["lin"][user, 0] + params["lin"][movie, 0]
    s = emb.sum(axis=1)
    fm = 0.5 * jnp.sum(s * s - jnp.sum(emb * emb, axis=1), axis=-1)
    h = emb.reshape(emb.shape[0], -1)
    for j in range(len(config["hidden"])):
        h = jax.nn.gelu(_dense(h, params[f"mlp{j}.w"], params[f"mlp{j}.b"]),
                        approximate=False)
    deep = _dense(h, params["out.w"], params["out.b"])[:, 0]
    prob = jax.nn.sigmoid(params["bias"][0] + first + fm + deep)
    t = jnp.asarray(batch["label"], dtype=prob.dtype)
    log_p = jnp.maximum(jnp.log(prob), -100.0)
    log_q = jnp.maximum(jnp.log(1.0 - prob), -100.0)
    return -jnp.mean(t * log_p + (1.0 - t) * log_q)


MODELS = {
    "gpt2_mini": (gpt2_mini_loss, gpt2_mini_dropout_masks),
    "mlp_mnist": (mlp_mnist_loss, mlp_mnist_dropout_masks),
    "deepfm": (deepfm_loss, deepfm_dropout_masks),
}


def _f64(tree):
    return {k: jnp.asarray(np.asarray(v, dtype=np.float64) if np.asarray(v).dtype.kind == "f"
                           else np.asarray(v)) for k, v in tree.items()}


_JITTED = {}


def loss_and_grad(model, params, batch, seed, config, training=True, mask_dtype=None):
    """(loss as a Python float, {name: float64 numpy gradient}) of `model`
    at `params` (any float dtype; evaluated in float64), with the dropout
    masks the tilefuse graph of dtype `mask_dtype` (default: the params'
    dtype) draws for the seed value `seed`."""
    loss_fn, masks_fn = MODELS[model]
    if mask_dtype is None:
        mask_dtype = next(iter(params.values())).dtype
    masks = masks_fn(config, batch, seed, mask_dtype) if training else None
    key = (model, repr(sorted(config.items())), masks is None)
    if key not in _JITTED:
        _JITTED[key] = jax.jit(jax.value_and_grad(
            lambda p, b, m: loss_fn(p, b, m, config)))
    loss, grads = _JITTED[key](_f64(params), _f64(batch),
                               None if masks is None else [jnp.asarray(m) for m in masks])
    return float(loss), {k: np.asarray(v, dtype=np.float64) for k, v in grads.items()}


def loss_value(model, params, batch, seed, config, training=True, mask_dtype=None):
    loss_fn, masks_fn = MODELS[model]
    if mask_dtype is None:
        mask_dtype = next(iter(params.values())).dtype
    masks = masks_fn(config, batch, seed, mask_dtype) if training else None
    return float(loss_fn(_f64(params), _f64(batch), masks, config))


# ---------------------------------------------------------------------------
# optimizers (numpy, PyTorch semantics), on dicts of arrays
# ---------------------------------------------------------------------------

def _clip(grads, max_norm):
    """torch.nn.utils.clip_grad_norm_: scale by min(1, c / (total + 1e-6))."""
    if max_norm is None:
        return grads
    total = math.sqrt(sum(float(np.sum(np.square(g))) for g in grads.values()))
    coef = min(1.0, max_norm / (total + 1e-6))
    return {k: g * coef for k, g in grads.items()}


class _Optimizer:
    """`step(params, grads)` returns the new parameters (in each parameter's
    dtype; arithmetic and state in float64). `lr` may be changed between steps."""

    def __init__(self, lr, weight_decay, clip_grad_norm):
        self.lr = lr
        self.weight_decay = weight_decay
        self.clip_grad_norm = clip_grad_norm
        self.t = 0
        self.state = {}

    def step(self, params, grads):
        assert set(params) == set(grads)
        self.t += 1
        grads = _clip({k: np.asarray(g, dtype=np.float64) for k, g in grads.items()},
                      self.clip_grad_norm)
        out = {}
        for k, p in params.items():
            p64 = np.asarray(p, dtype=np.float64)
            out[k] = self._update(k, p64, grads[k]).astype(np.asarray(p).dtype)
        return out


class SGD(_Optimizer):
    def __init__(self, lr, momentum=0.0, nesterov=False, weight_decay=0.0,
                 clip_grad_norm=None):
        super().__init__(lr, weight_decay, clip_grad_norm)
        self.momentum, self.nesterov = momentum, nesterov

    def _update(self, k, p, g):
        if self.weight_decay:
            g = g + self.weight_decay * p
        if self.momentum:
            buf = self.momentum * self.state.get(k, np.zeros_like(p)) + g
            self.state[k] = buf
            g = g + self.momentum * buf if self.nesterov else buf
        return p - self.lr * g


class Adam(_Optimizer):
    decoupled = False

    def __init__(self, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0,
                 clip_grad_norm=None):
        super().__init__(lr, weight_decay, clip_grad_norm)
        self.betas, self.eps = betas, eps

    def _update(self, k, p, g):
        b1, b2 = self.betas
        if self.weight_decay:
            if self.decoupled:
                p = p - self.lr * self.weight_decay * p
            else:
                g = g + self.weight_decay * p
        m, v = self.state.get(k, (np.zeros_like(p), np.zeros_like(p)))
        m = b1 * m + (1.0 - b1) * g
        v = b2 * v + (1.0 - b2) * g * g
        self.state[k] = (m, v)
        mhat = m / (1.0 - b1 ** self.t)
        vhat = v / (1.0 - b2 ** self.t)
        return p - self.lr * mhat / (np.sqrt(vhat) + self.eps)


class AdamW(Adam):
    decoupled = True

    def __init__(self, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01,
                 clip_grad_norm=None):
        super().__init__(lr, betas, eps, weight_decay, clip_grad_norm)
