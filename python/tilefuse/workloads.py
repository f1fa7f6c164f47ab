"""The models tilefuse is measured on (see WORKLOADS.md), written with the tilefuse API.

Every workload comes as four plain functions:

* ``<name>_config(**overrides)`` -- a dict of hyper-parameters (the CPU sizes
  of WORKLOADS.md by default);
* ``<name>_init(config, seed=0, dtype=np.float32)`` -- a dict of numpy
  parameters, deterministic in ``seed``;
* ``<name>_batch(config, seed, ...)`` -- a dict of numpy inputs (synthetic data);
* ``<name>_loss(params, batch, seed, config, training=True)`` -- the scalar
  loss, to be called on traced tensors inside :func:`tilefuse.trace`.

``params`` and ``batch`` are dicts of tensors (tilefuse flattens dicts in
sorted key order), ``seed`` is a 0-d int64 traced tensor feeding every
dropout mask; with ``training=False`` dropout is the identity and ``seed``
may be ``None``. Example::

    import numpy as np, tilefuse
    from tilefuse import workloads as W

    cfg = W.gpt2_mini_config()
    params, batch = W.gpt2_mini_init(cfg), W.gpt2_mini_batch(cfg, seed=1)
    fn = lambda p, b, s: W.gpt2_mini_loss(p, b, s, cfg)
    g = tilefuse.trace(fn, params, batch, np.int64(0))
    loss = g.interpret(params, batch, np.int64(0))

Dropout streams. Each ``F.dropout`` call of one trace draws from its own
Philox stream, numbered 0, 1, 2, ... in call order, so the order of the
dropout calls below is part of each model's definition (an independent
implementation needs it to reproduce the masks). It is listed in each
model's docstring; the numbering assumes the model's dropouts are the only
ones in the trace (or the first ones).

Parameters use the PyTorch layouts: a linear layer's weight is
``[out_features, in_features]`` and computes ``x @ w.T + b``.
"""
import math

import numpy as np

import tilefuse
import tilefuse.functional as F
# Parameters and batches of GPT-2 live in workload_data (numpy only: a
# runtime-only installation draws them too).
from .workload_data import (_cast, _config, _torch_linear_init,  # noqa: F401
                            gpt2_mini_batch, gpt2_mini_config, gpt2_mini_init)


# ---------------------------------------------------------------------------
# gpt2_mini
# ---------------------------------------------------------------------------

def _causal_self_attention(x, params, prefix, seed, config, training):
    """Multi-head causal self-attention with explicit matmul/scale/mask/softmax.
    Dropout: on the attention probabilities, then on the output projection."""
    B, T, d = x.shape
    H = config["n_head"]
    hd = d // H
    p = config["dropout"]
    qkv = F.linear(x, params[prefix + "qkv.w"], params[prefix + "qkv.b"])  # [B, T, 3d]

    def heads(t):  # [B, T, d] -> [B, H, T, hd]
        return t.reshape(B, T, H, hd).permute(0, 2, 1, 3)

    q, k, v = heads(qkv[..., :d]), heads(qkv[..., d:2 * d]), heads(qkv[..., 2 * d:])
    scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))  # [B, H, T, T]
    causal = np.tril(np.ones((T, T), dtype=bool))  # query i sees keys j <= i
    scores = tilefuse.where(causal, scores, -1e9)
    probs = F.softmax(scores, dim=-1)
    probs = F.dropout(probs, p, training, seed=seed)
    y = (probs @ v).permute(0, 2, 1, 3).reshape(B, T, d)  # merge heads
    y = F.linear(y, params[prefix + "proj.w"], params[prefix + "proj.b"])
    return F.dropout(y, p, training, seed=seed)


def _mlp(x, params, prefix, seed, config, training):
    """d -> 4d -> GELU (tanh approximation) -> d, then dropout."""
    h = F.linear(x, params[prefix + "fc.w"], params[prefix + "fc.b"])
    h = F.gelu(h, approximate="tanh")
    h = F.linear(h, params[prefix + "proj.w"], params[prefix + "proj.b"])
    return F.dropout(h, config["dropout"], training, seed=seed)


def gpt2_mini_logits(params, inputs, seed, config, training=False):
    """GPT-2 forward: int64 token ids ``inputs`` [B, T] (T <= seq) -> logits
    [B, T, vocab].

    Structure: x = drop(wte[inputs] + wpe[:T]); per block (pre-LN)
    x += attn(ln1(x)); x += mlp(ln2(x)); then lnf and the LM head tied to
    wte (logits = lnf(x) @ wte.T, no bias).

    Dropout streams in call order (with L = n_layer): 0 the embedding sum;
    for block i: 1 + 3i the attention probabilities, 2 + 3i the attention
    output projection, 3 + 3i the MLP output.
    """
    T = inputs.shape[-1]
    eps = config["layer_norm_eps"]
    d = config["d_model"]
    x = F.embedding(inputs, params["wte"]) + params["wpe"][:T]
    x = F.dropout(x, config["dropout"], training, seed=seed)
    def block(x, h):
        a = F.layer_norm(x, d, params[h + "ln1.w"], params[h + "ln1.b"], eps)
        x = x + _causal_self_attention(a, params, h + "attn.", seed, config, training)
        m = F.layer_norm(x, d, params[h + "ln2.w"], params[h + "ln2.b"], eps)
        return x + _mlp(m, params, h + "mlp.", seed, config, training)

    for i in range(config["n_layer"]):
        if config.get("checkpoint"):
            x = tilefuse.checkpoint(block, x, f"h{i}.")
        else:
            x = block(x, f"h{i}.")
    x = F.layer_norm(x, d, params["lnf.w"], params["lnf.b"], eps)
    return F.linear(x, params["wte"])


def gpt2_mini_loss_and_logits(params, batch, seed, config, training=True):
    """(mean next-token cross-entropy, logits [B, seq, vocab]) for ``batch``."""
    tokens = batch["tokens"]
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    logits = gpt2_mini_logits(params, inputs, seed, config, training)
    # Classes are dim 1 of cross_entropy's input (as PyTorch): one row per position.
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
    return loss, logits


def gpt2_mini_loss(params, batch, seed, config, training=True):
    """Mean shifted cross-entropy: position t predicts ``tokens[:, t + 1]``."""
    return gpt2_mini_loss_and_logits(params, batch, seed, config, training)[0]


# ---------------------------------------------------------------------------
# mlp_mnist
# ---------------------------------------------------------------------------

def mlp_mnist_config(**overrides):
    """Flatten -> Linear 784->64 -> ReLU -> Dropout -> Linear 64->64 -> ReLU ->
    Dropout -> Linear 64->10 -> LogSoftmax; NLL loss. Keys: batch, image
    (C, H, W), hidden, classes, dropout."""
    defaults = dict(batch=32, image=(1, 28, 28), hidden=64, classes=10, dropout=0.1)
    return _config(defaults, overrides)


def mlp_mnist_init(config, seed=0, dtype=np.float32):
    """PyTorch default init. Names: ``fc1.{w,b}`` [hidden, 784],
    ``fc2.{w,b}`` [hidden, hidden], ``fc3.{w,b}`` [classes, hidden]."""
    rng = np.random.default_rng(seed)
    n_in = int(np.prod(config["image"]))
    hid, n_out = config["hidden"], config["classes"]
    p = {}
    p["fc1.w"], p["fc1.b"] = _torch_linear_init(rng, hid, n_in)
    p["fc2.w"], p["fc2.b"] = _torch_linear_init(rng, hid, hid)
    p["fc3.w"], p["fc3.b"] = _torch_linear_init(rng, n_out, hid)
    return _cast(p, dtype)


def mlp_mnist_batch(config, seed, dtype=np.float32):
    """Synthetic MNIST-shaped batch: ``{'x': [B, 1, 28, 28] in [0, 1),
    'y': int64 [B] class ids}``; ``dtype`` must match the parameters'."""
    rng = np.random.default_rng(seed)
    B = config["batch"]
    return {
        "x": rng.random((B,) + tuple(config["image"])).astype(dtype),
        "y": rng.integers(0, config["classes"], size=(B,), dtype=np.int64),
    }


def mlp_mnist_log_probs(params, x, seed, config, training=False):
    """Log-probabilities [B, classes]. Dropout streams: 0 after the first
    ReLU, 1 after the second."""
    p = config["dropout"]
    h = x.flatten(1)
    h = F.relu(F.linear(h, params["fc1.w"], params["fc1.b"]))
    h = F.dropout(h, p, training, seed=seed)
    h = F.relu(F.linear(h, params["fc2.w"], params["fc2.b"]))
    h = F.dropout(h, p, training, seed=seed)
    return F.log_softmax(F.linear(h, params["fc3.w"], params["fc3.b"]), dim=-1)


def mlp_mnist_loss(params, batch, seed, config, training=True):
    """Mean negative log-likelihood of ``batch['y']``."""
    logp = mlp_mnist_log_probs(params, batch["x"], seed, config, training)
    return F.nll_loss(logp, batch["y"])


# ---------------------------------------------------------------------------
# deepfm
# ---------------------------------------------------------------------------

def deepfm_config(**overrides):
    """DeepFM on MovieLens-sized ids, two fields (user, movie) sharing one
    embedding table of n_users + n_movies rows (movie ids offset by n_users).
    Keys: batch, n_users, n_movies, embed_dim, hidden (the MLP's hidden
    widths; its input is n_fields * embed_dim)."""
    defaults = dict(batch=240, n_users=610, n_movies=9724, embed_dim=16, hidden=(32, 16))
    return _config(defaults, overrides)


def deepfm_init(config, seed=0, dtype=np.float32):
    """Names: ``emb`` [rows, k] and ``lin`` [rows, 1] (first-order weights),
    ``bias`` [1], ``mlp{j}.{w,b}`` for the hidden layers and ``out.{w,b}``
    [1, last hidden]. Embeddings ~ N(0, 0.1), linear terms ~ N(0, 0.01),
    MLP with the PyTorch default init."""
    rng = np.random.default_rng(seed)
    rows = config["n_users"] + config["n_movies"]
    k = config["embed_dim"]
    p = {
        "emb": rng.normal(0.0, 0.1, (rows, k)),
        "lin": rng.normal(0.0, 0.01, (rows, 1)),
        "bias": np.zeros(1),
    }
    width = 2 * k
    for j, h in enumerate(config["hidden"]):
        p[f"mlp{j}.w"], p[f"mlp{j}.b"] = _torch_linear_init(rng, h, width)
        width = h
    p["out.w"], p["out.b"] = _torch_linear_init(rng, 1, width)
    return _cast(p, dtype)


def deepfm_batch(config, seed, dtype=np.float32):
    """Random interactions: ``{'user': int64 [B] < n_users, 'movie': int64 [B]
    < n_movies (raw, not offset), 'label': [B] in {0, 1}}``; ``dtype`` (of the
    labels) must match the parameters'."""
    rng = np.random.default_rng(seed)
    B = config["batch"]
    return {
        "user": rng.integers(0, config["n_users"], size=(B,), dtype=np.int64),
        "movie": rng.integers(0, config["n_movies"], size=(B,), dtype=np.int64),
        "label": rng.integers(0, 2, size=(B,)).astype(dtype),
    }


def deepfm_probs(params, batch, config):
    """Click probabilities [B]:
    sigmoid(bias + sum_f lin[id_f] + FM + MLP(concat_f emb[id_f])), with
    FM = 0.5 * sum_k((sum_f e_fk)^2 - sum_f e_fk^2) and an MLP of GELU
    (exact, erf form) hidden layers and a linear output of width 1."""
    B = batch["user"].shape[0]
    ids = tilefuse.stack([batch["user"], batch["movie"] + config["n_users"]], dim=1)  # [B, 2]
    e = F.embedding(ids, params["emb"])  # [B, 2, k]
    first_order = F.embedding(ids, params["lin"]).sum([1, 2])  # [B]
    sum_e = e.sum(1)
    fm = 0.5 * (sum_e * sum_e - (e * e).sum(1)).sum(-1)  # [B]
    h = e.reshape(B, -1)
    for j in range(len(config["hidden"])):
        h = F.gelu(F.linear(h, params[f"mlp{j}.w"], params[f"mlp{j}.b"]))
    deep = F.linear(h, params["out.w"], params["out.b"]).reshape(B)
    return F.sigmoid(params["bias"] + first_order + fm + deep)


def deepfm_loss(params, batch, seed=None, config=None, training=True):
    """Mean binary cross-entropy against ``batch['label']``. DeepFM has no
    dropout: ``seed`` and ``training`` are accepted for a uniform signature."""
    config = config or deepfm_config()
    return F.binary_cross_entropy(deepfm_probs(params, batch, config), batch["label"])
