"""Pure-numpy reference implementations of the WORKLOADS.md models.

Written from the model descriptions (WORKLOADS.md and the documented
parameter names / dropout stream order of tilefuse.workloads), not from the
tilefuse code: no tilefuse import here. Everything is computed in the dtype
given (float64 by default), so a float32 graph can be checked against an
exact-ish float64 answer.

Dropout follows graph.random_uniform: Philox 4x32-10 with key
(seed lo32, seed hi32), counter (i//4 lo32, i//4 hi32, stream, 0) for
element i (row-major), word i%4; u = (bits >> 8) * 2^-24 for float32 and
bits * 2^-32 for float64; keep where u >= p, scale kept values by 1/(1-p).
"""
import numpy as np

_M0, _M1 = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)
_W0, _W1 = 0x9E3779B9, 0xBB67AE85
_LO = np.uint64(0xFFFFFFFF)
_SHIFT32 = np.uint64(32)


def philox4x32_10(c0, c1, c2, c3, k0, k1):
    """Vectorized Philox 4x32-10 (Salmon et al., SC'11). Counters are uint32
    arrays (or scalars) of one shape, the key two Python ints; returns the
    four output words as uint32 arrays."""
    c = [np.asarray(x, dtype=np.uint64) & _LO for x in (c0, c1, c2, c3)]
    c = list(np.broadcast_arrays(*c))
    k0, k1 = int(k0) & 0xFFFFFFFF, int(k1) & 0xFFFFFFFF
    for _ in range(10):
        p0 = _M0 * c[0]  # < 2^64: no overflow in uint64
        p1 = _M1 * c[2]
        hi0, lo0 = p0 >> _SHIFT32, p0 & _LO
        hi1, lo1 = p1 >> _SHIFT32, p1 & _LO
        c = [hi1 ^ c[1] ^ np.uint64(k0), lo1, hi0 ^ c[3] ^ np.uint64(k1), lo0]
        k0, k1 = (k0 + _W0) & 0xFFFFFFFF, (k1 + _W1) & 0xFFFFFFFF
    return [x.astype(np.uint32) for x in c]


def random_bits(seed, stream, n):
    """The 32 random bits of elements 0..n-1 of random_uniform(seed, stream)."""
    seed = int(seed) & 0xFFFFFFFFFFFFFFFF
    n_blocks = (n + 3) // 4
    block = np.arange(n_blocks, dtype=np.uint64)
    words = philox4x32_10(block & _LO, block >> _SHIFT32, np.uint64(stream), np.uint64(0),
                          seed & 0xFFFFFFFF, seed >> 32)
    return np.stack(words, axis=1).reshape(-1)[:n]  # element 4b + w is word w of block b


def random_uniform(seed, stream, shape, dtype=np.float64):
    """graph.random_uniform: values in [0, 1), exact in `dtype`."""
    n = int(np.prod(shape, dtype=np.int64))
    bits = random_bits(seed, stream, n).astype(np.float64)
    if np.dtype(dtype) == np.float32:
        u = np.floor(bits / 256.0) * 2.0 ** -24
    elif np.dtype(dtype) == np.float64:
        u = bits * 2.0 ** -32
    else:
        raise ValueError(f"random_uniform: no reference for {dtype}")
    return u.reshape(shape).astype(dtype)


class Dropout:
    """Hands out masks on consecutive streams, as the tracer numbers the
    dropout calls of one trace. `mask_dtype` is the dtype of the traced
    graph (it decides how many random bits form u)."""

    def __init__(self, seed, p, training, mask_dtype):
        self.seed, self.p, self.training = seed, p, training
        self.mask_dtype = mask_dtype
        self.stream = 0

    def __call__(self, x):
        if not self.training or self.p == 0:
            return x
        u = random_uniform(self.seed, self.stream, x.shape, self.mask_dtype)
        self.stream += 1
        keep = u >= np.asarray(self.p, dtype=self.mask_dtype)
        return np.where(keep, x * (1.0 / (1.0 - self.p)), 0.0).astype(x.dtype)


# ---------------------------------------------------------------------------
# building blocks
# ---------------------------------------------------------------------------

def _layer_norm(x, w, b, eps):
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def _log_softmax(z):
    z = z - z.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def _gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))


def _gelu_erf(x):
    from math import erf
    return 0.5 * x * (1.0 + np.vectorize(erf, otypes=[x.dtype])(x / np.sqrt(2.0)))


def _mean_nll(logp, target):
    picked = np.take_along_axis(logp, target[..., None], axis=-1)[..., 0]
    return -picked.mean()


def _as(params, dtype):
    return {k: np.asarray(v, dtype=dtype) for k, v in params.items()}


# ---------------------------------------------------------------------------
# models
# ---------------------------------------------------------------------------

def gpt2_mini(params, tokens, seed, config, training=True, dtype=np.float64,
              mask_dtype=None):
    """Returns (loss, logits [B, T, V]) for int tokens [B, T + 1].

    Pre-LN GPT-2; dropout streams: 0 on the embeddings, then per layer l
    1+3l attention probabilities, 2+3l attention output, 3+3l MLP output.
    `mask_dtype` (default `dtype`) is the dtype of the graph whose masks
    are reproduced.
    """
    P = _as(params, dtype)
    drop = Dropout(seed, config["dropout"], training, mask_dtype or dtype)
    eps = config["layer_norm_eps"]
    inp, tgt = tokens[:, :-1], tokens[:, 1:]
    B, T = inp.shape
    H = config["n_head"]
    D = config["d_model"]
    Dh = D // H
    future = np.triu(np.ones((T, T), dtype=bool), k=1)

    x = drop(P["wte"][inp] + P["wpe"][np.arange(T)])
    for l in range(config["n_layer"]):
        pre = f"h{l}."
        # attention
        a = _layer_norm(x, P[pre + "ln1.w"], P[pre + "ln1.b"], eps)
        W, bias = P[pre + "attn.qkv.w"], P[pre + "attn.qkv.b"]
        q = np.einsum("btc,oc->bto", a, W[:D]) + bias[:D]
        k = np.einsum("btc,oc->bto", a, W[D:2 * D]) + bias[D:2 * D]
        v = np.einsum("btc,oc->bto", a, W[2 * D:]) + bias[2 * D:]
        q, k, v = (t.reshape(B, T, H, Dh) for t in (q, k, v))
        s = np.einsum("bqhc,bkhc->bhqk", q, k) / np.sqrt(Dh)
        s = np.where(future, -np.inf, s)
        att = np.exp(_log_softmax(s))
        att = drop(att)
        o = np.einsum("bhqk,bkhc->bqhc", att, v).reshape(B, T, D)
        o = o @ P[pre + "attn.proj.w"].T + P[pre + "attn.proj.b"]
        x = x + drop(o)
        # MLP
        m = _layer_norm(x, P[pre + "ln2.w"], P[pre + "ln2.b"], eps)
        m = _gelu_tanh(m @ P[pre + "mlp.fc.w"].T + P[pre + "mlp.fc.b"])
        m = m @ P[pre + "mlp.proj.w"].T + P[pre + "mlp.proj.b"]
        x = x + drop(m)
    x = _layer_norm(x, P["lnf.w"], P["lnf.b"], eps)
    logits = x @ P["wte"].T
    return _mean_nll(_log_softmax(logits), tgt), logits


def mlp_mnist(params, x, y, seed, config, training=True, dtype=np.float64, mask_dtype=None):
    """NLL loss of Flatten -> 784->64 ReLU Drop -> 64->64 ReLU Drop -> 64->10
    LogSoftmax. Dropout streams 0 and 1 in that order."""
    P = _as(params, dtype)
    drop = Dropout(seed, config["dropout"], training, mask_dtype or dtype)
    h = np.asarray(x, dtype=dtype).reshape(x.shape[0], -1)
    h = drop(np.maximum(h @ P["fc1.w"].T + P["fc1.b"], 0.0))
    h = drop(np.maximum(h @ P["fc2.w"].T + P["fc2.b"], 0.0))
    return _mean_nll(_log_softmax(h @ P["fc3.w"].T + P["fc3.b"]), y)


def deepfm(params, user, movie, label, config, dtype=np.float64):
    """Mean BCE (logs clamped at -100) of DeepFM with one table shared by the
    user field (rows 0..n_users-1) and the movie field (rows offset by n_users)."""
    P = _as(params, dtype)
    rows = np.stack([user, movie + config["n_users"]], axis=1)  # [B, fields]
    E = P["emb"][rows]  # [B, fields, k]
    linear = P["bias"][0] + P["lin"][rows][..., 0].sum(axis=1)
    fm = 0.5 * ((E.sum(axis=1) ** 2) - (E ** 2).sum(axis=1)).sum(axis=1)
    h = E.reshape(E.shape[0], -1)
    for j in range(len(config["hidden"])):
        h = _gelu_erf(h @ P[f"mlp{j}.w"].T + P[f"mlp{j}.b"])
    deep = (h @ P["out.w"].T + P["out.b"])[:, 0]
    z = linear + fm + deep
    prob = 1.0 / (1.0 + np.exp(-z))
    t = np.asarray(label, dtype=dtype)
    with np.errstate(divide="ignore"):
        log_p = np.maximum(np.log(prob), -100.0)
        log_q = np.maximum(np.log(1.0 - prob), -100.0)
    return -(t * log_p + (1.0 - t) * log_q).mean()
