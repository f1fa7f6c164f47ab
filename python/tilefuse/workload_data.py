"""Parameters and batches of the workloads (see workloads.py), numpy only:
no compiler needed, so a runtime-only installation (a GPU machine running
artifacts) draws exactly the same initial parameters and batches as the
machine that compiled them."""
import math

import numpy as np


def _config(defaults, overrides):
    unknown = set(overrides) - set(defaults)
    if unknown:
        raise ValueError(f"unknown config keys {sorted(unknown)}; known: {sorted(defaults)}")
    cfg = dict(defaults)
    cfg.update(overrides)
    return cfg


def _torch_linear_init(rng, out_features, in_features):
    """PyTorch's nn.Linear default: weight and bias ~ U(-1/sqrt(in), 1/sqrt(in))."""
    bound = 1.0 / math.sqrt(in_features)
    w = rng.uniform(-bound, bound, size=(out_features, in_features))
    b = rng.uniform(-bound, bound, size=(out_features,))
    return w, b


def _cast(params, dtype):
    return {k: np.asarray(v, dtype=dtype) for k, v in params.items()}


def gpt2_mini_config(**overrides):
    """GPT-2 hyper-parameters; the defaults are the CPU sizes of WORKLOADS.md.

    Keys: n_layer, d_model, n_head, seq (tokens per sequence fed to the
    model), vocab, batch, dropout (probability, used everywhere dropout is
    applied), layer_norm_eps, checkpoint (True: each block runs under
    tilefuse.checkpoint, its activations recomputed in the backward pass).
    """
    defaults = dict(n_layer=2, d_model=128, n_head=4, seq=128, vocab=1024, batch=4,
                    dropout=0.1, layer_norm_eps=1e-5, checkpoint=False)
    cfg = _config(defaults, overrides)
    if cfg["d_model"] % cfg["n_head"]:
        raise ValueError("gpt2_mini: d_model must be a multiple of n_head")
    return cfg


def gpt2_mini_init(config, seed=0, dtype=np.float32):
    """GPT-2 initialisation: N(0, 0.02) weights, the two residual projections
    of each block scaled by 1/sqrt(2 n_layer), zero biases, unit LayerNorm.

    Names (``h{i}`` for block i): ``wte`` [vocab, d] (also the LM head),
    ``wpe`` [seq, d], ``h{i}.ln1.{w,b}`` [d], ``h{i}.attn.qkv.{w [3d, d], b [3d]}``
    (rows: q, then k, then v), ``h{i}.attn.proj.{w [d, d], b [d]}``,
    ``h{i}.ln2.{w,b}`` [d], ``h{i}.mlp.fc.{w [4d, d], b [4d]}``,
    ``h{i}.mlp.proj.{w [d, 4d], b [d]}``, ``lnf.{w,b}`` [d].
    """
    rng = np.random.default_rng(seed)
    d, L = config["d_model"], config["n_layer"]
    std, proj_std = 0.02, 0.02 / math.sqrt(2 * L)
    p = {
        "wte": rng.normal(0.0, std, (config["vocab"], d)),
        "wpe": rng.normal(0.0, std, (config["seq"], d)),
    }
    for i in range(L):
        h = f"h{i}."
        p[h + "ln1.w"], p[h + "ln1.b"] = np.ones(d), np.zeros(d)
        p[h + "attn.qkv.w"] = rng.normal(0.0, std, (3 * d, d))
        p[h + "attn.qkv.b"] = np.zeros(3 * d)
        p[h + "attn.proj.w"] = rng.normal(0.0, proj_std, (d, d))
        p[h + "attn.proj.b"] = np.zeros(d)
        p[h + "ln2.w"], p[h + "ln2.b"] = np.ones(d), np.zeros(d)
        p[h + "mlp.fc.w"] = rng.normal(0.0, std, (4 * d, d))
        p[h + "mlp.fc.b"] = np.zeros(4 * d)
        p[h + "mlp.proj.w"] = rng.normal(0.0, proj_std, (d, 4 * d))
        p[h + "mlp.proj.b"] = np.zeros(d)
    p["lnf.w"], p["lnf.b"] = np.ones(d), np.zeros(d)
    return _cast(p, dtype)


def gpt2_mini_batch(config, seed):
    """Synthetic language-model batch: ``{'tokens': int64 [batch, seq + 1]}``,
    uniform over the vocabulary. The model reads ``tokens[:, :-1]`` and
    predicts ``tokens[:, 1:]``."""
    rng = np.random.default_rng(seed)
    shape = (config["batch"], config["seq"] + 1)
    return {"tokens": rng.integers(0, config["vocab"], size=shape, dtype=np.int64)}
