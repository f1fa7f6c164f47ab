"""PyTorch twins of the graphs tilefuse is benchmarked on, for the GPU harness.

On the GPU machine the tilefuse package is a runtime-only build
(``tilefuse.load`` and nothing that compiles), so ``tilefuse.workloads`` --
which needs the compiler -- cannot be imported there; its numpy half,
``tilefuse.workload_data``, can:

* ``gpt2_config``, ``gpt2_small_config``, ``gpt2_init_numpy``,
  ``gpt2_batch_numpy``: ``gpt2_mini_config/init/batch`` of
  tilefuse.workload_data (GPT-2 small: the GPU sizes without dropout), so
  both sides start from bit-identical parameters and batches;
* ``gpt2_loss_torch``, ``make_torch_train_step``: the same model and the
  same AdamW as the tilefuse training step, in PyTorch;
* ``KERNELS``: the five graphs of bench/kernel_bench.cpp, same argument
  order, same results, same sizes, same byte accounting.

The numpy functions work without torch; every function that needs torch
says so with an ImportError naming it.
"""
import math

import numpy as np

from tilefuse.workload_data import gpt2_mini_batch, gpt2_mini_config, gpt2_mini_init

try:
    import torch
    import torch.nn.functional as F
    _TORCH_IMPORT_ERROR = None
except ImportError as e:  # the numpy half stays usable
    torch = F = None
    _TORCH_IMPORT_ERROR = e


def _require_torch(what):
    if torch is None:
        raise ImportError(f"{what} needs PyTorch, which is not importable here "
                          f"({_TORCH_IMPORT_ERROR}); the numpy functions of this module "
                          "work without it")


# ---------------------------------------------------------------------------
# GPT-2: configuration, initialisation and batches (numpy, exact copies)
# ---------------------------------------------------------------------------

# The one definition of GPT-2's sizes, parameters and batches.
gpt2_config = gpt2_mini_config
gpt2_init_numpy = gpt2_mini_init
gpt2_batch_numpy = gpt2_mini_batch


def gpt2_small_config(**overrides):
    """GPT-2 small (124M parameters) at the GPU batch size, without dropout
    so that PyTorch and tilefuse compute the same function."""
    sizes = dict(n_layer=12, d_model=768, n_head=12, seq=1024, vocab=50257, batch=8,
                 dropout=0.0, layer_norm_eps=1e-5)
    sizes.update(overrides)
    return gpt2_config(**sizes)


# ---------------------------------------------------------------------------
# GPT-2: the model and its training step (torch)
# ---------------------------------------------------------------------------

def _attention(x, params, prefix, config):
    """workloads._causal_self_attention without dropout: explicit matmul,
    scale, where-mask and softmax (no fused SDPA, so both sides do the same
    arithmetic)."""
    B, T, d = x.shape
    H = config["n_head"]
    hd = d // H
    qkv = F.linear(x, params[prefix + "qkv.w"], params[prefix + "qkv.b"])  # [B, T, 3d]

    def heads(t):  # [B, T, d] -> [B, H, T, hd]
        return t.reshape(B, T, H, hd).permute(0, 2, 1, 3)

    q, k, v = heads(qkv[..., :d]), heads(qkv[..., d:2 * d]), heads(qkv[..., 2 * d:])
    scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))  # [B, H, T, T]
    causal = torch.tril(torch.ones((T, T), dtype=torch.bool, device=x.device))
    scores = torch.where(causal, scores, -1e9)
    probs = torch.softmax(scores, dim=-1)
    y = (probs @ v).permute(0, 2, 1, 3).reshape(B, T, d)  # merge heads
    return F.linear(y, params[prefix + "proj.w"], params[prefix + "proj.b"])


def _mlp(x, params, prefix):
    h = F.linear(x, params[prefix + "fc.w"], params[prefix + "fc.b"])
    h = F.gelu(h, approximate="tanh")
    return F.linear(h, params[prefix + "proj.w"], params[prefix + "proj.b"])


def gpt2_loss_torch(params, tokens, config):
    """workloads.gpt2_mini_loss in PyTorch: mean cross-entropy of
    logits[:, t] against tokens[:, t + 1].

    ``params``: name -> float32 tensor (names of gpt2_init_numpy); ``tokens``:
    int64 [B, seq + 1] on the same device. Dropout must be 0: tilefuse draws
    its masks with Philox in its kernels and torch cannot reproduce them, so
    the two sides are only comparable without dropout.
    """
    _require_torch("gpt2_loss_torch")
    if config["dropout"] != 0:
        raise ValueError(f"gpt2_loss_torch: dropout must be 0 (got {config['dropout']}): "
                         "torch cannot reproduce tilefuse's Philox dropout masks")
    eps, d = config["layer_norm_eps"], config["d_model"]
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    T = inputs.shape[-1]
    x = F.embedding(inputs, params["wte"]) + params["wpe"][:T]
    for i in range(config["n_layer"]):
        h = f"h{i}."
        a = F.layer_norm(x, (d,), params[h + "ln1.w"], params[h + "ln1.b"], eps)
        x = x + _attention(a, params, h + "attn.", config)
        m = F.layer_norm(x, (d,), params[h + "ln2.w"], params[h + "ln2.b"], eps)
        x = x + _mlp(m, params, h + "mlp.")
    x = F.layer_norm(x, (d,), params["lnf.w"], params["lnf.b"], eps)
    logits = F.linear(x, params["wte"])  # tied LM head, no bias
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def make_torch_train_step(params_numpy, config, lr, weight_decay=0.01, compile=False,
                          device="cuda"):
    """A PyTorch training step equal to tilefuse's AdamW step.

    Returns ``(step_fn, params_torch)``: ``params_torch`` maps each name to a
    float32 leaf tensor on ``device`` (a copy of ``params_numpy``), and
    ``step_fn(tokens)`` runs zero_grad, the loss, backward and the optimizer
    step, returning the loss (computed before the update) as a device tensor
    without synchronising the host.

    The optimizer is torch.optim.AdamW with tilefuse.optim.AdamW's defaults:
    betas (0.9, 0.999), eps 1e-8, decoupled decay p *= 1 - lr * weight_decay
    applied to every parameter (biases and LayerNorm too, as in tilefuse),
    bias corrections 1 - beta^t with t counted from 1. What cannot match
    bit for bit (rounding only): torch computes the bias corrections and
    lr * weight_decay in double on the host and divides by
    sqrt(v) / sqrt(1 - beta2^t), tilefuse divides v by (1 - beta2^t) on the
    device in float32 before the square root. torch uses its default
    multi-tensor ("foreach") implementation on CUDA.

    ``compile=True`` wraps the loss (forward and, through AOTAutograd,
    backward) in torch.compile with the default mode; the optimizer step
    stays eager. The first call compiles.
    """
    _require_torch("make_torch_train_step")
    params = {name: torch.tensor(np.asarray(value, dtype=np.float32), device=device,
                                 requires_grad=True)
              for name, value in sorted(params_numpy.items())}
    opt = torch.optim.AdamW(list(params.values()), lr=lr, betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=weight_decay)
    loss_fn = torch.compile(gpt2_loss_torch) if compile else gpt2_loss_torch

    def step_fn(tokens):
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(params, tokens, config)
        loss.backward()
        opt.step()
        return loss.detach()

    return step_fn, params


# ---------------------------------------------------------------------------
# The kernel benchmarks of bench/kernel_bench.cpp
# ---------------------------------------------------------------------------

def pointwise_chain(x, y):
    """@chain: sqrt(|(x * y + x) * 0.5 - y| + 1) * y, op for op."""
    t = x * y
    t = t + x
    t = t * 0.5
    t = t - y
    t = torch.abs(t)
    t = t + 1.0
    t = torch.sqrt(t)
    return t * y


def softmax(x):
    """@softmax: softmax over dim 1 (rows of 1024)."""
    return torch.softmax(x, dim=1)


def _ln_loss(x, g, b, w):
    # layer_norm over the trailing dimension that g and b have, eps 1e-5
    # (graph.layer_norm's default), biased variance.
    y = F.layer_norm(x, (x.shape[-1],), g, b, 1e-5)
    return (y * w).sum()


def layer_norm_fwd_bwd(x, g, b, w):
    """@ln after valueAndGrad({0, 1, 2}): arguments (x, gamma, beta, w),
    results (loss, dloss/dx, dloss/dgamma, dloss/dbeta) with
    loss = sum(layer_norm(x, gamma, beta) * w). Gradients by autograd
    (torch.func.grad_and_value, which torch.compile traces); ``w`` is a
    weighting input, not differentiated, as in the graph."""
    (dx, dg, db), loss = torch.func.grad_and_value(_ln_loss, argnums=(0, 1, 2))(x, g, b, w)
    return loss, dx, dg, db


def _ce_loss(x, y):
    return F.cross_entropy(x, y)  # mean, ignore_index -100 (graph.cross_entropy's default)


def cross_entropy_fwd_bwd(x, y):
    """@ce after valueAndGrad({0}): (mean cross-entropy, dloss/dlogits), by
    autograd (torch.func.grad_and_value)."""
    dx, loss = torch.func.grad_and_value(_ce_loss, argnums=0)(x, y)
    return loss, dx


def adamw_update(p, g, m, v, bc1, bc2, lr):
    """@adamw, op for op: the bias corrections and lr are 0-d float32
    inputs; results (p', m', v')."""
    mn = m * 0.9 + g * 0.1
    vn = v * 0.999 + (g * g) * 0.001
    mh = mn / bc1
    vh = vn / bc2
    den = torch.sqrt(vh) + 1e-8
    upd = mh / den
    tot = upd + p * 0.01
    pn = p - tot * lr
    return pn, mn, vn


def _uniform_inputs(specs, device, seed):
    """Tensors for kernel_bench.cpp's randomArguments rule: floats uniform in
    [0.1, 1), integers in [0, 7) (class ids below every vocabulary). Drawn on
    the device (gigabytes); the values differ from the C++ generator's, the
    distribution is the same."""
    _require_torch("make_inputs")
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    out = []
    for dtype, shape in specs:
        if dtype.is_floating_point:
            t = torch.rand(shape, generator=gen, device=device, dtype=dtype)
            out.append(t.mul_(0.9).add_(0.1))
        else:
            out.append(torch.randint(0, 7, shape, generator=gen, device=device, dtype=dtype))
    return tuple(out)


def _nbytes(specs):
    return sum(int(np.prod(shape, dtype=np.int64)) * size for size, shape in specs)


# (element size, shape) of every argument and result, as in kernel_bench.cpp.
_PW = (8192, 16384)
_SM = (131072, 1024)
_LN, _LNV = (65536, 1024), (1024,)
_CE = (4096, 32768)
_AW = (33554432,)

_SHAPES = {
    "pointwise_chain": dict(args=[(4, _PW), (4, _PW)], results=[(4, _PW)]),
    "softmax": dict(args=[(4, _SM)], results=[(4, _SM)]),
    "layer_norm_fwd_bwd": dict(args=[(4, _LN), (4, _LNV), (4, _LNV), (4, _LN)],
                               results=[(4, ()), (4, _LN), (4, _LNV), (4, _LNV)]),
    "cross_entropy_fwd_bwd": dict(args=[(4, _CE), (8, (4096,))], results=[(4, ()), (4, _CE)]),
    "adamw_update": dict(args=[(4, _AW)] * 4 + [(4, ())] * 3, results=[(4, _AW)] * 3),
}


def _bytes_moved(name):
    """kernel_bench.cpp's runGraph accounting: bytes of all arguments plus
    bytes of all results, per call."""
    s = _SHAPES[name]
    return _nbytes(s["args"]) + _nbytes(s["results"])


def _make_inputs_for(name):
    def make_inputs(device, seed=0):
        dtypes = {4: torch.float32, 8: torch.int64}
        specs = [(dtypes[size], shape) for size, shape in _SHAPES[name]["args"]]
        return _uniform_inputs(specs, device, seed)
    make_inputs.__doc__ = f"The arguments of kernel_bench.cpp's {name} graph."
    return make_inputs


KERNELS = {
    name: (fn, _make_inputs_for(name), _bytes_moved(name))
    for name, fn in [("pointwise_chain", pointwise_chain), ("softmax", softmax),
                     ("layer_norm_fwd_bwd", layer_norm_fwd_bwd),
                     ("cross_entropy_fwd_bwd", cross_entropy_fwd_bwd),
                     ("adamw_update", adamw_update)]
}
"""name -> (torch function, make_inputs(device, seed) -> tuple of tensors,
bytes moved per call), for every graph of bench/kernel_bench.cpp."""
