"""Convolutions as graph.conv / graph.conv_grad_input (the transposed
convolution): PyTorch's F.conv1d/2d/3d and F.conv_transpose1d/2d/3d
semantics, on the library kernels (oneDNN on the CPU, cuDNN on CUDA),
differentiated by graph.conv's own rules.

`conv(...)` and `conv_transpose(...)` are also what the PyTorch importer
calls for aten.convolution; `library_conv(dtype)` says whether an operand
type goes to the graph ops (f32, bf16 and f16 compiled, f64 interpreted)
or is written out (im2col) by the caller.
"""
import os

from ._core import CompileError
from ._tracing import Tensor, _lift, _user_location


def library_conv(dtype):
    """Whether convolutions of `dtype` become graph.conv ops: every float
    type (the 16-bit ones are what PyTorch's autocast hands over; the
    libraries accumulate them in f32, as PyTorch does), unless
    TILEFUSE_LIBRARY_CONV=0 asks for every convolution written out."""
    return dtype in ("f32", "f64", "bf16", "f16") and \
        os.environ.get("TILEFUSE_LIBRARY_CONV") != "0"


def _ints(v, d, what):
    """An int or a sequence of 1 or d ints as d ints."""
    v = [int(v)] if isinstance(v, int) else [int(a) for a in v]
    if len(v) == 1:
        v = v * d
    if len(v) != d:
        raise CompileError(f"{what}: expects 1 or {d} values, got {len(v)}")
    return v


def _batched(x, d, what):
    if x.ndim == d + 1:
        return x.unsqueeze(0), True
    if x.ndim != d + 2:
        raise CompileError(f"{what}: expects an input [N, C, *S] or [C, *S] with {d} spatial "
                           f"dimensions, got {list(x.shape)}")
    return x, False


def _padding(padding, x, w, dilation, d, what):
    """(low, high) per spatial dimension: an int or ints (both sides),
    'valid' (none) or 'same' (the output keeps the input's size; stride 1;
    an odd total puts the extra element at the end, as PyTorch)."""
    if padding == "valid":
        return [0] * d, [0] * d
    if padding == "same":
        total = [dl * (k - 1) for dl, k in zip(dilation, w.shape[2:])]
        return [t // 2 for t in total], [t - t // 2 for t in total]
    if isinstance(padding, str):
        raise CompileError(f"{what}: padding must be 'valid', 'same' or ints, got {padding!r}")
    p = _ints(padding, d, what)
    if any(v < 0 for v in p):
        raise CompileError(f"{what}: padding must be >= 0, got {p}")
    return p, p


def _bias(y, bias, what):
    if bias is None:
        return y
    bias = _lift(y._tracer, bias, y)
    if tuple(bias.shape) != (y.shape[1],):
        raise CompileError(f"{what}: bias {list(bias.shape)} must be [{y.shape[1]}] (one per "
                           f"output channel)")
    return y + bias.reshape(y.shape[1], *([1] * (y.ndim - 2)))


def _operands(input, weight, d, what, weight_layout):
    """(input as [N, C, *S], weight, whether the input had no batch)."""
    if not isinstance(input, Tensor):
        raise CompileError(f"{what}: expects a traced tensor input, got {type(input).__name__}")
    w = _lift(input._tracer, weight, input)
    x, unbatched = _batched(input, d, what)
    if w.ndim != d + 2:
        raise CompileError(f"{what}: weight {list(w.shape)} must be [{weight_layout}, *kernel] "
                           f"with {d} kernel dimensions")
    if x.dtype != w.dtype:
        raise CompileError(f"{what}: input {x.dtype} and weight {w.dtype} differ; cast one")
    _user_location(x._tracer)
    return x, w, unbatched


def conv(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, d=2):
    what = f"conv{d}d"
    x, w, unbatched = _operands(input, weight, d, what, "out channels, in channels / groups")
    stride, dilation = _ints(stride, d, what), _ints(dilation, d, what)
    if padding == "same" and any(s != 1 for s in stride):
        raise CompileError(f"{what}: padding='same' needs stride 1 (as in PyTorch), got {stride}")
    low, high = _padding(padding, x, w, dilation, d, what)
    y = x._wrap(x._tracer.conv("conv", x._id, w._id, stride, low, high, dilation, int(groups)))
    y = _bias(y, bias, what)
    return y.squeeze(0) if unbatched else y


def conv_transpose(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1,
                   dilation=1, d=2):
    """PyTorch's transposed convolution: the input's gradient of the
    convolution with these attributes whose output is `input`; weight
    [in channels, out channels / groups, *kernel]."""
    what = f"conv_transpose{d}d"
    x, w, unbatched = _operands(input, weight, d, what, "in channels, out channels / groups")
    stride, dilation = _ints(stride, d, what), _ints(dilation, d, what)
    pad, extra = _ints(padding, d, what), _ints(output_padding, d, what)
    if any(e >= max(s, dl) or e < 0 for e, s, dl in zip(extra, stride, dilation)):
        raise CompileError(f"{what}: output_padding {extra} must be smaller than the stride "
                           f"{stride} or the dilation {dilation} (as in PyTorch)")
    size = [(s - 1) * st - 2 * p + dl * (k - 1) + e + 1
            for s, st, p, dl, k, e in zip(x.shape[2:], stride, pad, dilation, w.shape[2:], extra)]
    if any(s < 1 for s in size):
        raise CompileError(f"{what}: the output would have spatial size {size}")
    y = x._wrap(x._tracer.conv("grad_input", x._id, w._id, stride, pad, pad, dilation,
                               int(groups), size))
    y = _bias(y, bias, what)
    return y.squeeze(0) if unbatched else y
