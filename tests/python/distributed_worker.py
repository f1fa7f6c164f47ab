"""One rank of the data-parallel tests (test_distributed.py): joins a gloo
group through a file store, trains on its part of each batch and writes what
the test compares. Run as `python distributed_worker.py CASE RANK WORLD STORE OUT`,
or under torchrun (rank, world size and rendezvous from its environment)."""
import datetime
import gc
import os
import sys

import numpy as np

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TILEFUSE_NUM_THREADS", "1")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import distributed_cases  # noqa: E402


def main():
    case, out = sys.argv[1], sys.argv[-1]
    torch.set_num_threads(1)
    if "TORCHELASTIC_RUN_ID" in os.environ or "LOCAL_RANK" in os.environ:
        dist.init_process_group("gloo")
    else:
        rank, world, store = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
        dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank,
                                world_size=world)
    try:
        result = distributed_cases.run_rank(case, dist.get_rank(), dist.get_world_size())
    except Exception as e:  # noqa: BLE001 (the test reads the message)
        result = {"error": np.array(f"{type(e).__name__}: {e}")}
    np.savez(f"{out}.rank{dist.get_rank()}.npz", **result)
    # Shut down in order: eager DDP wrappers the case made (their reducers
    # hold the process group; reference cycles can keep them alive) are
    # collected first, and no rank tears its group down while the other may
    # still be in a collective (an abort at exit, std::terminate on a
    # joinable thread, was seen once after a case had written its results).
    gc.collect()
    if "error" not in result:
        try:  # bounded: a rank that failed may never arrive
            dist.monitored_barrier(timeout=datetime.timedelta(seconds=60))
        except RuntimeError:
            pass
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
