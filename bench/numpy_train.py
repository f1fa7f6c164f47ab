"""Plain-numpy training steps: the baseline the workload benchmark compares
tilefuse against.

One training step (forward, hand-written backward, optimizer update) of
``gpt2_mini`` (AdamW) and ``mlp_mnist`` (Adam), in float32 numpy and nothing
else: no autodiff, no deep-learning framework. The models, losses and
optimizers are those of ``tilefuse.workloads`` and ``tilefuse.optim``;
parameters are dicts with the keys of ``gpt2_mini_init`` / ``mlp_mnist_init``
and are updated in place.

Dropout masks come from a numpy Generator (``dropout_rng.random(shape) >= p``),
not from tilefuse's Philox streams, so with dropout on the baseline does the
same work as tilefuse but not bit-for-bit the same masks. They are drawn in
the model's dropout-stream order, so a reference fed the same draws sees the
same masks.
"""

import math

import numpy as np

F32 = np.float32


# ---------------------------------------------------------------------------
# optimizers
# ---------------------------------------------------------------------------


def init_state(params):
    """Zero Adam/AdamW moments for ``params``."""
    return {
        "exp_avg": {k: np.zeros_like(v) for k, v in params.items()},
        "exp_avg_sq": {k: np.zeros_like(v) for k, v in params.items()},
    }


def adam_update(params, grads, state, step, lr, betas, eps, weight_decay=0.0, decoupled=False):
    """torch.optim.Adam (``decoupled=False``, L2 decay added to the gradient)
    or torch.optim.AdamW (``decoupled=True``, ``p *= 1 - lr * weight_decay``);
    ``params`` and ``state`` are updated in place. ``step`` is 1-based."""
    b1, b2 = betas
    bc1 = 1.0 - b1**step
    bc2 = 1.0 - b2**step
    for k, p in params.items():
        g = grads[k]
        if weight_decay:
            if decoupled:
                p *= F32(1.0 - lr * weight_decay)
            else:
                g = g + F32(weight_decay) * p
        m = state["exp_avg"][k]
        v = state["exp_avg_sq"][k]
        m *= F32(b1)
        m += F32(1.0 - b1) * g
        v *= F32(b2)
        v += F32(1.0 - b2) * (g * g)
        denom = np.sqrt(v / F32(bc2))
        denom += F32(eps)
        p -= F32(lr / bc1) * m / denom


# ---------------------------------------------------------------------------
# building blocks: forward returns (output, cache), backward takes the cache
# ---------------------------------------------------------------------------


def _linear(x, w, b=None):
    y = x @ w.T
    return y if b is None else y + b


def _linear_backward(dy, x, w, with_bias=True):
    """(dx, dw, db) of y = x @ w.T + b, for x of any leading shape."""
    dy2 = dy.reshape(-1, dy.shape[-1])
    dw = dy2.T @ x.reshape(-1, x.shape[-1])
    db = dy2.sum(axis=0) if with_bias else None
    return dy @ w, dw, db


def _layer_norm(x, w, b, eps):
    mu = x.mean(axis=-1, keepdims=True)
    xc = x - mu
    var = (xc * xc).mean(axis=-1, keepdims=True)  # biased, as PyTorch's LayerNorm
    rstd = 1.0 / np.sqrt(var + F32(eps))
    xhat = xc * rstd
    return xhat * w + b, (xhat, rstd)


def _layer_norm_backward(dy, w, cache):
    xhat, rstd = cache
    dw = (dy * xhat).reshape(-1, xhat.shape[-1]).sum(axis=0)
    db = dy.reshape(-1, dy.shape[-1]).sum(axis=0)
    dxhat = dy * w
    # The mean and variance depend on every element of the row: project out
    # the components along 1 and along xhat.
    dx = rstd * (
        dxhat
        - dxhat.mean(axis=-1, keepdims=True)
        - xhat * (dxhat * xhat).mean(axis=-1, keepdims=True)
    )
    return dx, dw, db


_GELU_C = F32(math.sqrt(2.0 / math.pi))
_GELU_A = F32(0.044715)


def _gelu_tanh(x):
    t = np.tanh(_GELU_C * (x + _GELU_A * x * x * x))
    return F32(0.5) * x * (F32(1.0) + t), t


def _gelu_tanh_backward(dy, x, t):
    du_dx = _GELU_C * (F32(1.0) + F32(3.0) * _GELU_A * x * x)
    return dy * (F32(0.5) * (F32(1.0) + t) + F32(0.5) * x * (F32(1.0) - t * t) * du_dx)


def _dropout_mask(rng, p, shape):
    """Keep-mask already scaled by 1/(1-p), or None when dropout is off."""
    if rng is None or p == 0:
        return None
    keep = rng.random(shape) >= p
    return keep.astype(F32) * F32(1.0 / (1.0 - p))


def _apply(mask, x):
    # Dropout's backward is the same multiplication as its forward.
    return x if mask is None else x * mask


def _softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _cross_entropy(logits, targets):
    """(mean NLL of ``targets`` under softmax(logits), d loss / d logits)."""
    V = logits.shape[-1]
    z = logits.reshape(-1, V)
    t = targets.reshape(-1)
    n = z.shape[0]
    z = z - z.max(axis=-1, keepdims=True)
    lse = np.log(np.exp(z).sum(axis=-1, keepdims=True))
    logp = z - lse
    rows = np.arange(n)
    loss = -logp[rows, t].mean(dtype=np.float64)
    dz = np.exp(logp)
    dz[rows, t] -= 1.0
    dz *= F32(1.0 / n)
    return float(loss), dz.reshape(logits.shape)


# ---------------------------------------------------------------------------
# gpt2_mini
# ---------------------------------------------------------------------------


def _attention(x, params, pre, config, rng):
    B, T, d = x.shape
    H = config["n_head"]
    hd = d // H
    p = config["dropout"]
    qkv = _linear(x, params[pre + "qkv.w"], params[pre + "qkv.b"])
    qkv = qkv.reshape(B, T, 3, H, hd).transpose(2, 0, 3, 1, 4)  # [3, B, H, T, hd]
    q, k, v = qkv[0], qkv[1], qkv[2]
    scale = F32(1.0 / math.sqrt(hd))
    scores = (q @ k.transpose(0, 1, 3, 2)) * scale
    causal = np.tril(np.ones((T, T), dtype=bool))  # query t sees keys s <= t
    scores = np.where(causal, scores, F32(-1e9))
    probs = _softmax(scores)
    m_probs = _dropout_mask(rng, p, probs.shape)
    probs_d = _apply(m_probs, probs)
    o = (probs_d @ v).transpose(0, 2, 1, 3).reshape(B, T, d)
    y = _linear(o, params[pre + "proj.w"], params[pre + "proj.b"])
    m_out = _dropout_mask(rng, p, y.shape)
    cache = (x, q, k, v, probs, probs_d, m_probs, o, m_out, scale)
    return _apply(m_out, y), cache


def _attention_backward(dy, params, pre, grads, cache):
    x, q, k, v, probs, probs_d, m_probs, o, m_out, scale = cache
    B, T, d = x.shape
    H, hd = q.shape[1], q.shape[3]
    dy = _apply(m_out, dy)
    do, grads[pre + "proj.w"], grads[pre + "proj.b"] = _linear_backward(
        dy, o, params[pre + "proj.w"]
    )
    do = do.reshape(B, T, H, hd).transpose(0, 2, 1, 3)
    dprobs = _apply(m_probs, do @ v.transpose(0, 1, 3, 2))
    dv = probs_d.transpose(0, 1, 3, 2) @ do
    # Masked-out entries have probs == 0, so their score gradient vanishes here.
    dscores = probs * (dprobs - (dprobs * probs).sum(axis=-1, keepdims=True))
    dscores *= scale
    dq = dscores @ k
    dk = dscores.transpose(0, 1, 3, 2) @ q
    dqkv = np.stack([dq, dk, dv]).transpose(1, 3, 0, 2, 4).reshape(B, T, 3 * d)
    dx, grads[pre + "qkv.w"], grads[pre + "qkv.b"] = _linear_backward(
        dqkv, x, params[pre + "qkv.w"]
    )
    return dx


def _mlp(x, params, pre, config, rng):
    h = _linear(x, params[pre + "fc.w"], params[pre + "fc.b"])
    g, t = _gelu_tanh(h)
    y = _linear(g, params[pre + "proj.w"], params[pre + "proj.b"])
    mask = _dropout_mask(rng, config["dropout"], y.shape)
    return _apply(mask, y), (x, h, t, g, mask)


def _mlp_backward(dy, params, pre, grads, cache):
    x, h, t, g, mask = cache
    dy = _apply(mask, dy)
    dg, grads[pre + "proj.w"], grads[pre + "proj.b"] = _linear_backward(
        dy, g, params[pre + "proj.w"]
    )
    dh = _gelu_tanh_backward(dg, h, t)
    dx, grads[pre + "fc.w"], grads[pre + "fc.b"] = _linear_backward(dh, x, params[pre + "fc.w"])
    return dx


def gpt2_mini_loss_and_grads(params, batch, config, dropout_rng=None):
    """(mean next-token cross-entropy, {name: gradient}) of gpt2_mini.

    Dropout masks are drawn from ``dropout_rng`` in the model's stream order
    (embedding sum; per block: attention probabilities, attention output,
    MLP output); ``None`` disables dropout.
    """
    tokens = batch["tokens"]
    ids, targets = tokens[:, :-1], tokens[:, 1:]
    B, T = ids.shape
    eps = config["layer_norm_eps"]
    wte = params["wte"]

    # forward
    x = wte[ids] + params["wpe"][:T]
    m_emb = _dropout_mask(dropout_rng, config["dropout"], x.shape)
    x = _apply(m_emb, x)
    blocks = []
    for i in range(config["n_layer"]):
        h = f"h{i}."
        a, ln1 = _layer_norm(x, params[h + "ln1.w"], params[h + "ln1.b"], eps)
        y, attn = _attention(a, params, h + "attn.", config, dropout_rng)
        x = x + y
        m, ln2 = _layer_norm(x, params[h + "ln2.w"], params[h + "ln2.b"], eps)
        y, mlp = _mlp(m, params, h + "mlp.", config, dropout_rng)
        x = x + y
        blocks.append((ln1, attn, ln2, mlp))
    xf, lnf = _layer_norm(x, params["lnf.w"], params["lnf.b"], eps)
    logits = _linear(xf, wte)  # LM head tied to the token embedding
    loss, dlogits = _cross_entropy(logits, targets)

    # backward
    grads = {}
    dxf, dwte_head, _ = _linear_backward(dlogits, xf, wte, with_bias=False)
    dx, grads["lnf.w"], grads["lnf.b"] = _layer_norm_backward(dxf, params["lnf.w"], lnf)
    for i in reversed(range(config["n_layer"])):
        h = f"h{i}."
        ln1, attn, ln2, mlp = blocks[i]
        dm = _mlp_backward(dx, params, h + "mlp.", grads, mlp)
        dm, grads[h + "ln2.w"], grads[h + "ln2.b"] = _layer_norm_backward(
            dm, params[h + "ln2.w"], ln2
        )
        dx = dx + dm
        da = _attention_backward(dx, params, h + "attn.", grads, attn)
        da, grads[h + "ln1.w"], grads[h + "ln1.b"] = _layer_norm_backward(
            da, params[h + "ln1.w"], ln1
        )
        dx = dx + da
    dx = _apply(m_emb, dx)
    dwpe = np.zeros_like(params["wpe"])
    dwpe[:T] = dx.sum(axis=0)
    grads["wpe"] = dwpe
    # Repeated token ids must accumulate, which fancy-index assignment would not.
    np.add.at(dwte_head, ids.reshape(-1), dx.reshape(-1, dx.shape[-1]))
    grads["wte"] = dwte_head
    return loss, grads


def gpt2_mini_step(
    params,
    state,
    batch,
    step,
    config,
    lr=1e-3,
    weight_decay=0.01,
    betas=(0.9, 0.999),
    eps=1e-8,
    dropout_rng=None,
):
    """One AdamW training step of gpt2_mini; ``params`` and ``state`` are
    updated in place, the loss (before the update) is returned."""
    loss, grads = gpt2_mini_loss_and_grads(params, batch, config, dropout_rng)
    adam_update(params, grads, state, step, lr, betas, eps, weight_decay, decoupled=True)
    return loss


# ---------------------------------------------------------------------------
# mlp_mnist
# ---------------------------------------------------------------------------


def mlp_mnist_loss_and_grads(params, batch, config, dropout_rng=None):
    """(mean NLL, {name: gradient}) of mlp_mnist; dropout masks are drawn
    after the first ReLU, then after the second (``None``: no dropout)."""
    x = batch["x"].reshape(batch["x"].shape[0], -1)
    p = config["dropout"]

    h1 = np.maximum(_linear(x, params["fc1.w"], params["fc1.b"]), F32(0.0))
    m1 = _dropout_mask(dropout_rng, p, h1.shape)
    a1 = _apply(m1, h1)
    h2 = np.maximum(_linear(a1, params["fc2.w"], params["fc2.b"]), F32(0.0))
    m2 = _dropout_mask(dropout_rng, p, h2.shape)
    a2 = _apply(m2, h2)
    logits = _linear(a2, params["fc3.w"], params["fc3.b"])
    # log_softmax followed by NLL is cross-entropy on the logits.
    loss, dlogits = _cross_entropy(logits, batch["y"])

    grads = {}
    da2, grads["fc3.w"], grads["fc3.b"] = _linear_backward(dlogits, a2, params["fc3.w"])
    dh2 = _apply(m2, da2) * (h2 > 0)
    da1, grads["fc2.w"], grads["fc2.b"] = _linear_backward(dh2, a1, params["fc2.w"])
    dh1 = _apply(m1, da1) * (h1 > 0)
    _, grads["fc1.w"], grads["fc1.b"] = _linear_backward(dh1, x, params["fc1.w"])
    return loss, grads


def mlp_mnist_step(
    params,
    state,
    batch,
    step,
    config,
    lr=2e-4,
    betas=(0.9, 0.999),
    eps=1e-8,
    dropout_rng=None,
):
    """One Adam training step of mlp_mnist; ``params`` and ``state`` are
    updated in place, the loss (before the update) is returned."""
    loss, grads = mlp_mnist_loss_and_grads(params, batch, config, dropout_rng)
    adam_update(params, grads, state, step, lr, betas, eps)
    return loss
