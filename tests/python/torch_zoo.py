"""A small zoo of torch.nn.Modules for the PyTorch front-end tests
(test_torch_frontend.py): each model returns its scalar training loss when
given targets, and has a `make_inputs(seed)` giving example inputs.

* GPT: nanoGPT-style decoder (token + position embeddings, pre-LN blocks,
  causal self-attention with explicit q @ k^T and a tril mask buffer,
  GELU(tanh) MLP, final LN, LM head tied to the token embedding, dropout
  p=0 modules kept in training mode, cross-entropy).
* MLPClassifier: Flatten, Linear, ReLU, Linear, log_softmax + nll_loss.
* Recommender: user and item embedding tables, dot-product interaction and
  a small MLP, BCE-with-logits loss.
* LgammaModel: an MLP with torch.lgamma in the middle (an op tilefuse does
  not convert), to exercise the partitioned fallback.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


# ---------------------------------------------------------------------------
# (a) GPT-2 style
# ---------------------------------------------------------------------------

class CausalSelfAttention(nn.Module):
    def __init__(self, d, n_head, seq, dropout=0.0):
        super().__init__()
        assert d % n_head == 0
        self.c_attn = nn.Linear(d, 3 * d)
        self.c_proj = nn.Linear(d, d)
        self.attn_dropout = nn.Dropout(dropout)
        self.resid_dropout = nn.Dropout(dropout)
        self.n_head = n_head
        self.d = d
        self.register_buffer("bias", torch.tril(torch.ones(seq, seq)).view(1, 1, seq, seq))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.d, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        att = self.attn_dropout(att)
        y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, d, dropout=0.0):
        super().__init__()
        self.c_fc = nn.Linear(d, 4 * d)
        self.gelu = nn.GELU(approximate="tanh")
        self.c_proj = nn.Linear(4 * d, d)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, d, n_head, seq, dropout=0.0):
        super().__init__()
        self.ln_1 = nn.LayerNorm(d)
        self.attn = CausalSelfAttention(d, n_head, seq, dropout)
        self.ln_2 = nn.LayerNorm(d)
        self.mlp = MLP(d, dropout)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlp(self.ln_2(x))
        return x


class GPT(nn.Module):
    vocab, seq, d, n_head, n_layer, batch = 97, 16, 32, 2, 2, 3

    def __init__(self, dropout=0.0):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(self.vocab, self.d),
            wpe=nn.Embedding(self.seq, self.d),
            drop=nn.Dropout(dropout),
            h=nn.ModuleList([Block(self.d, self.n_head, self.seq, dropout)
                             for _ in range(self.n_layer)]),
            ln_f=nn.LayerNorm(self.d),
        ))
        self.lm_head = nn.Linear(self.d, self.vocab, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # weight tying
        self.apply(self._init_weights)
        for pn, p in self.named_parameters():
            if pn.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * self.n_layer))

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets=None):
        b, t = idx.size()
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        for block in self.transformer.h:
            x = block(x)
        x = self.transformer.ln_f(x)
        logits = self.lm_head(x)
        if targets is None:
            return logits
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))

    @classmethod
    def make_inputs(cls, seed, batch=None):
        g = torch.Generator().manual_seed(seed)
        b = batch or cls.batch
        idx = torch.randint(0, cls.vocab, (b, cls.seq), generator=g)
        targets = torch.randint(0, cls.vocab, (b, cls.seq), generator=g)
        return idx, targets


# ---------------------------------------------------------------------------
# (b) MLP classifier
# ---------------------------------------------------------------------------

class MLPClassifier(nn.Module):
    image, hidden, classes, batch = (1, 6, 6), 32, 10, 8

    def __init__(self):
        super().__init__()
        n_in = math.prod(self.image)
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(n_in, self.hidden), nn.ReLU(),
                                 nn.Linear(self.hidden, self.classes))

    def forward(self, x, y=None):
        logp = F.log_softmax(self.net(x), dim=-1)
        if y is None:
            return logp
        return F.nll_loss(logp, y)

    @classmethod
    def make_inputs(cls, seed, batch=None):
        g = torch.Generator().manual_seed(seed)
        b = batch or cls.batch
        x = torch.randn((b, *cls.image), generator=g)
        y = torch.randint(0, cls.classes, (b,), generator=g)
        return x, y


# ---------------------------------------------------------------------------
# (c) Embedding recommender
# ---------------------------------------------------------------------------

class Recommender(nn.Module):
    users, items, dim, hidden, batch = 50, 40, 8, 16, 12

    def __init__(self):
        super().__init__()
        self.user = nn.Embedding(self.users, self.dim)
        self.item = nn.Embedding(self.items, self.dim)
        self.mlp = nn.Sequential(nn.Linear(2 * self.dim + 1, self.hidden), nn.ReLU(),
                                 nn.Linear(self.hidden, 1))

    def forward(self, u, i, label=None):
        eu, ei = self.user(u), self.item(i)
        dot = (eu * ei).sum(-1, keepdim=True)
        logit = self.mlp(torch.cat([eu, ei, dot], dim=-1)).squeeze(-1) + dot.squeeze(-1)
        if label is None:
            return logit
        return F.binary_cross_entropy_with_logits(logit, label)

    @classmethod
    def make_inputs(cls, seed, batch=None):
        g = torch.Generator().manual_seed(seed)
        b = batch or cls.batch
        u = torch.randint(0, cls.users, (b,), generator=g)
        i = torch.randint(0, cls.items, (b,), generator=g)
        label = torch.randint(0, 2, (b,), generator=g).float()
        return u, i, label


# ---------------------------------------------------------------------------
# (d) An op tilefuse lacks
# ---------------------------------------------------------------------------

class LgammaModel(nn.Module):
    n_in, hidden, classes, batch = 12, 16, 5, 6

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(self.n_in, self.hidden)
        self.fc2 = nn.Linear(self.hidden, self.classes)

    def forward(self, x, y=None):
        h = torch.sigmoid(self.fc1(x))
        h = torch.lgamma(0.5 + h)  # tilefuse has no lgamma: runs in PyTorch
        logits = self.fc2(h)
        if y is None:
            return logits
        return F.cross_entropy(logits, y)

    @classmethod
    def make_inputs(cls, seed, batch=None):
        g = torch.Generator().manual_seed(seed)
        b = batch or cls.batch
        x = torch.randn((b, cls.n_in), generator=g)
        y = torch.randint(0, cls.classes, (b,), generator=g)
        return x, y


ZOO = {"gpt": GPT, "mlp": MLPClassifier, "recommender": Recommender, "lgamma": LgammaModel}
