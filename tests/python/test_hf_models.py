"""HuggingFace transformers models (built from small configs, no weights)
train through tilefuse as in eager PyTorch: 10 AdamW steps through
torch.compile(model, backend="tilefuse") and through tilefuse.from_torch,
every graph converted whole (tilefuse.explain lists nothing, the backend's
stats count no partition and no fallback), the loss within 1e-5 relative
of eager's at every step.

Dropout is off in the configs (tilefuse's masks follow PyTorch's
distribution, not its bits); everything else is each model's default,
attention included (SDPA on the CPU).
"""
import copy

import pytest
import torch

import tilefuse
from tilefuse.torch_integration import stats

transformers = pytest.importorskip("transformers", reason="transformers is installed by "
                                   "tools/dev.sh; run the README's test command")
T = transformers
LOSS_RTOL = 1e-5
STEPS = 10
VOCAB, SEQ, BATCH = 128, 16, 2


def _gpt2():
    return T.GPT2LMHeadModel(T.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=VOCAB,
                                          n_positions=64, resid_pdrop=0.0, embd_pdrop=0.0,
                                          attn_pdrop=0.0, bos_token_id=0, eos_token_id=0))


def _llama():
    return T.LlamaForCausalLM(T.LlamaConfig(
        num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
        intermediate_size=128, vocab_size=VOCAB, max_position_embeddings=64,
        bos_token_id=0, eos_token_id=0, pad_token_id=0))


def _bert():
    return T.BertForMaskedLM(T.BertConfig(
        num_hidden_layers=2, hidden_size=64, num_attention_heads=4, intermediate_size=128,
        vocab_size=VOCAB, max_position_embeddings=64, hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0, pad_token_id=0))


def _mistral():
    return T.MistralForCausalLM(T.MistralConfig(
        num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
        intermediate_size=128, vocab_size=VOCAB, max_position_embeddings=64,
        bos_token_id=0, eos_token_id=0, pad_token_id=0))


def _qwen2():
    return T.Qwen2ForCausalLM(T.Qwen2Config(
        num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
        intermediate_size=128, vocab_size=VOCAB, max_position_embeddings=64,
        bos_token_id=0, eos_token_id=0, pad_token_id=0))


def _roberta():
    return T.RobertaForMaskedLM(T.RobertaConfig(
        num_hidden_layers=2, hidden_size=64, num_attention_heads=4, intermediate_size=128,
        vocab_size=VOCAB, max_position_embeddings=64, hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0, pad_token_id=1, bos_token_id=0, eos_token_id=2))


MODELS = {"gpt2": _gpt2, "llama": _llama, "bert": _bert, "mistral": _mistral, "qwen2": _qwen2,
          "roberta": _roberta}


class WithLoss(torch.nn.Module):
    """The model's own loss for next-token (causal) or masked-token
    prediction on `ids`, with a padding mask that hides the last two
    positions of the first row."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, ids, mask):
        return self.model(input_ids=ids, attention_mask=mask, labels=ids).loss


def _inputs(seed):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, VOCAB, (BATCH, SEQ), generator=g)
    mask = torch.ones(BATCH, SEQ, dtype=torch.long)
    mask[0, -2:] = 0
    return ids, mask


def _twins(name):
    torch.manual_seed(0)
    model = WithLoss(MODELS[name]())
    model.train()
    return model, copy.deepcopy(model)


def _eager_losses(model, batches):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    out = []
    for b in batches:
        opt.zero_grad()
        loss = model(*b)
        loss.backward()
        opt.step()
        out.append(loss.item())
    return out


def _check(name, path, got, want):
    for t, (g, w) in enumerate(zip(got, want)):
        assert abs(g - w) <= LOSS_RTOL * abs(w), (
            f"{name} via {path}: step {t}: loss {g!r} vs eager {w!r} "
            f"(relative {abs(g - w) / abs(w):.3g} > {LOSS_RTOL:g})")


pytestmark = pytest.mark.usefixtures("fresh_torch_backend")


@pytest.mark.parametrize("name", list(MODELS))
def test_hf_model_trains_through_the_backend_like_eager(name):
    model, twin = _twins(name)
    batches = [_inputs(s) for s in range(STEPS)]
    want = _eager_losses(twin, batches)
    explanation = tilefuse.explain(model, *batches[0])
    assert explanation.ok, f"{name}:\n{explanation}"
    torch._dynamo.reset()
    stats.reset()
    compiled = torch.compile(model, backend="tilefuse")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    got = []
    for b in batches:
        opt.zero_grad()
        loss = compiled(*b)
        loss.backward()
        opt.step()
        got.append(loss.item())
    assert stats.compiled >= 2 and stats.partitioned == 0 and stats.eager == 0, stats
    assert not stats.unsupported, stats
    _check(name, "torch.compile(backend='tilefuse')", got, want)


@pytest.mark.parametrize("name", list(MODELS))
def test_hf_model_trains_through_from_torch_like_eager(name):
    model, twin = _twins(name)
    batches = [_inputs(s) for s in range(STEPS)]
    want = _eager_losses(twin, batches)
    step = tilefuse.from_torch(model, batches[0],
                               torch.optim.AdamW(model.parameters(), lr=1e-3))
    got = [step(*b) for b in batches]
    _check(name, "from_torch", got, want)


def test_gpt2_with_its_attention_dropout_runs_the_fused_kernels_through_from_torch():
    """GPT-2's default attn_pdrop (0.1) reaches SDPA as dropout_p: from_torch
    keeps every layer's attention fused, dropout drawn in the kernels, and
    trains (losses finite and falling; tilefuse's masks are not PyTorch's,
    so the values are not eager's)."""
    torch.manual_seed(0)
    model = WithLoss(T.GPT2LMHeadModel(T.GPT2Config(
        n_layer=2, n_embd=64, n_head=4, vocab_size=VOCAB, n_positions=64, bos_token_id=0,
        eos_token_id=0)))
    assert model.model.config.attn_pdrop > 0
    model.train()
    batch = _inputs(0)
    step = tilefuse.from_torch(model, batch, torch.optim.AdamW(model.parameters(), lr=1e-2))
    names = [r["name"] for r in step.report()]
    assert names.count("attention") == 2 and names.count("attention_grad") == 2, names
    assert "dropout_p = 1.0" in step.train_step.graph.mlir()
    losses = [step(*batch) for _ in range(8)]
    assert all(torch.isfinite(torch.tensor(losses))) and losses[-1] < losses[0], losses
