"""PyTorch references of two tilefuse workloads (gpt2_mini, mlp_mnist) and a
PyTorch training loop, for numerics comparisons with tilefuse.

Plain PyTorch (torch.nn.functional, torch.optim, torch.autocast); no tilefuse
import. The models follow the documented math of tilefuse.workloads:

* parameters: the numpy dicts of ``W.gpt2_mini_init`` / ``W.mlp_mnist_init``
  (same names), PyTorch layouts -- a linear weight is ``[out, in]`` and
  computes ``x @ w.T + b``; gpt2's ``attn.qkv.w`` rows are q, then k, then v;
* gpt2_mini: x = wte[tokens[:, :-1]] + wpe[:T]; per block (pre-LN)
  x += proj(softmax(where(causal, q k^T / sqrt(hd), -1e9)) v) of ln1(x) and
  x += proj(gelu_tanh(fc(ln2(x)))); then lnf and the LM head tied to wte
  (no bias); mean cross-entropy of position t against ``tokens[:, t + 1]``;
  LayerNorm eps = ``config["layer_norm_eps"]``;
* mlp_mnist: flatten -> fc1 -> ReLU -> fc2 -> ReLU -> fc3 -> log_softmax;
  mean NLL of ``batch["y"]``.

Dropout: only the identity. Training with ``config["dropout"] != 0`` raises
ValueError (tilefuse draws its masks from its own Philox streams, which this
module does not reproduce); compare with ``W.gpt2_mini_config(dropout=0.0)``
/ ``W.mlp_mnist_config(dropout=0.0)``, for which tilefuse's F.dropout is the
identity too. For speed comparisons (bench/workloads.py) the loss functions
take ``dropout=``, a function applied at every site where tilefuse's model
drops out (PyTorch's own masks, so not the same numbers).

The loss functions mirror the tilefuse signature ``loss(params, batch, seed,
config, training=True)`` (``seed`` is unused). ``params`` is a dict of torch
tensors (see :func:`to_torch`; numpy arrays are converted, without gradient),
``batch`` the numpy batch dict of the tilefuse workload; float batch entries
are cast to the parameters' dtype.
"""
import inspect
import math

import numpy as np
import torch
import torch.nn.functional as F


def to_torch(params_np, dtype=None, requires_grad=True):
    """{name: leaf torch tensor} from a dict of numpy arrays (copies), in
    ``dtype`` (a torch dtype; default: the arrays' own), with requires_grad."""
    out = {}
    for k, v in params_np.items():
        t = torch.tensor(np.asarray(v))
        if dtype is not None:
            t = t.to(dtype)
        out[k] = t.requires_grad_(requires_grad)
    return out


def _params(params):
    return {k: v if isinstance(v, torch.Tensor) else torch.as_tensor(np.asarray(v))
            for k, v in params.items()}


def _check_dropout(name, config, training, dropout=None):
    p = config["dropout"]
    if training and p != 0 and dropout is None:
        raise ValueError(f"torch_reference.{name}: training with dropout={p} is not "
                         f"supported (tilefuse's Philox masks are not reproduced); use a "
                         f"config with dropout=0.0")


def _float_input(x, like):
    """A numpy float batch entry as a tensor of the parameters' float dtype."""
    return torch.as_tensor(np.asarray(x)).to(like.dtype)


# ---------------------------------------------------------------------------
# gpt2_mini
# ---------------------------------------------------------------------------

def gpt2_mini_logits(params, inputs, seed, config, training=False, dropout=None):
    """Logits [B, T, vocab] of int64 token ids ``inputs`` [B, T]."""
    _check_dropout("gpt2_mini_logits", config, training, dropout)
    drop = dropout if training and dropout is not None else (lambda t: t)
    p = _params(params)
    ids = torch.as_tensor(np.asarray(inputs)) if not isinstance(inputs, torch.Tensor) else inputs
    B, T = ids.shape
    d, H, eps = config["d_model"], config["n_head"], config["layer_norm_eps"]
    hd = d // H
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool))  # query i sees keys j <= i
    x = drop(F.embedding(ids, p["wte"]) + p["wpe"][:T])
    for i in range(config["n_layer"]):
        h = f"h{i}."
        a = F.layer_norm(x, (d,), p[h + "ln1.w"], p[h + "ln1.b"], eps)
        qkv = F.linear(a, p[h + "attn.qkv.w"], p[h + "attn.qkv.b"])  # [B, T, 3d]
        q, k, v = (t.reshape(B, T, H, hd).permute(0, 2, 1, 3) for t in qkv.split(d, dim=-1))
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))  # [B, H, T, T]
        scores = torch.where(causal, scores, torch.tensor(-1e9, dtype=scores.dtype))
        probs = drop(F.softmax(scores, dim=-1))
        y = (probs @ v).permute(0, 2, 1, 3).reshape(B, T, d)
        x = x + drop(F.linear(y, p[h + "attn.proj.w"], p[h + "attn.proj.b"]))
        m = F.layer_norm(x, (d,), p[h + "ln2.w"], p[h + "ln2.b"], eps)
        m = F.gelu(F.linear(m, p[h + "mlp.fc.w"], p[h + "mlp.fc.b"]), approximate="tanh")
        x = x + drop(F.linear(m, p[h + "mlp.proj.w"], p[h + "mlp.proj.b"]))
    x = F.layer_norm(x, (d,), p["lnf.w"], p["lnf.b"], eps)
    return F.linear(x, p["wte"])  # LM head tied to the token embedding, no bias


def gpt2_mini_loss(params, batch, seed, config, training=True, dropout=None):
    """Mean shifted cross-entropy: position t predicts ``tokens[:, t + 1]``."""
    _check_dropout("gpt2_mini_loss", config, training, dropout)
    tokens = torch.as_tensor(np.asarray(batch["tokens"]))
    logits = gpt2_mini_logits(params, tokens[:, :-1], seed, config, training, dropout)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))


# ---------------------------------------------------------------------------
# mlp_mnist
# ---------------------------------------------------------------------------

def mlp_mnist_log_probs(params, x, seed, config, training=False, dropout=None):
    """Log-probabilities [B, classes] of images ``x`` [B, C, H, W]."""
    _check_dropout("mlp_mnist_log_probs", config, training, dropout)
    drop = dropout if training and dropout is not None else (lambda t: t)
    p = _params(params)
    h = _float_input(x, p["fc1.w"]).flatten(1)
    h = drop(F.relu(F.linear(h, p["fc1.w"], p["fc1.b"])))
    h = drop(F.relu(F.linear(h, p["fc2.w"], p["fc2.b"])))
    return F.log_softmax(F.linear(h, p["fc3.w"], p["fc3.b"]), dim=-1)


def mlp_mnist_loss(params, batch, seed, config, training=True, dropout=None):
    """Mean negative log-likelihood of ``batch['y']``."""
    logp = mlp_mnist_log_probs(params, batch["x"], seed, config, training, dropout)
    return F.nll_loss(logp, torch.as_tensor(np.asarray(batch["y"])))


# ---------------------------------------------------------------------------
# gradients and training
# ---------------------------------------------------------------------------

def loss_and_grad(loss_fn, params_np, batch, dtype=torch.float64):
    """(loss, {name: gradient}) as float / numpy float64 arrays, evaluated in
    ``dtype`` from the numpy parameters; ``loss_fn(params, batch)``."""
    params = to_torch(params_np, dtype)
    loss = loss_fn(params, batch)
    loss.backward()
    grads = {k: v.grad.detach().to(torch.float64).numpy() for k, v in params.items()}
    return float(loss.detach()), grads


OPTIMIZERS = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW}
DEFAULT_WEIGHT_DECAY = {"adam": 0.0, "adamw": 0.01}  # as tilefuse.optim's defaults


def torch_train(loss_fn, params_np, batches, optimizer_name, lr, weight_decay, steps,
                autocast_dtype=None):
    """(losses, final numpy parameters): ``steps`` steps of torch.optim.Adam or
    AdamW (``optimizer_name`` "adam" / "adamw"; betas (0.9, 0.999), eps 1e-8,
    ``weight_decay`` None = the tilefuse.optim default: 0 for Adam, 0.01 for
    AdamW) from ``params_np`` (trained in their own dtype), on ``batches[t %
    len(batches)]`` at step t. ``loss_fn(params, batch)``, or
    ``loss_fn(params, batch, seed)`` with seed t at step t (as
    tilefuse.compile_train_step with seed=0). Each loss is the one computed
    before that step's update. With ``autocast_dtype`` (e.g. torch.bfloat16)
    the forward pass and the loss run under
    ``torch.autocast(device_type="cpu", dtype=autocast_dtype)``; parameters,
    gradients and optimizer state stay in the parameters' dtype."""
    name = optimizer_name.lower()
    if name not in OPTIMIZERS:
        raise ValueError(f"optimizer_name must be one of {sorted(OPTIMIZERS)}, got "
                         f"{optimizer_name!r}")
    if weight_decay is None:
        weight_decay = DEFAULT_WEIGHT_DECAY[name]
    params = to_torch(params_np)
    opt = OPTIMIZERS[name](list(params.values()), lr=lr, betas=(0.9, 0.999), eps=1e-8,
                           weight_decay=weight_decay)
    try:
        uses_seed = len(inspect.signature(loss_fn).parameters) >= 3
    except (TypeError, ValueError):
        uses_seed = False
    losses = []
    for t in range(steps):
        batch = batches[t % len(batches)]
        args = (params, batch) + ((np.int64(t),) if uses_seed else ())
        opt.zero_grad(set_to_none=True)
        if autocast_dtype is not None:
            with torch.autocast(device_type="cpu", dtype=autocast_dtype):
                loss = loss_fn(*args)
        else:
            loss = loss_fn(*args)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return losses, {k: v.detach().numpy().copy() for k, v in params.items()}


def torch_trajectory(loss_fn, params_np, batches, optimizer_name, lr, weight_decay, steps,
                     autocast_dtype=None):
    """The list of float losses of :func:`torch_train`."""
    return torch_train(loss_fn, params_np, batches, optimizer_name, lr, weight_decay, steps,
                       autocast_dtype)[0]
