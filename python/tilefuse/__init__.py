"""tilefuse: a graph compiler for deep-learning training steps.

    import tilefuse
    import tilefuse.functional as F

    g = tilefuse.trace(fn, *numpy_arrays)   # a Graph
    print(g.mlir())                         # graph-dialect IR
    out = g.interpret(*numpy_arrays)        # reference interpreter
    fn = tilefuse.compile(fn, *numpy_arrays, device="auto")   # fused kernels
    out = fn(*numpy_arrays)
    step = tilefuse.load("model.tfa")       # an ahead-of-time artifact

A runtime-only installation (built with TILEFUSE_RUNTIME_ONLY, no LLVM/MLIR)
has `tilefuse.load` and nothing that compiles; `HAVE_COMPILER` says which.
"""
from ._runtime import CompileError
from .runtime import LoadedFunction, LoadedTrainStep, load
from . import distributed  # data parallelism over torch.distributed (imported lazily)

try:
    from . import _core  # noqa: F401  (the compiler)
    HAVE_COMPILER = True
except ImportError:
    HAVE_COMPILER = False

__version__ = "0.1.0"

__all__ = ["CompileError", "HAVE_COMPILER", "LoadedFunction", "LoadedTrainStep", "distributed",
           "load"]

if HAVE_COMPILER:
    from ._dtypes import bfloat16, bool_, float16, float32, float64, int32, int64
    from ._tracing import Graph, Tensor, autocast, cat, checkpoint, parse, stack, trace, where
    from ._composites import (chunk, clamp, cumsum, detach, expm1, flip, floor_divide, fmod,
                              log1p, logsumexp, remainder, split, std, var)
    from .runtime import load_state_dict, save
    from ._core import clear_cache
    clip = clamp
    from . import functional, optim
    from .compiler import CompiledFunction, compile
    from .train import TrainStep, compile_train_step, train_step_graph
    from .torch_integration import explain, from_torch

    __all__ += [
        "CompiledFunction", "Graph", "compile", "Tensor", "TrainStep", "autocast", "cat",
        "checkpoint",
        "compile_train_step", "train_step_graph", "explain", "from_torch", "functional", "optim", "parse", "stack", "trace", "where",
        "float32", "float16", "bfloat16", "float64", "int32", "int64", "bool_",
        "chunk", "clamp", "clip", "cumsum", "detach", "expm1", "flip", "floor_divide", "fmod",
        "log1p", "logsumexp", "remainder", "split", "std", "var", "save", "load_state_dict", "clear_cache",
    ]
