"""Where traced ops come from, and how errors name them: the user's file
and line (or a location set by code that traces on a user's behalf), the
autocast policy in force, and the texts of errors about traced tensors."""
import collections
import os
import sys
import threading

from ._core import CompileError

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def _user_frame():
    """The innermost stack frame outside this package (the user's code)."""
    frame = sys._getframe(1)
    while frame is not None and os.path.dirname(
        os.path.abspath(frame.f_code.co_filename)
    ).startswith(_PACKAGE_DIR):
        frame = frame.f_back
    return frame


# Depth of open `tilefuse.autocast(False)` regions (per thread: traces are
# per thread).
_AUTOCAST = threading.local()


def _autocast_enabled():
    return getattr(_AUTOCAST, "off", 0) == 0


class autocast:
    """`with tilefuse.autocast(False):` keeps the ops traced inside in f32
    when the graph is compiled with a low precision (`precision="bf16"`),
    as `torch.autocast(enabled=False)`. `autocast(True)` inside such a
    region turns the policy back on for its own ops."""

    def __init__(self, enabled=True):
        self.enabled = bool(enabled)

    def __enter__(self):
        self._saved = getattr(_AUTOCAST, "off", 0)
        _AUTOCAST.off = 0 if self.enabled else self._saved + 1
        return self

    def __exit__(self, *exc):
        _AUTOCAST.off = self._saved
        return False


# The user's line that made each traced value, per open trace ({id(tracer):
# {value id: "file:line"}}), so errors found after tracing (a loss that is
# not 0-d) can name the line that computed the value.
_ORIGINS = {}
_LAST_LINE = threading.local()


class source_location:
    """`with source_location(file, line):` tags the ops traced inside with
    that file and line instead of the caller's frame: code that traces on a
    user's behalf (the PyTorch importer running an FX graph) names the
    user's line it found (the FX node's stack trace) rather than its own."""

    def __init__(self, filename, line):
        self.where = (filename, int(line)) if filename else None

    def __enter__(self):
        self._saved = getattr(_LOCATION, "where", None)
        _LOCATION.where = self.where
        return self

    def __exit__(self, *exc):
        _LOCATION.where = self._saved
        return False


_LOCATION = threading.local()


def _user_location(tracer):
    """Tags the next ops with the user's file and line (and whether
    autocast applies to them)."""
    tracer.set_autocast(_autocast_enabled())
    where = getattr(_LOCATION, "where", None)
    if where is not None:
        tracer.set_location(*where)
        _LAST_LINE.text = f"{where[0]}:{where[1]}"
        return
    frame = _user_frame()
    if frame is None:
        tracer.clear_location()
        _LAST_LINE.text = None
    else:
        tracer.set_location(frame.f_code.co_filename, frame.f_lineno)
        _LAST_LINE.text = f"{frame.f_code.co_filename}:{frame.f_lineno}"


def _where():
    """' (at file:line)' of the user's frame, for errors raised in Python."""
    frame = _user_frame()
    return "" if frame is None else f" (at {frame.f_code.co_filename}:{frame.f_lineno})"


def _return_type(name):
    """A `(values, indices)` namedtuple like `torch.return_types.<name>`."""
    def __array__(self, dtype=None, copy=None):
        raise CompileError(_pair_misuse(name))

    base = collections.namedtuple(name, ["values", "indices"])
    return type(name, (base,), {"__slots__": (), "__array__": __array__,
                                "__module__": "tilefuse.return_types"})


def _pair_misuse(name):
    return (f"x.{name}(dim) returns a (values, indices) pair, as in PyTorch, not a tensor; "
            f"use x.{name}(dim).values (or [0]) for the values, or x.a{name}(dim)"
            f"{_where()}")


_RETURN_TYPES = {"max": _return_type("max"), "min": _return_type("min")}


def _type_text(t):
    """`tensor<3x4xf32>`, as the tracer's own messages write types."""
    return "tensor<" + "".join(f"{s}x" for s in t.shape) + f"{t.dtype}>"


def _no_value(what, t):
    return (f"{what} of a traced {_type_text(t)}: a traced tensor has no value while tracing "
            f"(the graph is built once, for every input), so it cannot become a Python "
            f"number. Keep the computation in tensors (tilefuse.where instead of an `if` on "
            f"the value; a 0-d tensor broadcasts like a number), or return the tensor from "
            f"the traced function and read its value from the result{_where()}")
