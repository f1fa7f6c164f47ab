"""tilefuse: a graph compiler for deep-learning training steps.

    import tilefuse
    import tilefuse.functional as F

    g = tilefuse.trace(fn, *numpy_arrays)   # a Graph
    print(g.mlir())                         # graph-dialect IR
    out = g.interpret(*numpy_arrays)        # reference interpreter
    fn = tilefuse.compile(fn, *numpy_arrays, device="auto")   # fused kernels
    out = fn(*numpy_arrays)
"""
from ._core import CompileError
from ._dtypes import bfloat16, bool_, float16, float32, float64, int32, int64
from ._tracing import Graph, Tensor, cat, parse, stack, trace, where
from . import functional, optim
from .compiler import CompiledFunction, LoadedFunction, compile, load
from .train import TrainStep, compile_train_step

__version__ = "0.1.0"

__all__ = [
    "CompileError", "CompiledFunction", "Graph", "LoadedFunction", "compile", "load", "Tensor", "TrainStep", "cat", "compile_train_step", "functional",
    "optim", "parse", "stack", "trace",
    "where", "float32", "float16", "bfloat16", "float64", "int32", "int64", "bool_",
]
