"""The decomposition table of the torch.compile backend never pairs a
forward with a backward it does not match: a multi-output forward op is
decomposed only where every output of its decomposition is the op's own
(checked here against eager for each such op), since PyTorch may run the
op's backward, which reads those outputs, whole.

Outputs compared with max|decomposed - eager| / max|eager| <= 1e-5
(float32; the decompositions compute the same quantities in another
order).
"""
import pytest
import torch
from torch._decomp import core_aten_decompositions

from tilefuse import torch_integration as TI

aten = torch.ops.aten
RTOL = 1e-5


def _samples():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 6, 5, generator=g)
    w = torch.randn(5, generator=g)
    return {
        "aten::_fused_rms_norm": (aten._fused_rms_norm.default, (x, [5], w, 1e-6)),
        "aten::var_mean.dim": (aten.var_mean.dim, (x, [2], True)),
        "aten::var_mean": (aten.var_mean.default, (x,)),
        "aten::std_mean.correction": (aten.std_mean.correction, (x, [0, 2])),
        "aten::std_mean.dim": (aten.std_mean.dim, (x, [1], False)),
        "aten::std_mean": (aten.std_mean.default, (x,)),
        "aten::aminmax": (aten.aminmax.default, (x,)),
        "aten::log_sigmoid_forward": (aten.log_sigmoid_forward.default, (x,)),
        # A Conv1d weight normalised over its last dim (wav2vec2's
        # positional convolution), and over its first (the default).
        "aten::_weight_norm_interface": (aten._weight_norm_interface.default,
                                         (x, x.norm(dim=(0, 1), keepdim=True) * 1.5, 2)),
    }


def _outputs_differ(op, args):
    """[(output index, error)] where op's decomposition differs from the op."""
    decomposed = core_aten_decompositions()[op](*args)
    eager = op(*args)
    bad = []
    for i, (d, e) in enumerate(zip(decomposed, eager)):
        if d.shape != e.shape:
            bad.append((i, f"shape {tuple(d.shape)} vs {tuple(e.shape)}"))
            continue
        if e.numel() == 0:
            continue  # an output the op leaves empty (a buffer only CUDA fills)
        err = ((d.double() - e.double()).abs().max() /
               e.double().abs().max().clamp_min(1e-30)).item()
        if not err <= RTOL:
            bad.append((i, err))
    return bad


@pytest.mark.parametrize("name", TI._MULTI_OUTPUT_DECOMPOSITIONS_CHECKED)
def test_each_decomposed_multi_output_op_returns_the_ops_outputs(name):
    samples = _samples()
    assert name in samples, f"{name} is decomposed but has no sample here to check it"
    op, args = samples[name]
    assert op in core_aten_decompositions(), f"{name} is no longer decomposed by PyTorch"
    assert not _outputs_differ(op, args), f"{name}: {_outputs_differ(op, args)}"


def test_the_table_holds_no_unchecked_multi_output_forward_op():
    table = TI._decompositions()
    unchecked = sorted(op.name() for op in table
                       if TI._tensor_outputs(op) > 1 and not op.name().endswith("_backward")
                       and op.name() not in TI._MULTI_OUTPUT_DECOMPOSITIONS_CHECKED)
    assert not unchecked, unchecked
    assert aten._scaled_dot_product_flash_attention_for_cpu.default not in table


def test_the_sdpa_decomposition_is_the_kind_this_guards_against():
    """PyTorch's decomposition of the CPU flash-attention op returns
    something else than the op's log-sum-exp: applied to a forward whose
    backward op stays whole, it gave gradients 1-5x off."""
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, 2, 5, 4, generator=g) for _ in range(3))
    op = aten._scaled_dot_product_flash_attention_for_cpu.default
    assert [i for i, _ in _outputs_differ(op, (q, k, v))] == [1]
