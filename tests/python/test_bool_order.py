"""Booleans order false < true in compiled code as in the interpreter and
PyTorch: i1's signed reading of true is -1, so compiled comparisons of
booleans must use the unsigned order (they made True < False true). Checked exactly, on the CPU and under the CUDA
emulation where it is available."""
import numpy as np
import pytest

import tilefuse

from cuda_emulation import check_emulated, unavailable_reason

_OPS = ("lt", "le", "gt", "ge", "eq", "ne")


def _graph(op):
    return tilefuse.parse(f"""
func.func @main(%a: tensor<4xi1>, %b: tensor<4xi1>) -> tensor<4xi1> {{
  %0 = graph.{op} %a, %b : tensor<4xi1>
  return %0 : tensor<4xi1>
}}""")


A = np.array([False, False, True, True])
B = np.array([False, True, False, True])
WANT = {"lt": A < B, "le": A <= B, "gt": A > B, "ge": A >= B, "eq": A == B, "ne": A != B}


@pytest.mark.parametrize("op", _OPS)
def test_boolean_order_on_the_cpu(op):
    g = _graph(op)
    np.testing.assert_array_equal(g.interpret(A, B), WANT[op], err_msg=f"{op} interpreted")
    np.testing.assert_array_equal(g.compile("cpu")(A, B), WANT[op], err_msg=f"{op} compiled")


@pytest.mark.skipif(unavailable_reason() is not None, reason=str(unavailable_reason()))
@pytest.mark.parametrize("op", ["lt", "ge"])
def test_boolean_order_in_emulated_cuda(op, tmp_path):
    check_emulated(_graph(op), (A, B), str(tmp_path), rtol=0, atol=0, name=op)
