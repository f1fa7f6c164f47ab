"""ATen FX graphs -> tilefuse graphs: the PyTorch importer's public module.

The importer lives in the `tilefuse.aten` package: its `__init__` holds the
registry (`CONVERSIONS`, `converts`, `UnsupportedOp`) and the interpreter
that runs an FX graph on traced tensors (`run_fx`); one module per op family
fills the table (pointwise, creation, random, views, reductions, linalg, nn,
attention). This module keeps the names the rest of tilefuse and its users
import.
"""
from .aten import (  # noqa: F401
    CONVERSIONS,
    IN_PLACE,
    RANDOM_OPS,
    UnsupportedOp,
    _conversion,
    _Importer,
    converts,
    importer,
    is_constant,
    is_supported,
    run_fx,
    torch_dtype_name,
    uses_random,
)
from .aten.nn import _embedding  # noqa: F401
