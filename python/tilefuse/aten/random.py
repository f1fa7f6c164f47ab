"""Random numbers (Philox, from the graph's seed): PyTorch's distributions,
not its bits."""
import math

import numpy as np

from .. import _trig
from .._tracing import where
from . import _dtype_of, aten, converts, importer
from .attention import attention_with_dropout


def _standard_normal(shape, dtype):
    """Standard normal numbers by Box-Muller from two uniform streams (in
    f32: u1 in (0, 1], so the logarithm is finite)."""
    u1 = 1.0 - importer().uniform(shape, "f32")
    u2 = importer().uniform(shape, "f32")
    z = (-2.0 * u1.log()).sqrt() * _trig.cos(u2 * (2.0 * math.pi))
    return z.to(dtype)


@converts(aten.rand)
def _rand(size, dtype=None, layout=None, device=None, pin_memory=None, generator=None):
    return importer().uniform(tuple(size), _dtype_of(dtype))


@converts(aten.randn.default)
def _randn(size, dtype=None, layout=None, device=None, pin_memory=None, generator=None):
    return _standard_normal(tuple(size), _dtype_of(dtype))


@converts(aten.rand_like.default)
def _rand_like(x, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    return importer().uniform(x.shape, _dtype_of(dtype, x.dtype))


@converts(aten.randn_like.default)
def _randn_like(x, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    return _standard_normal(x.shape, _dtype_of(dtype, x.dtype))


@converts(aten.uniform.default)
def _uniform(x, low=0.0, high=1.0, generator=None):
    """U[low, high) of x's shape and dtype (x's values are not read)."""
    return (importer().uniform(x.shape, "f32") * (high - low) + low).to(x.dtype)


@converts(aten.bernoulli.p, aten.bernoulli_.float)
def _bernoulli(x, p=0.5, generator=None):
    return (importer().uniform(x.shape, "f32") < p).to(x.dtype)


@converts(aten.native_dropout)
def _native_dropout(x, p, train):
    if not train or p == 0:
        return x, importer().constant(np.ones(x.shape, bool), "i1")
    if p >= 1:  # everything dropped
        return x * 0, importer().constant(np.zeros(x.shape, bool), "i1")
    keep = importer().uniform(x.shape, "f32") >= p
    return where(keep, x * (1.0 / (1.0 - p)), 0.0).to(x.dtype), keep


RANDOM_OPS = (aten.rand.default, aten.randn.default, aten.rand_like.default, aten.uniform.default,
              aten.randn_like.default, aten.bernoulli.p, aten.bernoulli_.float,
              aten.native_dropout.default, attention_with_dropout._opoverload)


def uses_random(gm):
    """Whether graph `gm` draws random numbers (then it needs a seed)."""
    return any(n.op == "call_function" and n.target in RANDOM_OPS for n in gm.graph.nodes)
