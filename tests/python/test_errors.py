"""Bad input raises tilefuse.CompileError with a message that names the op
and the shapes involved, and (for mistakes found while tracing) the user's
file:line. Nothing here may crash the interpreter process."""
import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tilefuse
import tilefuse.functional as F
from compile_errors import raises_compile_error

THIS_FILE = os.path.basename(__file__)

X34 = np.zeros((3, 4), np.float32)
X5 = np.zeros((5,), np.float32)
W52 = np.zeros((5, 2), np.float32)
V4 = np.ones((4,), np.float32)




def test_compile_error_is_a_value_error():
    assert issubclass(tilefuse.CompileError, ValueError)


# ---------------------------------------------------------------------------
# Shape errors while tracing
# ---------------------------------------------------------------------------
def test_add_shape_mismatch():
    raises_compile_error(lambda: tilefuse.trace(lambda a, b: a + b, X34, X5),
                         "add", "[3, 4]", "[5]", "broadcast")


@pytest.mark.parametrize("op", ["sub", "mul", "div", "maximum", "lt"])
def test_other_binary_shape_mismatch(op):
    fns = {"sub": lambda a, b: a - b, "mul": lambda a, b: a * b, "div": lambda a, b: a / b,
           "maximum": lambda a, b: a.maximum(b), "lt": lambda a, b: a < b}
    raises_compile_error(lambda: tilefuse.trace(fns[op], X34, X5), op, "[3, 4]", "[5]")


def test_where_shape_mismatch():
    raises_compile_error(
        lambda: tilefuse.trace(lambda a, b: tilefuse.where(a > 0, a, b), X34, X5),
        "where", "[3, 4]", "[5]")


def test_where_condition_must_be_bool():
    raises_compile_error(lambda: tilefuse.trace(lambda a: tilefuse.where(a, a, a), X34),
                         "where", "condition", "f32")


@pytest.mark.parametrize("shapes", [((3, 4), (5, 2)), ((2, 3, 4), (5, 4)), ((4,), (5,)),
                                    ((3, 4), (5,))],
                         ids=lambda s: f"{s[0]}@{s[1]}")
def test_matmul_contraction_mismatch(shapes):
    sa, sb = shapes
    a, b = np.zeros(sa, np.float32), np.zeros(sb, np.float32)
    raises_compile_error(lambda: tilefuse.trace(lambda x, y: x @ y, a, b),
                         "matmul", str(list(sa)), str(list(sb)), "contraction")


def test_matmul_batch_mismatch():
    a, b = np.zeros((2, 3, 4), np.float32), np.zeros((3, 4, 5), np.float32)
    raises_compile_error(lambda: tilefuse.trace(lambda x, y: x @ y, a, b),
                         "matmul", "[2]", "[3]")


def test_matmul_batch_mismatch_names_operand_shapes():
    a, b = np.zeros((2, 3, 4), np.float32), np.zeros((3, 4, 5), np.float32)
    raises_compile_error(lambda: tilefuse.trace(lambda x, y: x @ y, a, b),
                         "matmul", "[2, 3, 4]", "[3, 4, 5]")


def test_matmul_integer_operands():
    a = np.zeros((2, 3), np.int64)
    raises_compile_error(lambda: tilefuse.trace(lambda x, y: x @ y, a, a.T.copy()),
                         "matmul", "i64[2, 3]", "i64[3, 2]")


def test_reshape_element_count():
    raises_compile_error(lambda: tilefuse.trace(lambda a: a.reshape(5, 3), X34),
                         "reshape", "3x4", "5x3")


def test_expand_incompatible():
    raises_compile_error(lambda: tilefuse.trace(lambda a: a.expand(5, 4), X34),
                         "[3, 4]", "[5, 4]")


def test_cat_mismatch():
    raises_compile_error(lambda: tilefuse.trace(lambda a: tilefuse.cat([a, a.T], 0), X34),
                         "concat", "3x4", "4x3")


def test_index_out_of_range():
    raises_compile_error(lambda: tilefuse.trace(lambda a: a[3], X34), "index 3", "size 3")


def test_negative_slice_step():
    raises_compile_error(lambda: tilefuse.trace(lambda a: a[::-1], X34), "step")


# ---------------------------------------------------------------------------
# Unsupported dtypes
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.uint8, np.complex64, np.int8, np.uint32],
                         ids=lambda d: np.dtype(d).name)
def test_unsupported_argument_dtype(dtype):
    raises_compile_error(lambda: tilefuse.trace(lambda a: a + 1, np.zeros(3, dtype)),
                         np.dtype(dtype).name, "f32")


def test_unsupported_constant_dtype():
    c = np.zeros(4, np.uint8)
    raises_compile_error(lambda: tilefuse.trace(lambda a: a + c, X34), "uint8")


def test_unsupported_dtype_name_in_to():
    raises_compile_error(lambda: tilefuse.trace(lambda a: a.to("complex64"), X34), "complex64")


def test_non_array_argument():
    raises_compile_error(lambda: tilefuse.trace(lambda a: a, None), "argument 0", "NoneType")


def test_non_tensor_result():
    raises_compile_error(lambda: tilefuse.trace(lambda a: 3, X34), "int", "tensors")


# ---------------------------------------------------------------------------
# Graph.interpret argument checks
# ---------------------------------------------------------------------------
@pytest.fixture
def two_arg_graph():
    return tilefuse.trace(lambda a, b: a + b, X34, V4)


def test_interpret_wrong_argument_count(two_arg_graph):
    raises_compile_error(lambda: two_arg_graph.interpret(X34), "takes 2 arguments", "got 1")
    raises_compile_error(lambda: two_arg_graph.interpret(X34, V4, V4),
                         "takes 2 arguments", "got 3")


def test_interpret_wrong_shape(two_arg_graph):
    raises_compile_error(lambda: two_arg_graph.interpret(X34, X5),
                         "argument 1", "f32[4]", "[5]")
    raises_compile_error(lambda: two_arg_graph.interpret(X34.T.copy(), V4),
                         "argument 0", "f32[3, 4]", "[4, 3]")


def test_interpret_wrong_dtype(two_arg_graph):
    raises_compile_error(lambda: two_arg_graph.interpret(X34.astype(np.float64), V4),
                         "argument 0", "f32[3, 4]", "float64")
    raises_compile_error(lambda: two_arg_graph.interpret(X34, V4.astype(np.int64)),
                         "argument 1", "f32[4]", "int64")


def test_interpret_unsupported_dtype(two_arg_graph):
    raises_compile_error(lambda: two_arg_graph.interpret(X34.astype(np.uint8), V4), "uint8")


def test_interpret_nested_structure_mismatch():
    g = tilefuse.trace(lambda d: d["a"] * d["b"], {"a": X34, "b": V4})
    raises_compile_error(lambda: g.interpret({"a": X34}), "takes 2 arguments", "got 1")


# ---------------------------------------------------------------------------
# Composite ops
# ---------------------------------------------------------------------------
def test_layer_norm_weight_bias_mismatch():
    w3 = np.ones(3, np.float32)
    raises_compile_error(
        lambda: tilefuse.trace(lambda a, w, b: F.layer_norm(a, 4, w, b), X34, w3, V4),
        "layer_norm", "tensor<3xf32>", "tensor<4xf32>")


def test_layer_norm_weight_does_not_match_input():
    w5 = np.ones(5, np.float32)
    raises_compile_error(
        lambda: tilefuse.trace(lambda a, w, b: F.layer_norm(a, 4, w, b), X34, w5, w5),
        "layer_norm", "tensor<5xf32>", "3x4")


def test_layer_norm_normalized_shape_mismatch():
    w5 = np.ones(5, np.float32)
    raises_compile_error(
        lambda: tilefuse.trace(lambda a, w, b: F.layer_norm(a, 5, w, b), X34, w5, w5),
        "layer_norm", "(5,)", "(3, 4)")


def test_linear_weight_mismatch():
    raises_compile_error(lambda: tilefuse.trace(lambda a, w: F.linear(a, w), X34, W52),
                         "linear", "3x4", "5x2")


@pytest.mark.parametrize("tshape", [(4,), (3, 4), (2,)], ids=lambda s: str(list(s)))
@pytest.mark.parametrize("fn,name", [(F.cross_entropy, "cross_entropy"), (F.nll_loss, "nll")])
def test_class_loss_target_shape_mismatch(fn, name, tshape):
    target = np.zeros(tshape, np.int64)
    shape_text = "x".join(map(str, tshape)) + "xi64"
    raises_compile_error(lambda: tilefuse.trace(lambda a, t: fn(a, t), X34, target),
                         name, "3x4xf32", shape_text)


def test_cross_entropy_float_target():
    raises_compile_error(
        lambda: tilefuse.trace(lambda a, t: F.cross_entropy(a, t), X34, np.zeros(3, np.float32)),
        "cross_entropy", "tensor<3xf32>")


@pytest.mark.parametrize("fn,name", [(F.mse_loss, "mse_loss"),
                                     (F.binary_cross_entropy, "binary_cross_entropy")])
def test_pair_loss_shape_mismatch(fn, name):
    raises_compile_error(lambda: tilefuse.trace(lambda a, b: fn(a, b), X34, V4),
                         name, "3x4", "tensor<4xf32>")


def test_embedding_float_ids():
    raises_compile_error(
        lambda: tilefuse.trace(lambda t, i: F.embedding(i, t), X34, np.zeros(2, np.float32)),
        "gather", "tensor<2xf32>")


def test_gelu_bad_approximate():
    raises_compile_error(lambda: tilefuse.trace(lambda a: F.gelu(a, approximate="fast"), X34),
                         "gelu", "fast")


# ---------------------------------------------------------------------------
# Python control flow, dropout seeds
# ---------------------------------------------------------------------------
def test_bool_of_traced_tensor():
    def fn(a):
        if a.sum() > 0:
            return a
        return -a

    raises_compile_error(lambda: tilefuse.trace(fn, X34), "truth value", "tilefuse.where")


def test_bool_via_and_or():
    raises_compile_error(lambda: tilefuse.trace(lambda a: (a > 0) and (a < 1), X34),
                         "truth value")


def test_dropout_without_seed():
    raises_compile_error(lambda: tilefuse.trace(lambda a: F.dropout(a, 0.5), X34),
                         "dropout", "seed")


@pytest.mark.parametrize("seed", [np.zeros(2, np.int64), np.float32(1.0), np.int32(1)],
                         ids=["i64[2]", "f32", "i32"])
def test_dropout_bad_seed(seed):
    raises_compile_error(lambda: tilefuse.trace(lambda a, s: F.dropout(a, 0.5, seed=s), X34, seed),
                         "dropout", "seed")


@pytest.mark.parametrize("p", [1.0, -0.1, 1.5])
def test_dropout_bad_p(p):
    s = np.int64(0)
    raises_compile_error(lambda: tilefuse.trace(lambda a, sd: F.dropout(a, p, seed=sd), X34, s),
                         "dropout", str(p))


# ---------------------------------------------------------------------------
# Out-of-range dims
# ---------------------------------------------------------------------------
REDUCE_DIM_CASES = {
    "sum": lambda a, d: a.sum(d),
    "max": lambda a, d: a.max(d),
    "min": lambda a, d: a.min(d),
    "argmax": lambda a, d: a.argmax(d),
    "softmax": lambda a, d: F.softmax(a, d),
    "log_softmax": lambda a, d: F.log_softmax(a, d),
    "cat": lambda a, d: tilefuse.cat([a, a], d),
    "mean": lambda a, d: a.mean(d),
}

@pytest.mark.parametrize("dim", [2, -3])
@pytest.mark.parametrize("op", list(REDUCE_DIM_CASES))
def test_reduce_dim_out_of_range(op, dim):
    fn = REDUCE_DIM_CASES[op]
    name = op
    msg = raises_compile_error(lambda: tilefuse.trace(lambda a: fn(a, dim), X34),
                               f"dim {dim}", "rank 2")
    assert name in msg, msg


def test_reduce_dim_listed_twice():
    raises_compile_error(lambda: tilefuse.trace(lambda a: a.sum((1, -1)), X34),
                         "sum", "twice")


@pytest.mark.parametrize("case", [
    "transpose(0, 5)",
    "squeeze(5)",
    "flatten(5)",
    "unsqueeze(5)",
    "permute(0, 5)",
])
def test_layout_dim_out_of_range(case):
    fns = {"transpose(0, 5)": lambda a: a.transpose(0, 5), "squeeze(5)": lambda a: a.squeeze(5),
           "flatten(5)": lambda a: a.flatten(5), "unsqueeze(5)": lambda a: a.unsqueeze(5),
           "permute(0, 5)": lambda a: a.permute(0, 5)}
    raises_compile_error(lambda: tilefuse.trace(fns[case], X34), "5")


# ---------------------------------------------------------------------------
# tilefuse.parse
# ---------------------------------------------------------------------------
MALFORMED = {
    "undeclared value": (
        "func.func @f(%a: tensor<3xf32>) -> tensor<3xf32> {\n"
        "  %r = graph.add %a, %b : tensor<3xf32>\n"
        "  return %r : tensor<3xf32>\n}\n", 2, "undeclared"),
    "type mismatch": (
        "func.func @f(%a: tensor<3xf32>) -> tensor<3xf32> {\n"
        "  %r = graph.add %a, %a : tensor<4xf32>\n"
        "  return %r : tensor<3xf32>\n}\n", 2, "tensor<4xf32>"),
    "unknown op": (
        "func.func @f(%a: tensor<3xf32>) -> tensor<3xf32> {\n"
        "  %r = graph.frobnicate %a : tensor<3xf32>\n"
        "  return %r : tensor<3xf32>\n}\n", 2, "graph.frobnicate"),
    "garbage": ("this is not mlir\n", 1, "this"),
    "verifier": (
        "func.func @f(%a: tensor<3x4xf32>) -> tensor<3x4xf32> {\n"
        "\n"
        "  %r = graph.reshape %a : (tensor<3x4xf32>) -> tensor<5x3xf32>\n"
        "  return %a : tensor<3x4xf32>\n}\n", 3, "reshape"),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_parse_malformed_names_line(case):
    text, line, what = MALFORMED[case]
    msg = raises_compile_error(lambda: tilefuse.parse(text), what)
    assert re.search(rf"<graph text>:{line}\b", msg), msg


@pytest.mark.parametrize("case", list(MALFORMED))
def test_parse_malformed_names_line_and_column(case):
    text, line, what = MALFORMED[case]
    msg = raises_compile_error(lambda: tilefuse.parse(text), what)
    assert re.search(rf"<graph text>:{line}:\d+", msg), msg


def test_parse_dynamic_shape_rejected():
    raises_compile_error(lambda: tilefuse.parse(
        "func.func @f(%a: tensor<?xf32>) -> tensor<?xf32> {\n  return %a : tensor<?xf32>\n}\n"),
        "tensor<?xf32>", "static")


def test_parse_entry_selection():
    two = ("func.func @f(%a: tensor<2xf32>) -> tensor<2xf32> {\n  return %a : tensor<2xf32>\n}\n"
           "func.func @g(%a: tensor<2xf32>) -> tensor<2xf32> {\n  return %a : tensor<2xf32>\n}\n")
    raises_compile_error(lambda: tilefuse.parse(two), "2 functions")
    raises_compile_error(lambda: tilefuse.parse(two, "h"), "'h'")
    assert tilefuse.parse(two, "g").interpret(np.ones(2, np.float32)).tolist() == [1.0, 1.0]


# ---------------------------------------------------------------------------
# Run-time errors in the interpreter
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("bad", [3, 7, -1], ids=["3", "7", "-1"])
def test_gather_index_out_of_range(bad):
    table = np.zeros((3, 4), np.float32)
    ids = np.array([0, bad, 2], np.int64)
    g = tilefuse.trace(lambda t, i: F.embedding(i, t), table, ids)
    raises_compile_error(lambda: g.interpret(table, ids), "gather", f"index {bad}", "3 rows")


def test_scatter_add_index_out_of_range():
    g = tilefuse.parse(
        "func.func @s(%b: tensor<4x2xf32>, %i: tensor<3xi64>, %u: tensor<3x2xf32>)"
        " -> tensor<4x2xf32> {\n"
        "  %r = graph.scatter_add %b, %i, %u : (tensor<4x2xf32>, tensor<3xi64>, "
        "tensor<3x2xf32>) -> tensor<4x2xf32>\n"
        "  return %r : tensor<4x2xf32>\n}\n")
    raises_compile_error(
        lambda: g.interpret(np.zeros((4, 2), np.float32), np.array([0, 4, 1]),
                            np.zeros((3, 2), np.float32)),
        "scatter_add", "index 4", "4 rows")


def test_cast_nan_to_int_at_run_time():
    x = np.array([1.0, np.nan], np.float32)
    g = tilefuse.trace(lambda a: a.to("i64"), x)
    raises_compile_error(lambda: g.interpret(x), "cast", "nan", "i64")


def test_integer_division_by_zero_at_run_time():
    g = tilefuse.parse("func.func @f(%a: tensor<2xi64>) -> tensor<2xi64> {\n"
                       "  %c = graph.div %a, %a : tensor<2xi64>\n"
                       "  return %c : tensor<2xi64>\n}\n")
    raises_compile_error(lambda: g.interpret(np.array([1, 0], np.int64)), "div", "zero")


# ---------------------------------------------------------------------------
# Errors found while tracing carry the user's file:line
# ---------------------------------------------------------------------------
# Each lambda sits on its own line: co_firstlineno is the line the error must name.
LOCATION_CASES = [
    pytest.param("add", lambda a, b, w, t: a + b),
    pytest.param("where", lambda a, b, w, t: tilefuse.where(a > 0, a, b)),
    pytest.param("expand", lambda a, b, w, t: a.expand(5, 4)),
    pytest.param("matmul batch", lambda a, b, w, t: a.reshape(3, 4, 1) @ b.reshape(5, 1, 1)),
    pytest.param("matmul", lambda a, b, w, t: a @ b),
    pytest.param("sum dim", lambda a, b, w, t: a.sum(2)),
    pytest.param("argmax dim", lambda a, b, w, t: a.argmax(-3)),
    pytest.param("softmax dim", lambda a, b, w, t: F.softmax(a, 2)),
    pytest.param("reshape", lambda a, b, w, t: a.reshape(5, 3)),
    pytest.param("cat", lambda a, b, w, t: tilefuse.cat([a, b], 0)),
    pytest.param("where cond", lambda a, b, w, t: tilefuse.where(a, a, a)),
    pytest.param("layer_norm", lambda a, b, w, t: F.layer_norm(a, 4, w, b)),
    pytest.param("cross_entropy", lambda a, b, w, t: F.cross_entropy(a, t)),
    pytest.param("linear", lambda a, b, w, t: F.linear(a, w)),
    pytest.param("mse", lambda a, b, w, t: F.mse_loss(a, b)),
    pytest.param("gather", lambda a, b, w, t: F.embedding(a, b)),
    pytest.param("transpose perm", lambda a, b, w, t: a.permute(0, 0)),
    pytest.param("matmul dtype", lambda a, b, w, t: t.reshape(1, 4) @ t.reshape(4, 1)),
]


@pytest.mark.parametrize("name,fn", LOCATION_CASES)
def test_error_names_user_file_and_line(name, fn):
    w = np.ones(3, np.float32)
    t = np.zeros(4, np.int64)
    msg = raises_compile_error(lambda: tilefuse.trace(fn, X34, X5, w, t))
    line = fn.__code__.co_firstlineno
    assert re.search(rf"{re.escape(THIS_FILE)}:{line}\b", msg), \
        f"{name}: message does not name {THIS_FILE}:{line}: {msg!r}"


def test_error_location_is_the_innermost_user_frame():
    """A helper in this file that does the bad op is the reported location."""
    def helper(a):
        return a.sum(7)  # the reported line

    line = helper.__code__.co_firstlineno + 1
    msg = raises_compile_error(lambda: tilefuse.trace(lambda a: helper(a), X34), "dim 7")
    assert re.search(rf"{re.escape(THIS_FILE)}:{line}\b", msg), msg


# ---------------------------------------------------------------------------
# Never a crash: risky inputs in a child process
# ---------------------------------------------------------------------------
_CHILD = textwrap.dedent("""
    import sys
    import numpy as np
    import tilefuse, tilefuse.functional as F

    x = np.zeros((3, 4), np.float32)
    leak = []
    g = tilefuse.trace(lambda a: (leak.append(a), a * 2)[1], x)
    cases = {
        "escaped tensor": lambda: leak[0] + 1,
        "tensor from another trace": lambda: tilefuse.trace(lambda a: a + leak[0], x),
        "interpret None": lambda: g.interpret(None),
        "interpret str": lambda: g.interpret("abc"),
        "interpret object": lambda: g.interpret(object()),
        "gather from empty table": lambda: tilefuse.trace(
            lambda t, i: t[i], np.zeros((0, 3), np.float32), np.zeros(2, np.int64)
        ).interpret(np.zeros((0, 3), np.float32), np.zeros(2, np.int64)),
        "negative reshape": lambda: tilefuse.trace(lambda a: a.reshape(-2, 6), x),
        "two -1 in reshape": lambda: tilefuse.trace(lambda a: a.reshape(-1, -1), x),
        "perm too short": lambda: tilefuse.trace(lambda a: a.permute(0), x),
        "cat of 0-d": lambda: tilefuse.trace(lambda a: tilefuse.cat([a.sum(), a.sum()]), x),
        "softmax of 0-d": lambda: tilefuse.trace(lambda a: F.softmax(a.sum(), 0), x),
        "reduce 0-d along 0": lambda: tilefuse.trace(lambda a: a.sum().sum(0), x),
        "matmul 0-d": lambda: tilefuse.trace(lambda a: a.sum() @ a, x),
        "embedding 0-d table": lambda: tilefuse.trace(
            lambda a, i: F.embedding(i, a.sum()), x, np.zeros(2, np.int64)),
        "cross_entropy 0-d logits": lambda: tilefuse.trace(
            lambda a, t: F.cross_entropy(a, t), np.float32(1), np.int64(2)),
        "parse empty": lambda: tilefuse.parse(""),
        "parse truncated": lambda: tilefuse.parse("func.func @f(%a: tensor<3xf32>"),
        "parse ui8": lambda: tilefuse.parse(
            "func.func @f(%a: tensor<2xui8>) -> tensor<2xui8> {\\n"
            "  return %a : tensor<2xui8>\\n}\\n"),
        "parse foreign dialect": lambda: tilefuse.parse(
            "func.func @f(%a: tensor<2xf32>) -> tensor<2xf32> {\\n"
            "  %c = arith.addf %a, %a : tensor<2xf32>\\n  return %c : tensor<2xf32>\\n}\\n"),
        "parse bad attribute": lambda: tilefuse.parse(
            "func.func @f(%a: tensor<2x3xf32>) -> tensor<3x2xf32> {\\n"
            "  %c = graph.transpose %a {perm = array<i64: 0, 7>} : "
            "(tensor<2x3xf32>) -> tensor<3x2xf32>\\n  return %c : tensor<3x2xf32>\\n}\\n"),
        "parse slice out of bounds": lambda: tilefuse.parse(
            "func.func @f(%a: tensor<4xf32>) -> tensor<2xf32> {\\n"
            "  %c = graph.slice %a {start = array<i64: 3>, limit = array<i64: 9>, "
            "stride = array<i64: 3>} : (tensor<4xf32>) -> tensor<2xf32>\\n"
            "  return %c : tensor<2xf32>\\n}\\n"),
        "parse gather of scalar table": lambda: tilefuse.parse(
            "func.func @f(%a: tensor<f32>, %i: tensor<2xi64>) -> tensor<2xf32> {\\n"
            "  %c = graph.gather %a, %i : (tensor<f32>, tensor<2xi64>) -> tensor<2xf32>\\n"
            "  return %c : tensor<2xf32>\\n}\\n"),
        "parse broadcast bad dims": lambda: tilefuse.parse(
            "func.func @f(%a: tensor<3xf32>) -> tensor<2x4xf32> {\\n"
            "  %c = graph.broadcast_in_dim %a {dims = array<i64: 5>} : "
            "(tensor<3xf32>) -> tensor<2x4xf32>\\n  return %c : tensor<2x4xf32>\\n}\\n"),
        "parse random with f32 seed": lambda: tilefuse.parse(
            "func.func @f(%s: tensor<f32>) -> tensor<4xf32> {\\n"
            "  %u = graph.random_uniform %s : (tensor<f32>) -> tensor<4xf32>\\n"
            "  return %u : tensor<4xf32>\\n}\\n"),
        "int division by zero": lambda: tilefuse.parse(
            "func.func @f(%a: tensor<2xi32>) -> tensor<2xi32> {\\n"
            "  %c = graph.div %a, %a : tensor<2xi32>\\n  return %c : tensor<2xi32>\\n}\\n"
        ).interpret(np.zeros(2, np.int32)),
    }
    for name, fn in cases.items():
        try:
            fn()
            print("NO ERROR:", name)
        except tilefuse.CompileError:
            print("ok:", name)
        except Exception as e:
            print(f"WRONG EXCEPTION: {name}: {type(e).__name__}: {e}")
        sys.stdout.flush()
""")


def _child_env():
    env = dict(os.environ)
    import tilefuse as tf  # the very package these tests import
    pkg_parent = os.path.dirname(os.path.dirname(os.path.abspath(tf.__file__)))
    env["PYTHONPATH"] = pkg_parent + os.pathsep + env.get("PYTHONPATH", "")
    return env


def test_risky_inputs_never_crash():
    proc = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True,
                          env=_child_env(), timeout=120)
    assert proc.returncode == 0, (
        f"child process died with return code {proc.returncode} (signal?):\n"
        f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
    lines = proc.stdout.strip().splitlines()
    bad = [ln for ln in lines if not ln.startswith("ok:")]
    assert not bad, "risky inputs not rejected with CompileError:\n" + "\n".join(bad)
    assert len(lines) == _CHILD.count('": lambda')
