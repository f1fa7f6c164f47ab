"""dtype names shared by the tracer and the user API."""
import numpy as np

from ._core import CompileError

float32, float16, bfloat16, float64 = "f32", "f16", "bf16", "f64"
int32, int64, bool_ = "i32", "i64", "i1"

_ALIASES = {
    "f32": "f32", "float32": "f32", "float": "f32",
    "f16": "f16", "float16": "f16", "half": "f16",
    "bf16": "bf16", "bfloat16": "bf16",
    "f64": "f64", "float64": "f64", "double": "f64",
    "i32": "i32", "int32": "i32",
    "i64": "i64", "int64": "i64", "long": "i64",
    "i1": "i1", "bool": "i1",
}

_NUMPY = {"f32": np.float32, "f16": np.float16, "bf16": np.float32,
          "f64": np.float64, "i32": np.int32, "i64": np.int64, "i1": np.bool_}


def dtype_name(dtype):
    """Normalises a dtype given as a tilefuse name, a numpy dtype or a Python type."""
    if dtype is float:
        return "f32"
    if dtype is int:
        return "i64"
    if dtype is bool:
        return "i1"
    key = dtype if isinstance(dtype, str) else None
    if key is None:
        try:
            key = np.dtype(dtype).name
        except TypeError:
            key = str(dtype)
    if key not in _ALIASES:
        raise CompileError(
            f"unsupported dtype {dtype!r}; tilefuse supports f32, f16, bf16, f64, i32, i64 and bool"
        )
    return _ALIASES[key]


def numpy_dtype(name):
    """numpy dtype holding values of tilefuse dtype `name` (bf16 -> float32)."""
    return _NUMPY[dtype_name(name)]


def is_float(name):
    return dtype_name(name) in ("f32", "f16", "bf16", "f64")
