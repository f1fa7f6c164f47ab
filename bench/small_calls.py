#!/usr/bin/env python3
"""Small training steps, where per-call overhead is the cost: tilefuse
against PyTorch eager, same run, CPU.

    PYTHONPATH=build/python python3 bench/small_calls.py [--steps 200] [--rounds 5]

- black_patch (WORKLOADS.md): 81 -> 56 -> ReLU -> 1 -> sigmoid, BCE, SGD
  lr 1e-3, batch 1 and 64;
- mlp_mnist: 784 -> 64 -> ReLU -> 64 -> ReLU -> 10, log_softmax + NLL,
  Adam lr 2e-4, batch 32 (dropout 0).

Per workload the median step time over --rounds rounds of --steps steps
of PyTorch eager (forward, backward, torch.optim) and of tilefuse.from_torch
of the same module from the same parameters (one compiled step, torch
tensors in, the loss out), and their ratio.
"""
import argparse
import statistics
import time

import torch

import tilefuse


def black_patch():
    return torch.nn.Sequential(torch.nn.Linear(81, 56), torch.nn.ReLU(), torch.nn.Linear(56, 1),
                               torch.nn.Sigmoid())


def mlp_mnist():
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 64), torch.nn.ReLU(),
                               torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10),
                               torch.nn.LogSoftmax(dim=1))


def cases():
    g = torch.Generator().manual_seed(0)
    for batch in (1, 64):
        x = torch.randn(batch, 81, generator=g)
        y = torch.randint(0, 2, (batch, 1), generator=g).float()
        yield (f"black_patch b{batch}", black_patch,
               lambda m, x, y: torch.nn.functional.binary_cross_entropy(m(x), y),
               lambda ps: torch.optim.SGD(ps, lr=1e-3), (x, y))
    x = torch.randn(32, 1, 28, 28, generator=g)
    y = torch.randint(0, 10, (32,), generator=g)
    yield ("mlp_mnist b32", mlp_mnist, lambda m, x, y: torch.nn.functional.nll_loss(m(x), y),
           lambda ps: torch.optim.Adam(ps, lr=2e-4), (x, y))


def median_step(fn, steps, rounds):
    fn()
    out = []
    for _ in range(rounds):
        t = time.perf_counter()
        for _ in range(steps):
            fn()
        out.append((time.perf_counter() - t) / steps)
    return statistics.median(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"{'workload':18s} {'eager us':>9s} {'from_torch us':>14s} {'/eager':>7s}")
    for name, make, loss_fn, make_opt, inputs in cases():
        torch.manual_seed(0)
        eager = make()
        ours = make()
        ours.load_state_dict(eager.state_dict())
        opt = make_opt(eager.parameters())

        def eager_step():
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(eager, *inputs)
            loss.backward()
            opt.step()
            return loss.item()
        step = tilefuse.from_torch(ours, inputs, make_opt(ours.parameters()), loss_fn=loss_fn,
                                   device="cpu")
        t_eager = median_step(eager_step, args.steps, args.rounds)
        t_ours = median_step(lambda: step(*inputs), args.steps, args.rounds)
        print(f"{name:18s} {t_eager * 1e6:9.1f} {t_ours * 1e6:14.1f} {t_ours / t_eager:7.2f}",
              flush=True)


if __name__ == "__main__":
    main()
