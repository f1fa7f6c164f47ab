"""The numerics contract of mixed precision: every kernel against f32.

`numerics_report(graph, args)` compiles the graph twice from the same fused
kernels (tilefuse fuses once, then rewrites, so the kernels are the ones the
real program runs):

- the f32 shadow: every f16/bf16 value computed in f32 instead;
- the isolated program: the real mixed-precision kernels, each reading its
  inputs from the shadow's values (rounded to the dtype the kernel reads).

So each kernel's error is its own, not what it inherited from the kernels
before it. Per kernel output: the error, max|out - f32| / max|f32| (the
largest error relative to the largest magnitude of the output, so that
entries near zero do not dominate), and the bound the policy promises:

    bound = u * (4 + sqrt(K))      (tilefuse's numericsBound, in C++)

with u the unit roundoff of the lowest precision the kernel touches (bf16
2^-8, f16 2^-11, f32 2^-24) and K the longest sum behind one element (the
contraction of a matmul, the reduced extent of a reduction; 1 otherwise).
4u covers rounding the inputs and the output (each <= u) and the few f32
operations between; sqrt(K) u covers the inputs' roundings adding up in a
sum of K terms, as they do for random signs. A kernel over its bound is
flagged with its source line.
"""
import numpy as np


class NumericsReport:
    """One row per kernel output (in program order), a dict: kernel, output
    (which result of the kernel), ops, location, dtype, lowest (the lowest
    precision the kernel touches), reduction_length, error, bound, over
    (error > bound). `print(report)` shows the table; `report.over` lists
    the rows over their bound; `report.ok` is True when there are none."""

    def __init__(self, rows, text):
        self.rows = rows
        self._text = text

    @property
    def over(self):
        return [r for r in self.rows if r["over"]]

    @property
    def ok(self):
        return not self.over

    def __len__(self):
        return len(self.rows)

    def __str__(self):
        return self._text

    __repr__ = __str__


def numerics_report(core_graph, args, device="cpu"):
    """The per-kernel report of `core_graph` (a tilefuse._core Graph) on
    `args` (its arguments, flat, as numpy arrays)."""
    rows, text = core_graph.numerics_report([np.asarray(a) for a in args], device)
    return NumericsReport(rows, text)
