"""PyTorch's OpInfo database as the conformance suite of the torch.compile
backend: every selected op's float32 CPU samples (the first two of each)
run through `torch.compile(fn, backend="tilefuse")`, forward and backward,
against eager PyTorch.

Selection. OpInfo entries of deep-learning ops, that is all of `op_db`
except:
- linear algebra: `linalg.*` and the factorisations, solvers and
  determinants outside that namespace (cholesky*, qr, svd*, eig*, det,
  logdet, slogdet, inverse, pinverse, lu*, triangular_solve, geqrf, ormqr,
  matrix_exp, lstsq, householder_product, pca_lowrank, svd_lowrank);
- FFT and signal processing: `fft.*`, `signal.*`, stft, istft;
- special functions: `special.*` and the same functions under other names
  (digamma, lgamma, polygamma, mvlgamma, i0, igamma, igammac, erfinv, zeta);
- `masked.*`, complex numbers (complex, polar, view_as_complex,
  view_as_real, cfloat, cdouble, chalf, and `.complex` variants), sparse
  (`sparse.*`, to_sparse), quantized and CUDA-only ops (`_scaled_mm*`,
  jiterator_*, flash/efficient attention forward);
- ops without float32 CPU samples (float32 not among the CPU dtypes);
- ops whose values are not defined or are random: `empty*` and
  `new_empty*` (OpInfo's has_nondeterministic_output), and ops that draw
  random numbers in eager (OpInfo calls them through wrapper_set_seed, or
  an ATen op tagged nondeterministic_seeded runs on the sample: bernoulli,
  normal, dropout, rrelu, ...), since tilefuse draws its own numbers.

Each sample. Its tensors (input, args, kwargs; float ones requiring grad
where the op supports autograd) are the compiled function's arguments, the
rest constants. Forward: the op's outputs. Backward, where the op supports
autograd and the sample's outputs (after OpInfo's output_process_fn_grad)
include float tensors that need a gradient: the gradients of
sum(output * w), w fixed random weights, with respect to every float input
that requires grad. `torch._dynamo.reset()` and the backend's
`stats.reset()` come before each sample, whose class follows from the
backend's stats and Dynamo's graph-break counter:
- converted: every ATen graph compiled whole, no graph break;
- partial: some graph split between tilefuse and PyTorch (or a graph
  break beside compiled graphs);
- fallback: every graph left to PyTorch (or no graph reached the backend);
- torch error: eager runs, but torch.compile fails with the backend's
  capture (aot_autograd with the backend's decompositions) and no tilefuse
  in it, so not the backend's failure (listed, not a test failure);
- eager error: eager PyTorch itself raises on the sample (left out).
Test failures:
- wrong: a converted or partial sample whose outputs or gradients differ
  from eager's: float32 |compiled - eager| > RTOL * max|eager| + ATOL +
  2 E per tensor, with RTOL 1e-5; ATOL 1e-6, the rounding of terms of the
  size OpInfo draws, |x| <= 9, that cancel to ~0 (9 * 2^-23 ~ 1e-6); and
  E = max|eager - eager in float64| over the tensor's finite elements,
  eager's own error where its formula cancels (a backward that subtracts
  two large exponentials, say: another float32 evaluation may be off by as
  much again), measured only when the first two terms do not suffice. NaN
  and infinities must be where eager has them; integer and bool outputs
  exact; shapes and dtypes equal;
- raise: an exception through the backend where eager works (the backend
  must leave what it cannot do to PyTorch, never raise).

CI runs the op families in CI_FAMILIES (about three minutes on 2 cores);
TILEFUSE_OPINFO=all runs every selected op (bench/opinfo.py writes the
counts and the ops left to PyTorch with their reasons).
"""
import logging
import os
import time
import traceback
import zlib

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("expecttest", reason="OpInfo needs expecttest (tools/dev.sh installs it)")
pytest.importorskip("hypothesis", reason="OpInfo needs hypothesis (tools/dev.sh installs it)")

from torch.testing._internal.common_methods_invocations import op_db  # noqa: E402
from torch.utils import _pytree as pytree  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

import tilefuse  # noqa: E402,F401 (the backend's entry point, from the build tree)
from tilefuse import torch_integration as TI  # noqa: E402

RTOL = 1e-5
ATOL = 1e-6
SAMPLES_PER_OP = 2

_LINALG = {"cholesky", "cholesky_inverse", "cholesky_solve", "qr", "svd", "svd_lowrank",
           "pca_lowrank", "eig", "eigvals", "symeig", "det", "logdet", "slogdet", "inverse",
           "pinverse", "lu", "lu_solve", "lu_unpack", "triangular_solve", "geqrf", "ormqr",
           "matrix_exp", "lstsq", "householder_product"}
_SPECIAL = {"digamma", "lgamma", "polygamma", "mvlgamma", "i0", "igamma", "igammac",
            "erfinv", "zeta"}
_COMPLEX = {"complex", "polar", "view_as_complex", "view_as_real", "cfloat", "cdouble",
            "chalf"}
_OTHER = {"stft", "istft", "to_sparse"}
_PREFIXES = ("linalg.", "fft.", "signal.", "special.", "masked.", "sparse.", "_scaled_mm",
             "torch._scaled_mm", "jiterator_", "torch.ops.aten._flash_attention",
             "torch.ops.aten._efficient_attention")


def op_id(op):
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


def exclusion(op):
    """Why OpInfo entry `op` is left out of the selection (the module's
    rule), or None when it is selected."""
    name = op.name
    if name.startswith(_PREFIXES):
        return "namespace"
    if name in _LINALG:
        return "linear algebra"
    if name in _SPECIAL:
        return "special function"
    if name in _COMPLEX or op.variant_test_name == "complex":
        return "complex"
    if name in _OTHER:
        return "signal processing or sparse"
    if torch.float32 not in op.supported_dtypes("cpu"):
        return "no float32 samples"
    if op.has_nondeterministic_output:
        return "undefined values"
    return None


def selected_ops():
    return [op for op in op_db if exclusion(op) is None]


# Op families: the CI subset, by name (each name an op_db name).
FAMILIES = {
    "pointwise": {
        "abs", "neg", "exp", "log", "tanh", "sqrt", "rsqrt", "sigmoid", "erf", "log1p",
        "expm1", "floor", "ceil", "trunc", "sin", "cos", "reciprocal", "sign", "sgn",
        "round", "exp2", "log2", "log10", "logaddexp", "nan_to_num", "fmod", "remainder",
        "copysign", "add", "sub", "mul", "div", "pow", "maximum", "minimum", "clamp",
        "clamp_min", "clamp_max", "where", "masked_fill", "isnan", "isinf", "isfinite",
        "eq", "ne", "lt", "le", "gt", "ge", "logical_not", "logical_and", "logical_or",
        "square", "lerp", "addcmul", "addcdiv", "rsub", "true_divide", "xlogy", "hypot",
        "frac", "positive",
    },
    "views": {
        "view", "reshape", "permute", "transpose", "t", "expand", "squeeze", "unsqueeze",
        "flatten", "unflatten", "cat", "stack", "split", "chunk", "narrow", "select",
        "slice", "flip", "roll", "repeat", "diagonal", "index_select", "gather",
        "constant_pad_nd", "nn.functional.pad", "tril", "triu", "movedim", "tile",
        "__getitem__", "index_put", "scatter", "scatter_add", "index_add", "index_copy",
        "select_scatter", "slice_scatter", "clone", "contiguous",
    },
    "reductions": {
        "sum", "mean", "amax", "amin", "max", "min", "prod", "any", "all", "argmax",
        "argmin", "var", "std", "logsumexp", "cumsum", "norm",
    },
    "nn": {
        "softmax", "log_softmax", "nn.functional.relu", "nn.functional.gelu",
        "nn.functional.silu", "nn.functional.leaky_relu", "nn.functional.elu",
        "nn.functional.selu", "nn.functional.relu6", "nn.functional.hardtanh",
        "nn.functional.softsign", "nn.functional.hardsigmoid", "nn.functional.hardswish",
        "nn.functional.mish", "nn.functional.softplus", "nn.functional.layer_norm",
        "nn.functional.group_norm", "nn.functional.rms_norm", "nn.functional.embedding",
        "nn.functional.cross_entropy", "nn.functional.nll_loss", "nn.functional.mse_loss",
        "nn.functional.l1_loss", "nn.functional.smooth_l1_loss", "nn.functional.huber_loss",
        "nn.functional.kl_div", "nn.functional.binary_cross_entropy",
        "nn.functional.binary_cross_entropy_with_logits", "nn.functional.linear",
        "nn.functional.scaled_dot_product_attention", "mm", "bmm", "matmul", "addmm",
    },
    "conv": {
        "nn.functional.conv1d", "nn.functional.conv2d", "nn.functional.conv3d",
        "nn.functional.conv_transpose1d", "nn.functional.conv_transpose2d",
        "nn.functional.conv_transpose3d", "nn.functional.interpolate",
        "nn.functional.upsample_bilinear", "nn.functional.upsample_nearest",
        "nn.functional.max_pool2d", "nn.functional.avg_pool2d",
        "nn.functional.adaptive_avg_pool2d", "nn.functional.batch_norm",
    },
}
CI_FAMILIES = ("pointwise", "views", "reductions", "nn", "conv")


def ci_ops():
    names = set().union(*(FAMILIES[f] for f in CI_FAMILIES))
    return [op for op in selected_ops() if op.name in names]


# ---------------------------------------------------------------------------
# One sample
# ---------------------------------------------------------------------------

class Result:
    """What one sample did: `kind` (converted, partial, fallback, wrong,
    raise, torch error, eager error, random), `detail` (why), `unsupported`
    (the ops the backend left to PyTorch, with counts)."""

    def __init__(self, kind, detail="", unsupported=None):
        self.kind, self.detail, self.unsupported = kind, detail, dict(unsupported or {})

    def __repr__(self):
        return f"Result({self.kind}, {self.detail!r}, {self.unsupported})"


def _seed(text):
    return zlib.crc32(text.encode()) % (2 ** 31)


def samples(op, count=SAMPLES_PER_OP):
    """The op's first `count` float32 CPU samples (drawn from a seed fixed
    by the op's name)."""
    torch.manual_seed(_seed(op_id(op)))
    out = []
    for s in op.sample_inputs("cpu", torch.float32, requires_grad=op.supports_autograd):
        out.append(s)
        if len(out) == count:
            break
    return out


def _split(sample):
    """(tensors, rebuild): the sample's tensors and a function of new
    tensors giving (input, args, kwargs)."""
    leaves, spec = pytree.tree_flatten((sample.input, list(sample.args), dict(sample.kwargs)))
    where = [i for i, v in enumerate(leaves) if isinstance(v, torch.Tensor)]

    def rebuild(*tensors):
        full = list(leaves)
        for i, t in zip(where, tensors):
            full[i] = t
        inp, args, kwargs = pytree.tree_unflatten(full, spec)
        return inp, args, kwargs
    return [leaves[i] for i in where], rebuild


def _fresh(tensors, dtype=None):
    """Copies of the sample's tensors (float ones in `dtype` when given)."""
    return [(t.detach().to(dtype) if dtype is not None and t.dtype.is_floating_point
             else t.detach()).clone().requires_grad_(t.requires_grad) for t in tensors]


def _run(op, sample, call, tensors, weights_seed, dtype=None):
    """(outputs, gradients) of the op on copies of `tensors`, through
    `call` (the op itself, or a compiled function of the tensors); with
    `dtype`, float tensors in that dtype (the weights are the same)."""
    inputs = _fresh(tensors, dtype)
    out = call(*inputs)
    grads = None
    if op.supports_autograd:
        processed = sample.output_process_fn_grad(out)
        diff = [o for o in pytree.tree_leaves(processed) if isinstance(o, torch.Tensor)
                and o.dtype.is_floating_point and o.requires_grad]
        wrt = [t for t in inputs if t.requires_grad]
        if diff and wrt:
            g = torch.Generator().manual_seed(weights_seed)
            loss = sum((o * torch.randn(o.shape, generator=g).to(o.dtype)).sum()
                       for o in diff)
            grads = torch.autograd.grad(loss, wrt, allow_unused=True)
    return out, grads


def _differs(got, want, what, ref=None):
    """Why tensor `got` is not `want` within the module's tolerance, or None.
    `ref`: the op's value in float64, whose distance from `want` (eager's
    own rounding error) widens the bound (see the module's docstring)."""
    if not isinstance(want, torch.Tensor) or not isinstance(got, torch.Tensor):
        if isinstance(want, torch.Tensor) or isinstance(got, torch.Tensor):
            return f"{what}: {type(got).__name__} where eager gives {type(want).__name__}"
        same = got == want or (isinstance(want, float) and want != want and got != got)
        return None if same else f"{what}: {got!r} where eager gives {want!r}"
    if got.shape != want.shape or got.dtype != want.dtype:
        return (f"{what}: {got.dtype}{list(got.shape)} where eager gives "
                f"{want.dtype}{list(want.shape)}")
    g, w = got.detach(), want.detach()
    if not w.dtype.is_floating_point:
        if torch.equal(g, w):
            return None
        bad = (g != w).nonzero()[0].tolist()
        return f"{what}: {int((g != w).sum())} elements differ, first at {bad}: " \
               f"{g[tuple(bad)].item()} vs eager {w[tuple(bad)].item()}"
    g, w = g.double(), w.double()
    nan_w, nan_g = torch.isnan(w), torch.isnan(g)
    inf_w = torch.isinf(w)
    finite = ~nan_w & ~inf_w
    scale = w[finite].abs().max().item() if finite.any() else 0.0
    own = 0.0
    if isinstance(ref, torch.Tensor) and ref.shape == w.shape:
        r = ref.detach().double()
        both = finite & torch.isfinite(r)
        own = (w - r)[both].abs().max().item() if both.any() else 0.0
    bound = RTOL * scale + ATOL + 2 * own
    err = torch.where(finite, (g - w).abs(), torch.zeros_like(w))
    err = torch.where(finite & torch.isnan(err), torch.full_like(w, float("inf")), err)
    bad = (finite & ~(err <= bound)) | (nan_w != nan_g) | (inf_w & (g != w))
    if not bad.any():
        return None
    k = tuple((bad.nonzero()[0]).tolist())
    return (f"{what}: {int(bad.sum())} of {w.numel()} elements differ beyond "
            f"{RTOL:g} * max|eager| {scale:.3g} + {ATOL:g} + 2 * eager's error {own:.3g}; "
            f"first at {list(k)}: "
            f"{g[k].item()!r} vs eager {w[k].item()!r} (max err "
            f"{err[finite].max().item() if finite.any() else 0.0:.3g})")


def _compare(got, want, ref=None):
    """The first difference between the compiled and the eager (outputs,
    gradients), or None; `ref`: the same in float64, or None."""
    g_out, w_out = pytree.tree_leaves(got[0]), pytree.tree_leaves(want[0])
    r_out = pytree.tree_leaves(ref[0]) if ref is not None else [None] * len(w_out)
    if len(g_out) != len(w_out):
        return f"{len(g_out)} outputs where eager gives {len(w_out)}"
    if len(r_out) != len(w_out):
        r_out = [None] * len(w_out)
    for i, (g, w, r) in enumerate(zip(g_out, w_out, r_out)):
        why = _differs(g, w, f"output {i}", r)
        if why:
            return why
    if (got[1] is None) != (want[1] is None):
        return "gradients where eager has none, or none where eager has them"
    r_grads = list(ref[1]) if ref is not None and ref[1] is not None else []
    for i, (g, w) in enumerate(zip(got[1] or (), want[1] or ())):
        if (g is None) != (w is None):
            return f"gradient {i}: {g!r} where eager gives {w!r}"
        r = r_grads[i] if i < len(r_grads) else None
        why = g is not None and _differs(g, w, f"gradient of input {i}", r)
        if why:
            return why
    return None


def _float64_reference(op, sample, fn, tensors, seed):
    """The sample's (outputs, gradients) computed by eager in float64, or
    None where the op does not run in float64."""
    try:
        return _run(op, sample, fn, tensors, seed, dtype=torch.float64)
    except Exception:  # noqa: BLE001 (no float64 kernel, say)
        return None


def _through_tilefuse(exc):
    return any("/tilefuse/" in f.filename for f in traceback.extract_tb(exc.__traceback__))


def _captured_without_tilefuse(fn, op, sample, tensors, seed):
    """Whether the backend's capture alone (aot_autograd, the backend's
    decompositions, PyTorch running the graphs) runs the sample."""
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    def nop(gm, example_inputs):
        return make_boxed_func(gm.forward)
    backend = aot_autograd(fw_compiler=nop, bw_compiler=nop,
                           decompositions=TI._decompositions())
    torch._dynamo.reset()
    try:
        _run(op, sample, torch.compile(fn, backend=backend), tensors, seed)
        return True
    except Exception:  # noqa: BLE001 (PyTorch's own failure)
        return False
    finally:
        torch._dynamo.reset()


class _Warnings(logging.Handler):
    """The backend's warnings during one sample."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


class _SeededOps(TorchDispatchMode):
    """Records whether an ATen op that draws random numbers ran."""

    seen = False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if torch.Tag.nondeterministic_seeded in getattr(func, "tags", ()):
            self.seen = True
        return func(*args, **(kwargs or {}))


def _seeded_by_opinfo(op):
    """Whether OpInfo calls the op through wrapper_set_seed (its random
    ops, which it seeds for repeatable eager results)."""
    code = getattr(op.op, "__code__", None)
    return code is not None and "wrapper_set_seed" in code.co_names


def _is_random(op, fn, tensors):
    """Whether the op draws random numbers in eager (OpInfo seeds it, or an
    ATen op tagged nondeterministic_seeded runs)."""
    if _seeded_by_opinfo(op):
        return True
    mode = _SeededOps()
    with torch.no_grad(), mode:
        fn(*_fresh(tensors))
    return mode.seen


def run_sample(op, sample, index=0):
    """The Result of one OpInfo sample (see the module's docstring)."""
    from torch._dynamo.utils import counters
    tensors, rebuild = _split(sample)

    def fn(*ts):
        inp, args, kwargs = rebuild(*ts)
        return op(inp, *args, **kwargs)

    seed = _seed(f"{op_id(op)}/{index}")
    try:
        want = _run(op, sample, fn, tensors, seed)
    except Exception as e:  # noqa: BLE001
        return Result("eager error", f"{type(e).__name__}: {str(e).splitlines()[0][:200]}")
    if _is_random(op, fn, tensors):
        return Result("random")
    torch._dynamo.reset()
    TI.stats.reset()
    counters.clear()
    log = _Warnings()
    logger = logging.getLogger("tilefuse")
    logger.addHandler(log)
    try:
        got = _run(op, sample, torch.compile(fn, backend="tilefuse"), tensors, seed)
    except Exception as e:  # noqa: BLE001
        text = f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"
        if not _through_tilefuse(e) and not _captured_without_tilefuse(fn, op, sample,
                                                                         tensors, seed):
            return Result("torch error", text)
        return Result("raise", text + "\n" + "".join(traceback.format_exception(e))[-3000:])
    finally:
        torch._dynamo.reset()
        logger.removeHandler(log)
    stats = TI.stats
    breaks = dict(counters["graph_break"])
    unsupported = dict(stats.unsupported)
    for reason in breaks:
        unsupported[f"graph break: {str(reason).splitlines()[0][:120]}"] = breaks[reason]
    for text, n in counters["unimplemented"].items():
        # a failure inside the backend's call that Dynamo turned into a
        # fallback to eager (aot_autograd's capture, say)
        lines = [t.strip() for t in str(text).splitlines()]
        why = next((t[len("Exception:"):] for t in lines if t.startswith("Exception:")),
                   lines[0])
        unsupported[f"not captured: {why.strip()[:120]}"] = n
    for message in log.messages:  # graphs the backend could not compile
        if "could not compile" in message:
            why = message.split(":", 2)[-1].strip()
            unsupported[f"not compiled: {why[:120]}"] = unsupported.get(
                f"not compiled: {why[:120]}", 0) + 1
    compiled_any = stats.compiled > 0 or stats.partitioned > 0
    left = stats.partitioned or stats.eager or unsupported or stats.off_cpu
    if compiled_any:
        kind = "partial" if left else "converted"
    else:
        kind = "fallback"
        if not unsupported:
            unsupported["no graph reached the backend"] = 1
    why = _compare(got, want)
    if why and kind in ("converted", "partial"):
        why = _compare(got, want, _float64_reference(op, sample, fn, tensors, seed))
    if why and kind in ("converted", "partial"):
        return Result("wrong", f"({kind}) {why}", unsupported)
    return Result(kind, why or "", unsupported)


def describe(op, sample):
    """The sample's tensors' shapes and its other arguments, for messages."""
    def fmt(v):
        if isinstance(v, torch.Tensor):
            return f"{str(v.dtype).replace('torch.', '')}{list(v.shape)}"
        return repr(v)
    args = pytree.tree_map(fmt, (sample.input, list(sample.args), dict(sample.kwargs)))
    return f"{op_id(op)}{args}"


def run_all(ops, progress=None):
    """[(op, sample index, sample, Result)] over `ops`."""
    rows = []
    for op in ops:
        try:
            todo = samples(op)
        except Exception as e:  # noqa: BLE001 (a sample generator failing here)
            rows.append((op, 0, None, Result("eager error", f"samples: {type(e).__name__}: "
                                                             f"{e}")))
            continue
        for i, s in enumerate(todo):
            start = time.perf_counter()
            r = run_sample(op, s, i)
            rows.append((op, i, s, r))
            if progress:
                progress(op, i, s, r, time.perf_counter() - start)
    return rows


# ---------------------------------------------------------------------------
# The test
# ---------------------------------------------------------------------------

def _test_ops():
    if os.environ.get("TILEFUSE_OPINFO", "") == "all":
        return selected_ops()
    return ci_ops()


@pytest.mark.parametrize("op", _test_ops(), ids=op_id)
def test_opinfo_sample_matches_eager(op):
    failures = []
    for i, s in enumerate(samples(op)):
        r = run_sample(op, s, i)
        if r.kind in ("wrong", "raise"):
            failures.append(f"sample {i} {describe(op, s)}: {r.kind}: {r.detail}")
    assert not failures, "\n".join(failures)


def test_ci_families_name_existing_ops():
    """Every name in FAMILIES is a selected OpInfo op (a renamed or dropped
    op must not leave its family silently smaller)."""
    names = {op.name for op in selected_ops()}
    missing = sorted(n for f in FAMILIES.values() for n in f if n not in names)
    assert not missing, f"FAMILIES names ops that are not selected OpInfo ops: {missing}"


def test_selection_rule():
    """The rule keeps the ops it must and leaves out what the docstring
    says."""
    by_id = {op_id(op): op for op in op_db}
    for kept in ("add", "nn.functional.gelu", "sum", "cat", "index_select"):
        assert exclusion(by_id[kept]) is None, kept
    for left, why in (("linalg.det", "namespace"), ("fft.fft", "namespace"),
                      ("special.i1", "namespace"), ("cholesky_solve", "linear algebra"),
                      ("digamma", "special function"), ("bitwise_and", "no float32 samples"),
                      ("empty_like", "undefined values"), ("view_as_complex", "complex")):
        assert exclusion(by_id[left]) == why, left

