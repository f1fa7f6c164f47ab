"""PyTorch-style functions on traced tensors (`import tilefuse.functional as F`).

Composite functions (softmax, layer_norm, losses, ...) become one composite
graph op each, so later passes can choose a hand-written rule for them.
Losses take class scores in the LAST dimension: logits [..., C], target [...].
"""
from ._core import CompileError
from ._tracing import Tensor, _lift, _user_location


def _tensor(x, what):
    if not isinstance(x, Tensor):
        raise CompileError(f"{what}: expects a traced tensor, got {type(x).__name__}")
    return x


def _apply(method, x, *args, what):
    x = _tensor(x, what)
    _user_location(x._tracer)
    return x._wrap(getattr(x._tracer, method)(*args))


def relu(x):
    return _apply("unary", x, "relu", _tensor(x, "relu")._id, what="relu")


def silu(x):
    return _apply("unary", x, "silu", _tensor(x, "silu")._id, what="silu")


def sigmoid(x):
    return _apply("unary", x, "sigmoid", _tensor(x, "sigmoid")._id, what="sigmoid")


def tanh(x):
    return _tensor(x, "tanh").tanh()


def gelu(x, approximate="none"):
    if approximate not in ("none", "tanh"):
        raise CompileError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    return _apply("gelu", x, _tensor(x, "gelu")._id, approximate, what="gelu")


def softmax(x, dim=-1):
    return _apply("softmax", x, _tensor(x, "softmax")._id, dim, what="softmax")


def log_softmax(x, dim=-1):
    return _apply("log_softmax", x, _tensor(x, "log_softmax")._id, dim, what="log_softmax")


def layer_norm(x, normalized_shape, weight, bias, eps=1e-5):
    """Normalises over the trailing `normalized_shape` dims; weight and bias
    are required and have that shape."""
    x = _tensor(x, "layer_norm")
    if isinstance(normalized_shape, int):
        normalized_shape = (normalized_shape,)
    if tuple(normalized_shape) != tuple(x.shape[len(x.shape) - len(normalized_shape):]):
        raise CompileError(
            f"layer_norm: normalized_shape {tuple(normalized_shape)} does not match the "
            f"trailing dimensions of the input {x.shape}"
        )
    w, b = _lift(x._tracer, weight, x), _lift(x._tracer, bias, x)
    return _apply("layer_norm", x, x._id, w._id, b._id, float(eps), what="layer_norm")


def linear(x, weight, bias=None):
    """x @ weight.T + bias, weight [out, in] (PyTorch layout)."""
    x = _tensor(x, "linear")
    w = _lift(x._tracer, weight, x)
    b = -1 if bias is None else _lift(x._tracer, bias, x)._id
    return _apply("linear", x, x._id, w._id, b, what="linear")


def embedding(ids, table):
    """Rows of `table` [V, D...] at integer `ids` [...] -> [..., D...]."""
    table = _tensor(table, "embedding")
    ids = _lift(table._tracer, ids)
    return _apply("gather", table, table._id, ids._id, what="embedding")


def dropout(x, p=0.5, training=True, seed=None):
    """Inverted dropout; the mask comes from graph.random_uniform(seed), a
    0-d int64 traced tensor, so it is reproducible on every target."""
    x = _tensor(x, "dropout")
    if not training or p == 0:
        return x
    if not 0 <= p < 1:
        raise CompileError(f"dropout: p must be in [0, 1), got {p}")
    if seed is None:
        raise CompileError(
            "dropout: training mode needs seed=, a 0-d int64 tensor argument of the traced "
            "function (e.g. np.int64(step)), so masks are reproducible"
        )
    seed = _lift(x._tracer, seed)
    return _apply("dropout", x, x._id, seed._id, float(p), what="dropout")


def cross_entropy(logits, target, ignore_index=-100):
    """Mean softmax cross-entropy; logits [..., C], integer target [...]."""
    x = _tensor(logits, "cross_entropy")
    t = _lift(x._tracer, target)
    return _apply("cross_entropy", x, x._id, t._id, int(ignore_index), what="cross_entropy")


def nll_loss(logp, target, ignore_index=-100):
    """Mean negative log-likelihood; log-probabilities [..., C], target [...]."""
    x = _tensor(logp, "nll_loss")
    t = _lift(x._tracer, target)
    return _apply("nll", x, x._id, t._id, int(ignore_index), what="nll_loss")


def mse_loss(input, target):
    x = _tensor(input, "mse_loss")
    t = _lift(x._tracer, target, x)
    return _apply("mse", x, x._id, t._id, what="mse_loss")


def binary_cross_entropy(input, target):
    """Mean BCE on probabilities, each log clamped at -100 (as PyTorch)."""
    x = _tensor(input, "binary_cross_entropy")
    t = _lift(x._tracer, target, x)
    return _apply("bce", x, x._id, t._id, what="binary_cross_entropy")
