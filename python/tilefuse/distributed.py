"""Data-parallel training steps over torch.distributed.

A compiled step names its process group symbolically (`"dp"`, and the size
it was compiled for); `bind()` attaches the torch.distributed process group
the user initialised (gloo on CPUs), whose collectives then run the step's
`graph.*_start` / `graph.collective_wait` pairs. tilefuse has no transport of
its own: launching, rendezvous (one node or many, `torchrun`), timeouts and
dead ranks are torch.distributed's.
"""
import hashlib

import numpy as np

from ._runtime import CompileError

GROUP = "dp"  # the data-parallel group's name in a compiled step


def _dist():
    try:
        import torch.distributed as dist
    except ImportError as e:  # pragma: no cover (torch is a test dependency)
        raise CompileError("parallel= needs PyTorch (torch.distributed runs the collectives)") from e
    return dist


def world(process_group=None):
    """(torch.distributed, group, rank, size) of `process_group` (None: the
    default group); CompileError when torch.distributed is not initialised."""
    dist = _dist()
    if not dist.is_available() or not dist.is_initialized():
        raise CompileError(
            "parallel= needs an initialised torch.distributed process group: call "
            "torch.distributed.init_process_group(\"gloo\") in every process first (torchrun "
            "sets up the rendezvous)")
    group = process_group if process_group is not None else dist.group.WORLD
    return dist, group, dist.get_rank(group), dist.get_world_size(group)


class TorchCommunicator:
    """The runtime's Communicator (runtime/Communicator.h) over a
    torch.distributed process group: each collective is started with
    async_op=True on tensors viewing the step's own buffers (no copies), so
    it runs while the step computes, and waited for at its wait step."""

    def __init__(self, process_group=None):
        import torch
        self._torch = torch
        self._dist, self._group, self._rank, self._size = world(process_group)
        self._works = {}
        self._next = 0
        ops = self._dist.ReduceOp
        self._ops = {"sum": ops.SUM, "max": ops.MAX, "min": ops.MIN}

    def rank(self):
        return self._rank

    def size(self):
        return self._size

    def _tensor(self, array, dtype):
        t = self._torch.from_numpy(array)
        return t.view(self._torch.bfloat16) if dtype == "bf16" else t

    def start(self, kind, reduce, root, input, output, dtype):
        dist, group = self._dist, self._group
        src, dst = self._tensor(input, dtype), self._tensor(output, dtype)
        if kind == "all_reduce":
            work = dist.all_reduce(dst, op=self._ops[reduce], group=group, async_op=True)
        elif kind == "broadcast":
            work = dist.broadcast(dst, src=dist.get_global_rank(group, root), group=group,
                                  async_op=True)
        elif kind == "all_gather":
            work = dist.all_gather_into_tensor(dst, src, group=group, async_op=True)
        elif kind == "reduce_scatter":
            work = self._reduce_scatter(dst, src, reduce)
        else:
            raise CompileError(f"unknown collective {kind!r}")
        handle = self._next
        self._next += 1
        self._works[handle] = work
        return handle

    def _reduce_scatter(self, dst, src, reduce):
        dist, group = self._dist, self._group
        try:
            return dist.reduce_scatter_tensor(dst, src, op=self._ops[reduce], group=group,
                                              async_op=True)
        except (RuntimeError, NotImplementedError):
            # Backends without reduce-scatter (older gloo): the whole
            # reduction, then this rank's rows (twice the bytes on the wire).
            whole = src.clone()
            dist.all_reduce(whole, op=self._ops[reduce], group=group)
            n = dst.numel()
            dst.copy_(whole[self._rank * n:(self._rank + 1) * n])
            return None

    def wait(self, handle):
        work = self._works.pop(handle)
        if work is not None:
            work.wait()


SHARDED = ("zero1", "zero2", "zero3")


def bind(executable, process_group=None):
    """Binds the step's data-parallel group to `process_group` (None: the
    default group). Its size must be the one the step was compiled for. On
    the CPU the group's collectives run through torch.distributed (gloo);
    on a GPU through NCCL, called by the executor on its own streams (so
    they are captured in the step's CUDA graph), its communicator set up
    with a unique id rank 0 makes and the process group hands to the others."""
    device = getattr(executable, "device", "cpu")
    if not str(device).startswith("cuda"):
        comm = TorchCommunicator(process_group)
        executable.set_communicator(GROUP, comm)
        return comm
    from . import _runtime
    dist, group, rank, size = world(process_group)
    ids = [_runtime.nccl_unique_id() if rank == 0 else None]
    dist.broadcast_object_list(ids, src=dist.get_global_rank(group, 0), group=group)
    executable.set_nccl_communicator(GROUP, ids[0], rank, size)
    return None


def check_same_program(text, process_group=None):
    """Raises CompileError on every rank unless all ranks of the group
    compiled the same program (its IR text): ranks running different
    programs would pair their collectives wrongly and hang or corrupt
    gradients. One all-gather of a 32-byte digest."""
    import torch
    dist, group, rank, size = world(process_group)
    digest = np.frombuffer(hashlib.sha256(text.encode()).digest(), dtype=np.uint8).copy()
    mine = torch.from_numpy(digest)
    every = [torch.empty_like(mine) for _ in range(size)]
    dist.all_gather(every, mine, group=group)
    differ = [r for r, d in enumerate(every) if not torch.equal(d, every[0])]
    if differ:
        raise CompileError(
            f"rank(s) {differ} compiled a different training step than rank 0 (program hashes "
            f"differ; this is rank {rank}): every rank must compile the same model, loss, "
            "optimizer, batch shapes and world size")


def broadcast_arrays(arrays, process_group=None, root=0):
    """The arrays of rank `root` on every rank (numpy in, numpy out), as
    DistributedDataParallel broadcasts the module's state at construction."""
    import torch
    dist, group, _, _ = world(process_group)
    out = []
    for a in arrays:
        t = torch.from_numpy(np.ascontiguousarray(a).copy())
        dist.broadcast(t, src=dist.get_global_rank(group, root), group=group)
        out.append(t.numpy())
    return out


class ShardLayout:
    """Where parameters live in a ZeRO step's shards (the compiled step's
    `shard_layout`: parameter indices per shard). Shard b of rank r holds
    elements [r * m, (r + 1) * m) of its parameters flattened and
    concatenated, zero-padded to world * m elements."""

    def __init__(self, members, shapes, dtypes, world):
        self.members = [list(m) for m in members]
        self.shapes, self.dtypes, self.world = list(shapes), list(dtypes), int(world)
        self.sizes = [sum(int(np.prod(shapes[i], dtype=np.int64)) for i in m)
                      for m in self.members]
        self.shard_sizes = [-(-n // self.world) for n in self.sizes]

    def split(self, arrays, rank):
        """This rank's shards of whole per-parameter arrays."""
        out = []
        for members, m in zip(self.members, self.shard_sizes):
            flat = np.concatenate([np.ravel(arrays[i]) for i in members])
            padded = np.zeros(m * self.world, dtype=flat.dtype)
            padded[:flat.size] = flat
            out.append(padded[rank * m:(rank + 1) * m].copy())
        return out

    def join(self, whole_shards):
        """Per-parameter arrays from each shard's whole (gathered) values."""
        out = [None] * len(self.shapes)
        for members, flat in zip(self.members, whole_shards):
            offset = 0
            for i in members:
                n = int(np.prod(self.shapes[i], dtype=np.int64))
                out[i] = flat[offset:offset + n].reshape(self.shapes[i]).astype(self.dtypes[i])
                offset += n
        return out


def all_gather_array(array, process_group=None):
    """Every rank's `array` (1-D, the same size on every rank) concatenated
    in rank order, on every rank."""
    import torch
    dist, group, _, size = world(process_group)
    mine = torch.from_numpy(np.ascontiguousarray(array).copy())
    every = [torch.empty_like(mine) for _ in range(size)]
    dist.all_gather(every, mine, group=group)
    return np.concatenate([t.numpy() for t in every])


def save_sharded(step, directory):
    """A sharded checkpoint of a ZeRO step (collective: every rank calls
    it): each rank's state_dict() in rank<r>.npz, and index.json (world size,
    shards, parameter names, shapes and dtypes) from rank 0. load_sharded
    restores it into a step compiled the same way, at any world size."""
    import json
    import os
    layout, group = step._shards, step._parallel[1]
    dist, grp, rank, size = world(group)
    os.makedirs(directory, exist_ok=True)
    np.savez(os.path.join(directory, f"rank{rank}.npz"), **step._shard_state_dict())
    if rank == 0:
        index = {"world": size, "mode": step._parallel[0], "shards": layout.members,
                 "names": step._leaf_names(), "shapes": [list(s) for s in layout.shapes],
                 "dtypes": [str(np.dtype(d)) for d in layout.dtypes],
                 "sections": ["params"] + list(step._state_names)}
        with open(os.path.join(directory, "index.json"), "w") as f:
            json.dump(index, f)
    dist.barrier(group=grp)


def load_sharded(step, directory):
    """Restores save_sharded's checkpoint into `step` (collective). At the
    world size it was saved with, each rank loads its own file (bit for
    bit); at another, the shards are joined and split again for this one.
    CompileError when the checkpoint's parameters or shards differ."""
    import json
    import os
    from ._runtime import CompileError
    with open(os.path.join(directory, "index.json")) as f:
        index = json.load(f)
    layout = step._shards
    _, _, rank, size = world(step._parallel[1])
    if (index["shards"] != layout.members or index["names"] != step._leaf_names() or
            [tuple(s) for s in index["shapes"]] != [tuple(s) for s in layout.shapes]):
        raise CompileError(f"load_sharded: the checkpoint in {directory} holds other parameters "
                           "or shards than this step (compile it from the same model and "
                           "bucket_bytes)")
    if index["world"] == size:
        state = dict(np.load(os.path.join(directory, f"rank{rank}.npz")))
        step.load_state_dict(state)
        return
    old = [dict(np.load(os.path.join(directory, f"rank{r}.npz"))) for r in range(index["world"])]
    state = dict(old[0])
    for section in index["sections"]:
        for b, (n, m) in enumerate(zip(layout.sizes, layout.shard_sizes)):
            key = f"{section}/shard{b}"
            whole = np.concatenate([o[key] for o in old])[:n]
            padded = np.zeros(m * size, dtype=whole.dtype)
            padded[:n] = whole
            state[key] = padded[rank * m:(rank + 1) * m].copy()
    step.load_state_dict(state)
