"""WORKLOADS' unet_effnet in JAX, for the benchmark's same-run comparison:
the module structure of bench/conv_models.py's UNetEffNet written with
jax.lax convolutions, reading the PyTorch model's parameters and buffers by
name, so both start from the same weights; batch norm in training mode
(batch statistics, running statistics updated as PyTorch does), bilinear
upsampling with half-pixel centres (PyTorch's align_corners=False),
cross-entropy with the ignore label, AdamW as torch.optim.AdamW, one
jax.jit step."""
import jax
import jax.numpy as jnp
from jax import lax

from conv_models import IGNORE

EPS, MOMENTUM = 1e-5, 0.1


def _conv(p, name, x, stride=1, padding=0):
    w = p[name + ".weight"]
    groups = x.shape[1] // w.shape[1]
    y = lax.conv_general_dilated(x, w, (stride, stride), [(padding, padding)] * 2,
                                 dimension_numbers=("NCHW", "OIHW", "NCHW"),
                                 feature_group_count=groups)
    b = p.get(name + ".bias")
    return y if b is None else y + b[None, :, None, None]


def _bn(p, state, new, name, x):
    mean = x.mean((0, 2, 3))
    var = x.var((0, 2, 3))
    n = x.size // x.shape[1]
    new[name + ".running_mean"] = (1 - MOMENTUM) * state[name + ".running_mean"] + \
        MOMENTUM * lax.stop_gradient(mean)
    new[name + ".running_var"] = (1 - MOMENTUM) * state[name + ".running_var"] + \
        MOMENTUM * lax.stop_gradient(var) * n / (n - 1)
    scale = p[name + ".weight"] * lax.rsqrt(var + EPS)
    return (x - mean[None, :, None, None]) * scale[None, :, None, None] + \
        p[name + ".bias"][None, :, None, None]


def _silu(x):
    return x * jax.nn.sigmoid(x)


def _squeeze_excite(p, name, h):
    s = h.mean((2, 3), keepdims=True)
    s = _silu(_conv(p, name + ".1", s))
    return h * jax.nn.sigmoid(_conv(p, name + ".3", s))


def _mbconv_down(p, st, new, name, x, stride):
    h = _silu(_bn(p, st, new, name + ".body.1", _conv(p, name + ".body.0", x)))
    h = _silu(_bn(p, st, new, name + ".body.4", _conv(p, name + ".body.3", h, stride, 1)))
    h = _squeeze_excite(p, name + ".se", h)
    return _bn(p, st, new, name + ".project.1", _conv(p, name + ".project.0", h))


def _mbconv(p, st, new, name, x):
    h = _silu(_bn(p, st, new, name + ".expand.1", _conv(p, name + ".expand.0", x)))
    h = _silu(_bn(p, st, new, name + ".depthwise.1", _conv(p, name + ".depthwise.0", h, 1, 1)))
    h = _squeeze_excite(p, name + ".se", h)
    return x + _bn(p, st, new, name + ".project.1", _conv(p, name + ".project.0", h))


def _cbr(p, st, new, name, x):
    return jax.nn.relu(_bn(p, st, new, name + ".1", _conv(p, name + ".0", x, 1, 1)))


def _upsample(x, size):
    return jax.image.resize(x, x.shape[:2] + tuple(size), "bilinear", antialias=False)


def forward(p, st, x, stages, levels):
    """(logits, new running statistics)."""
    new = {}
    size = x.shape[-2:]
    x = _silu(_bn(p, st, new, "stem.1", _conv(p, "stem.0", x, 2, 1)))
    skips = []
    for i in range(stages):
        x = _mbconv_down(p, st, new, f"stages.{i}.0", x, 1 if i == 0 else 2)
        x = _mbconv(p, st, new, f"stages.{i}.1", x)
        skips.append(x)
    for j, skip in zip(range(levels), reversed(skips[:-1])):
        x = jnp.concatenate([_upsample(x, skip.shape[-2:]), skip], 1)
        x = _cbr(p, st, new, f"decoder.{j}.1", _cbr(p, st, new, f"decoder.{j}.0", x))
    x = _upsample(x, size)
    return _conv(p, "last.1", _cbr(p, st, new, "last.0", x)), new


def segmentation_loss(logits, y):
    logp = jax.nn.log_softmax(logits, axis=1)
    valid = y != IGNORE
    picked = jnp.take_along_axis(logp, jnp.where(valid, y, 0)[:, None], axis=1)[:, 0]
    return -(picked * valid).sum() / valid.sum()


def adamw_step(model, x, y, lr=1e-3, weight_decay=1e-2, betas=(0.9, 0.999), eps=1e-8):
    """A callable running one jitted AdamW step of `model` (a PyTorch
    UNetEffNet, whose parameters and buffers it copies) on (x, y); it
    returns the step's loss (a JAX scalar, before the update)."""
    params = {k: jnp.asarray(v.detach().numpy()) for k, v in model.named_parameters()}
    stats = {k: jnp.asarray(v.numpy()) for k, v in model.named_buffers()
             if k.endswith(("running_mean", "running_var"))}
    stages, levels = len(model.stages), len(model.decoder)
    b1, b2 = betas
    xj, yj = jnp.asarray(x.numpy()), jnp.asarray(y.numpy())

    def loss_fn(p, st):
        logits, new = forward(p, st, xj, stages, levels)
        return segmentation_loss(logits, yj), new

    @jax.jit
    def step(p, m, v, st, t):
        (loss, new_st), g = jax.value_and_grad(loss_fn, has_aux=True)(p, st)
        out_p, out_m, out_v = {}, {}, {}
        for k in p:
            out_m[k] = b1 * m[k] + (1 - b1) * g[k]
            out_v[k] = b2 * v[k] + (1 - b2) * g[k] * g[k]
            mhat = out_m[k] / (1 - b1 ** t)
            vhat = out_v[k] / (1 - b2 ** t)
            out_p[k] = p[k] * (1 - lr * weight_decay) - lr * mhat / (jnp.sqrt(vhat) + eps)
        return loss, out_p, out_m, out_v, new_st

    state = {"p": params, "m": {k: jnp.zeros_like(a) for k, a in params.items()},
             "v": {k: jnp.zeros_like(a) for k, a in params.items()}, "st": stats, "t": 0}

    def one():
        state["t"] += 1
        loss, state["p"], state["m"], state["v"], state["st"] = step(
            state["p"], state["m"], state["v"], state["st"], jnp.float32(state["t"]))
        return loss.block_until_ready()
    return one
