"""One rank of the data-parallel check (run by torchrun, gloo): an
nn.Module compiled by the tilefuse backend and wrapped in DDP trains as
the same module in eager DDP, from the same parameters, each rank on its
own batches; every rank prints one line "rank R: ..." with the largest
parameter difference, its loss trajectory difference and the backend's
stats."""
import copy
import os
import sys

import torch
import torch.distributed as dist

import tilefuse  # noqa: F401  (the backend's stats below)
from tilefuse.torch_integration import stats

STEPS = 4


def main():
    dist.init_process_group("gloo")
    torch.set_num_threads(1)
    rank = dist.get_rank()
    torch.manual_seed(0)  # the same parameters on every rank
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(),
                                torch.nn.LayerNorm(32), torch.nn.Linear(32, 4))
    twin = copy.deepcopy(model)
    compiled = torch.nn.parallel.DistributedDataParallel(
        torch.compile(model, backend="tilefuse"))
    eager = torch.nn.parallel.DistributedDataParallel(twin)
    opts = [torch.optim.AdamW(m.parameters(), lr=1e-2) for m in (compiled, eager)]
    worst_loss = 0.0
    for t in range(STEPS):
        g = torch.Generator().manual_seed(100 * t + rank)  # each rank its own batch
        x, y = torch.randn(8, 16, generator=g), torch.randint(0, 4, (8,), generator=g)
        losses = []
        for m, opt in zip((compiled, eager), opts):
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(m(x), y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        worst_loss = max(worst_loss, abs(losses[0] - losses[1]) / abs(losses[1]))
    # Both replicas stay identical across ranks (DDP averaged the gradients).
    diff = max((a - b).abs().max().item() for a, b in zip(model.parameters(),
                                                          twin.parameters()))
    gathered = [torch.zeros(1) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, model[0].weight.sum().reshape(1))
    spread = max(g.item() for g in gathered) - min(g.item() for g in gathered)
    print(f"rank {rank}: param_diff {diff:.3g} loss_rel {worst_loss:.3g} "
          f"replica_spread {spread:.3g} compiled {stats.compiled} partitioned "
          f"{stats.partitioned} eager {stats.eager} unsupported {len(stats.unsupported)}",
          flush=True)
    # Shut down in order: the DDP wrappers (their reducers hold the process
    # group) go first, and no rank tears its group down while the other may
    # still be in a collective (an abort at exit, std::terminate on a
    # joinable thread, was seen once after every check had passed).
    del compiled, eager
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
