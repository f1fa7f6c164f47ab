"""HuggingFace transformers models (built from small configs, no weights)
train through tilefuse as in eager PyTorch: 10 AdamW steps through
torch.compile(model, backend="tilefuse") and through tilefuse.from_torch
(GPT-2, Llama, BERT, Mistral, Qwen2, RoBERTa, OPT, GPT-NeoX, GPT-J, Phi-3,
Gemma 2, Falcon, T5, DistilBERT, and the mixtures of experts Mixtral and
Qwen2-MoE; BLOOM through the backend; wav2vec2 on raw audio),
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


def _opt():  # learned positions with an offset, pre-norm
    return T.OPTForCausalLM(T.OPTConfig(
        num_hidden_layers=2, hidden_size=64, num_attention_heads=4, ffn_dim=128,
        word_embed_proj_dim=64, vocab_size=VOCAB, max_position_embeddings=64, dropout=0.0,
        attention_dropout=0.0, bos_token_id=0, eos_token_id=0, pad_token_id=0))


def _gpt_neox():  # parallel residual, rotary on a quarter of each head
    return T.GPTNeoXForCausalLM(T.GPTNeoXConfig(
        num_hidden_layers=2, hidden_size=64, num_attention_heads=4, intermediate_size=128,
        vocab_size=VOCAB, max_position_embeddings=64, hidden_dropout=0.0, attention_dropout=0.0,
        bos_token_id=0, eos_token_id=0, pad_token_id=0))


def _gptj():  # rotary on interleaved pairs: x[..., ::2] (a strided slice_scatter backward)
    return T.GPTJForCausalLM(T.GPTJConfig(
        n_layer=2, n_embd=64, n_head=4, rotary_dim=8, vocab_size=VOCAB, n_positions=64,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0,
        pad_token_id=0))


def _phi3():  # fused qkv and gate-up projections
    return T.Phi3ForCausalLM(T.Phi3Config(
        num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
        intermediate_size=128, vocab_size=VOCAB, max_position_embeddings=64, resid_pdrop=0.0,
        embd_pdrop=0.0, attention_dropout=0.0, bos_token_id=0, eos_token_id=0, pad_token_id=0))


def _gemma2():  # logit soft-capping, sliding-window layers, scaled embeddings
    return T.Gemma2ForCausalLM(T.Gemma2Config(
        num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
        head_dim=16, intermediate_size=128, vocab_size=VOCAB, max_position_embeddings=64,
        bos_token_id=0, eos_token_id=0, pad_token_id=0))


def _falcon():  # multi-query attention, parallel attention and MLP
    return T.FalconForCausalLM(T.FalconConfig(
        num_hidden_layers=2, hidden_size=64, num_attention_heads=4, vocab_size=VOCAB,
        hidden_dropout=0.0, attention_dropout=0.0, bos_token_id=0, eos_token_id=0,
        pad_token_id=0))


def _t5():  # encoder-decoder, relative position buckets, labels shifted into the decoder
    return T.T5ForConditionalGeneration(T.T5Config(
        num_layers=2, num_decoder_layers=2, d_model=64, d_kv=16, num_heads=4, d_ff=128,
        vocab_size=VOCAB, dropout_rate=0.0, decoder_start_token_id=0, pad_token_id=0,
        eos_token_id=1))


def _distilbert():
    return T.DistilBertForMaskedLM(T.DistilBertConfig(
        n_layers=2, dim=64, n_heads=4, hidden_dim=128, vocab_size=VOCAB,
        max_position_embeddings=64, dropout=0.0, attention_dropout=0.0, pad_token_id=0))


def _bloom():  # ALiBi; its GELU is a torch.autograd.Function in training
    return T.BloomForCausalLM(T.BloomConfig(
        n_layer=2, hidden_size=64, n_head=4, vocab_size=VOCAB, hidden_dropout=0.0,
        attention_dropout=0.0, bos_token_id=0, eos_token_id=0, pad_token_id=0))


def _mixtral():  # mixture of experts: top-2 of 4 routing, sort, histc, grouped GEMMs
    return T.MixtralForCausalLM(T.MixtralConfig(
        num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
        intermediate_size=128, num_local_experts=4, num_experts_per_tok=2, vocab_size=VOCAB,
        max_position_embeddings=64, bos_token_id=0, eos_token_id=0, pad_token_id=0))


def _qwen2_moe():  # routed experts beside a gated shared expert
    return T.Qwen2MoeForCausalLM(T.Qwen2MoeConfig(
        num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
        intermediate_size=128, moe_intermediate_size=32, shared_expert_intermediate_size=64,
        num_experts=4, num_experts_per_tok=2, vocab_size=VOCAB, max_position_embeddings=64,
        bos_token_id=0, eos_token_id=0, pad_token_id=0))


MODELS = {"gpt2": _gpt2, "llama": _llama, "bert": _bert, "mistral": _mistral, "qwen2": _qwen2,
          "roberta": _roberta, "opt": _opt, "gpt_neox": _gpt_neox, "gptj": _gptj,
          "phi3": _phi3, "gemma2": _gemma2, "falcon": _falcon, "t5": _t5,
          "distilbert": _distilbert, "mixtral": _mixtral, "qwen2_moe": _qwen2_moe}
# Through the backend only: from_torch refuses a torch.autograd.Function
# (test_from_torch_refuses_bloom_naming_its_autograd_function).
BACKEND_ONLY = {"bloom": _bloom}


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
    model = WithLoss({**MODELS, **BACKEND_ONLY}[name]())
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


def _backend_losses(model, batches):
    """The losses of AdamW steps through torch.compile(backend="tilefuse"),
    every graph compiled whole (no partition, nothing left to PyTorch)."""
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
    return got


pytestmark = pytest.mark.usefixtures("fresh_torch_backend")


@pytest.mark.parametrize("name", list(MODELS) + list(BACKEND_ONLY))
def test_hf_model_trains_through_the_backend_like_eager(name):
    model, twin = _twins(name)
    batches = [_inputs(s) for s in range(STEPS)]
    want = _eager_losses(twin, batches)
    explanation = tilefuse.explain(model, *batches[0])
    assert explanation.ok, f"{name}:\n{explanation}"
    _check(name, "torch.compile(backend='tilefuse')", _backend_losses(model, batches), want)


@pytest.mark.parametrize("name", list(MODELS))
def test_hf_model_trains_through_from_torch_like_eager(name):
    model, twin = _twins(name)
    batches = [_inputs(s) for s in range(STEPS)]
    want = _eager_losses(twin, batches)
    step = tilefuse.from_torch(model, batches[0],
                               torch.optim.AdamW(model.parameters(), lr=1e-3))
    got = [step(*b) for b in batches]
    _check(name, "from_torch", got, want)


def test_from_torch_refuses_bloom_naming_its_autograd_function():
    """BLOOM's training GELU is a torch.autograd.Function with its own
    backward, which from_torch (it differentiates the captured forward
    itself) cannot follow: refused, naming the line and the way out (the
    backend, which trains it like eager above)."""
    model, _ = _twins("bloom")
    batch = _inputs(0)
    with pytest.raises(tilefuse.CompileError) as e:
        tilefuse.from_torch(model, batch, torch.optim.AdamW(model.parameters(), lr=1e-3))
    text = str(e.value)
    assert "torch.autograd.Function" in text and "modeling_bloom.py" in text, text
    assert "backend='tilefuse'" in text, text


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


class AudioClassifierLoss(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, audio, labels):
        return self.model(input_values=audio, labels=labels).loss


def test_wav2vec2_trains_through_both_paths_like_eager():
    """wav2vec2 (raw audio in): strided 1-D convolutions with group norm,
    a weight-normalised positional convolution (aten._weight_norm_interface
    and its backward), attention and mean pooling; 10 AdamW steps through
    both paths, every graph converted whole, each loss within LOSS_RTOL of
    eager's."""
    torch.manual_seed(0)
    model = AudioClassifierLoss(T.Wav2Vec2ForSequenceClassification(T.Wav2Vec2Config(
        num_hidden_layers=2, hidden_size=64, num_attention_heads=4, intermediate_size=128,
        conv_dim=(32, 32), conv_stride=(5, 2), conv_kernel=(10, 3), num_conv_pos_embeddings=16,
        num_conv_pos_embedding_groups=4, num_labels=4, hidden_dropout=0.0, attention_dropout=0.0,
        activation_dropout=0.0, feat_proj_dropout=0.0, final_dropout=0.0, layerdrop=0.0,
        mask_time_prob=0.0)))
    model.train()
    g = torch.Generator().manual_seed(1)
    batches = [(torch.randn(BATCH, 400, generator=g), torch.randint(0, 4, (BATCH,), generator=g))
               for _ in range(STEPS)]
    want = _eager_losses(copy.deepcopy(model), batches)
    explanation = tilefuse.explain(model, *batches[0])
    assert explanation.ok, explanation

    third = copy.deepcopy(model)
    step = tilefuse.from_torch(third, batches[0], torch.optim.AdamW(third.parameters(), lr=1e-3))
    _check("wav2vec2", "from_torch", [step(*b) for b in batches], want)

    _check("wav2vec2", "torch.compile(backend='tilefuse')", _backend_losses(model, batches), want)
