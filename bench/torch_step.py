#!/usr/bin/env python3
"""A GPT-2-style nn.Module's training step four ways, same run, CPU.

    PYTHONPATH=build/python python3 bench/torch_step.py [--steps 20] [--rounds 3] [--threads 2]
        [--model gpt2_mini|hf-gpt2-small|hf-mixtral] [--precision f32|bf16]

The model (gpt2_mini: tests/python/torch_zoo.py's GPT at gpt2_mini's sizes:
vocab 1024, seq 128, d 128, 4 heads, 2 layers, batch 4, tied LM head,
dropout 0; hf-gpt2-small: HuggingFace transformers' GPT2LMHeadModel at GPT-2
small's shape, 12 layers, d 768, 12 heads, vocab 50257, seq 512, batch 2,
dropout 0, its own loss, SDPA attention; hf-mixtral: transformers'
MixtralForCausalLM, 2 layers, d 512, 8 heads (4 key/value heads), 8
experts of width 1024, top-2 routing, vocab 1024, seq 256, batch 2, its own
loss) and AdamW (lr 1e-3, decay 0.1 on 2-d weights, 0 on the rest), from
the same parameters and batch:

- eager: PyTorch forward, backward, torch.optim.AdamW (foreach);
- inductor: torch.compile(model) (forward and backward by Inductor), the
  same optimizer step;
- backend=tilefuse: torch.compile(model, backend="tilefuse"), the same
  optimizer step;
- from_torch: tilefuse.from_torch(model, inputs, optimizer): the whole step
  (forward, backward, AdamW) as one compiled tilefuse step;
- from_torch dense (hf-mixtral only): the same with TILEFUSE_GROUPED_GEMM=0,
  every grouped expert product written as one dense GEMM over all experts.

--precision bf16: every path in bf16 mixed precision from the same f32
parameters: the PyTorch paths run the model under torch.autocast("cpu",
bfloat16) (AdamW on the f32 parameters), from_torch with precision="bf16"
(its autocast: GEMM-class ops in bf16, f32 master weights and optimizer).

Per path: the cold compile (first call, compile included) and the median
step time over --rounds rounds of --steps steps, taken in turn so noise
hits all alike, with each path's time relative to from_torch.
"""
import argparse
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir,
                                "tests", "python"))
import torch_zoo  # noqa: E402

import tilefuse  # noqa: E402


def groups(model):
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    return [{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}]


def torch_path(model, compile_backend=None, bf16=False):
    """The step function of forward + backward + AdamW."""
    net = torch.compile(model, backend=compile_backend, dynamic=False) if compile_backend \
        else model
    opt = torch.optim.AdamW(groups(model), lr=1e-3)

    def step(*inputs):
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = net(*inputs)
        loss.backward()
        opt.step()
        return loss.item()
    return step


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--skip-inductor", action="store_true",
                    help="leave out torch.compile's default backend (its cold compile is slow)")
    ap.add_argument("--model", default="gpt2_mini",
                    choices=["gpt2_mini", "hf-gpt2-small", "hf-mixtral"])
    ap.add_argument("--precision", default="f32", choices=["f32", "bf16"])
    args = ap.parse_args()
    bf16 = args.precision == "bf16"
    torch.set_num_threads(args.threads)
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    torch.manual_seed(0)

    if args.model == "gpt2_mini":
        class GPT(torch_zoo.GPT):  # gpt2_mini's sizes
            vocab, seq, d, n_head, n_layer, batch = 1024, 128, 128, 4, 2, 4
        make = GPT
        inputs = GPT.make_inputs(1)
        title = "GPT-2-style step (gpt2_mini sizes)"
    elif args.model == "hf-mixtral":
        import transformers

        class HFMixtral(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.m = transformers.MixtralForCausalLM(transformers.MixtralConfig(
                    num_hidden_layers=2, hidden_size=512, num_attention_heads=8,
                    num_key_value_heads=4, intermediate_size=1024, num_local_experts=8,
                    num_experts_per_tok=2, vocab_size=1024, max_position_embeddings=256,
                    bos_token_id=0, eos_token_id=0, pad_token_id=0))

            def forward(self, ids):
                return self.m(input_ids=ids, labels=ids).loss
        make = HFMixtral
        inputs = (torch.randint(0, 1024, (2, 256), generator=torch.Generator().manual_seed(1)),)
        title = ("HF MixtralForCausalLM step (2 layers, d 512, 8 experts of 1024, top-2, "
                 "seq 256, batch 2)")
    else:
        import transformers

        class HFGPT2(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.m = transformers.GPT2LMHeadModel(transformers.GPT2Config(
                    n_layer=12, n_embd=768, n_head=12, vocab_size=50257, n_positions=1024,
                    resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0))

            def forward(self, ids):
                return self.m(input_ids=ids, labels=ids).loss
        make = HFGPT2
        inputs = (torch.randint(0, 50257, (2, 512), generator=torch.Generator().manual_seed(1)),)
        title = "HF GPT2LMHeadModel step (GPT-2 small: 12 layers, d 768, seq 512, batch 2)"

    base = make()

    def fresh():
        m = make()
        m.load_state_dict(base.state_dict())
        return m

    steps, cold = {}, {}
    paths = [("eager", None), ("backend=tilefuse", "tilefuse")]
    if not args.skip_inductor:
        paths.insert(1, ("inductor", "inductor"))
    for name, backend in paths:
        fn = torch_path(fresh(), backend, bf16)
        t = time.perf_counter()
        fn(*inputs)
        cold[name] = time.perf_counter() - t
        steps[name] = (lambda f: lambda: f(*inputs))(fn)
    def from_torch_path(name):
        model = fresh()
        t = time.perf_counter()
        step = tilefuse.from_torch(model, inputs, torch.optim.AdamW(groups(model), lr=1e-3),
                                   device="cpu", precision="bf16" if bf16 else "fp32")
        step(*inputs)
        cold[name] = time.perf_counter() - t
        steps[name] = lambda: step(*inputs)

    from_torch_path("from_torch")
    if args.model == "hf-mixtral":
        os.environ["TILEFUSE_GROUPED_GEMM"] = "0"  # part of the compile's key
        from_torch_path("from_torch dense")
        del os.environ["TILEFUSE_GROUPED_GEMM"]

    samples = {k: [] for k in steps}
    for _ in range(args.rounds):
        for name, fn in steps.items():
            fn()
            times = []
            for _ in range(args.steps):
                t = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t)
            samples[name].append(statistics.median(times))
    ref = statistics.median(samples["from_torch"])
    print(f"{title}, {args.precision}, {args.threads} threads, torch {torch.__version__}")
    print(f"{'path':18s} {'cold compile s':>15s} {'step ms':>9s} {'/ from_torch':>13s}")
    for name in steps:
        t = statistics.median(samples[name])
        print(f"{name:18s} {cold[name]:15.2f} {t * 1e3:9.2f} {t / ref:13.2f}")


if __name__ == "__main__":
    main()
