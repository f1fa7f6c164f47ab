"""The models the data-parallel tests train, the same in every process:
`run_rank` is one rank of a data-parallel run (distributed_worker.py),
`run_single` one process training on the whole batches, the reference."""
import numpy as np

import tilefuse
import tilefuse.functional as F
from tilefuse import optim
from tilefuse import workloads as W

STEPS = 10


def _mlp():
    rng = np.random.default_rng(0)
    params = {"w1": rng.standard_normal((24, 40)).astype(np.float32) * 0.2,
              "b1": np.zeros(40, np.float32),
              "w2": rng.standard_normal((40, 40)).astype(np.float32) * 0.2,
              "b2": np.zeros(40, np.float32),
              "w3": rng.standard_normal((40, 7)).astype(np.float32) * 0.2}
    batches = [{"x": rng.standard_normal((16, 24)).astype(np.float32),
                "y": rng.integers(0, 7, 16)} for _ in range(STEPS)]

    def loss_fn(p, b):
        h = F.gelu(b["x"] @ p["w1"] + p["b1"])
        h = F.relu(h @ p["w2"] + p["b2"])
        return F.cross_entropy(h @ p["w3"], b["y"])
    # Small buckets: several all-reduces per step, gradients split across them.
    return loss_fn, params, batches, {"bucket_bytes": 4096}


def _gpt2():
    cfg = W.gpt2_mini_config(n_layer=2, d_model=64, n_head=4, seq=32, vocab=256, batch=4,
                             dropout=0.0)
    params = W.gpt2_mini_init(cfg, seed=0)
    batches = [W.gpt2_mini_batch(cfg, seed=1 + i) for i in range(STEPS)]

    def loss_fn(p, b):
        return W.gpt2_mini_loss(p, b, None, cfg, training=False)
    return loss_fn, params, batches, {"bucket_bytes": 64 << 10}


CASES = {"mlp": _mlp, "gpt2": _gpt2}


def key_biases(name, value):
    """GPT-2's key biases in parameter `name` (the middle third of
    attn.qkv.b here, of attn.c_attn.bias in HuggingFace's GPT-2), None
    elsewhere. Their gradient is zero in exact arithmetic (adding a constant
    to every score of a softmax row changes nothing), so what any run
    computes for them is rounding noise, different for every summation
    order: comparisons leave them out and check they stay at noise level."""
    if name.endswith(("attn.qkv.b", "attn.c_attn.bias")):
        d = value.shape[0] // 3
        return slice(d, 2 * d)
    return None


def excluded(case, name, value):
    """Entries of parameter `name` (`value`) of `case` left out of the
    comparison with one process (key_biases), None for none."""
    return key_biases(name, value) if case.split("+")[0] == "gpt2" else None


def backend_stats():
    """What the torch.compile backend did in this process, as arrays."""
    from tilefuse import torch_integration
    stats = torch_integration.stats
    return {"graphs": np.array(stats.graphs), "compiled": np.array(stats.compiled),
            "partitioned": np.array(stats.partitioned), "eager_graphs": np.array(stats.eager)}


def _shard(batch, rank, world, axis=0):
    out = {}
    for k, v in batch.items():
        n = v.shape[axis] // world
        out[k] = np.take(v, np.arange(rank * n, (rank + 1) * n), axis=axis)
    return out


ADAMW_LR = 3e-3


def _optimizer(sgd=False, **kwargs):
    if sgd:
        # Scale-sensitive (AdamW and always-active clipping are not): a
        # gradient summed instead of averaged over the ranks shows.
        return optim.SGD(lr=0.05, momentum=0.9, weight_decay=0.01, **kwargs)
    return optim.AdamW(lr=ADAMW_LR, weight_decay=0.01, **kwargs)


# Options a case takes after "+" ("mlp+clip", "mlp+fp16+sgd"), each run the
# same way in every rank and in the one-process reference: (optimizer
# arguments, compile_train_step arguments, micro-batches per step). The
# global-norm clip is small enough to clip every step; fp16 runs with
# dynamic loss scaling, whose overflow check every rank must agree on.
OPTIONS = {"clip": ({"clip_grad_norm": 0.05}, {}, 1),
           "sgd": ({"sgd": True}, {}, 1),
           # Vectors (biases, norms' scales) with a learning rate of their
           # own and no weight decay: a ZeRO shard holds both groups.
           "groups": ({"param_groups": [
               {"params": lambda name, a: a.ndim == 1, "lr": 0.01, "weight_decay": 0.0},
               {"params": lambda name, a: a.ndim > 1}]}, {}, 1),
           "accumulate": ({}, {"accumulate": 2}, 2),
           "bf16": ({}, {"precision": "bf16"}, 1),
           "fp16": ({}, {"precision": "fp16"}, 1)}


def precision(case):
    """The case's precision policy ("fp32", "bf16" or "fp16")."""
    return next((o for o in case.split("+")[1:] if o in ("bf16", "fp16")), "fp32")


def _case(case):
    """(loss_fn, params, batches, compile arguments, optimizer arguments,
    batch axis the ranks split) of `case` with its "+option"s; with
    accumulate=k each batch holds k micro-batches stacked on a new first
    axis, and the ranks split the one after it."""
    name, *options = case.split("+")
    loss_fn, params, batches, extra = CASES[name]()
    opt_kwargs, axis = {}, 0
    for option in options:
        o, c, k = OPTIONS[option]
        opt_kwargs.update(o)
        extra = {**extra, **c}
        if k > 1:
            batches = [{key: v.reshape((k, v.shape[0] // k) + v.shape[1:]) for key, v in b.items()}
                       for b in batches]
            axis = 1
    return loss_fn, params, batches, extra, opt_kwargs, axis


def _train(step, batches, rank=0, world=1, axis=0):
    losses = [step(_shard(b, rank, world, axis)) for b in batches]
    out = {"losses": np.array(losses)}
    out.update({f"param/{k}": v for k, v in step.params().items()})
    return out


def run_single(case):
    if case == "from_torch":
        return run_from_torch()
    loss_fn, params, batches, extra, opt_kwargs, _ = _case(case)
    extra.pop("bucket_bytes", None)
    step = tilefuse.compile_train_step(loss_fn, params, batches[0], _optimizer(**opt_kwargs),
                                       device="cpu", **extra)
    return _train(step, batches)


def _torch_model():
    import torch

    class Classifier(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2 = torch.nn.Linear(24, 40), torch.nn.Linear(40, 7)

        def forward(self, x, y):
            h = torch.nn.functional.layer_norm(torch.tanh(self.fc1(x)), (40,))
            return torch.nn.functional.cross_entropy(self.fc2(h), y)
    torch.manual_seed(0)
    rng = np.random.default_rng(2)
    batches = [(torch.from_numpy(rng.standard_normal((16, 24)).astype(np.float32)),
                torch.from_numpy(rng.integers(0, 7, 16))) for _ in range(STEPS)]
    return Classifier(), batches


def run_from_torch(rank=0, world=1):
    """tilefuse.from_torch, on one process or as one rank of `world`."""
    model, batches = _torch_model()
    part = [tuple(t[rank * 16 // world:(rank + 1) * 16 // world] for t in b) for b in batches]
    kwargs = dict(parallel="ddp", bucket_bytes=2048) if world > 1 else {}
    step = tilefuse.from_torch(model, part[0], _optimizer(), device="cpu", **kwargs)
    losses = [step(*b) for b in part]
    step.copy_to(model)
    out = {"losses": np.array(losses), "collectives": np.array(sum(
        1 for r in step.train_step.compiled._exe.kernels() if r["kind"] == "collective"))}
    out.update({f"param/{k}": v.detach().numpy() for k, v in model.named_parameters()})
    return out


def _torch_step(model, optimizer):
    """A PyTorch training step of `model` (which returns the loss) as a
    function of the inputs returning the loss, like a tilefuse step."""
    def step(*inputs):
        optimizer.zero_grad()
        loss = model(*inputs)
        loss.backward()
        optimizer.step()
        return loss.item()
    return step


def _against_eager_ddp(eager_model, ours, batches, path, make_optimizer, **from_torch_kwargs):
    """Trains `ours` data-parallel through tilefuse (`path`: a from_torch
    parallel mode, or "compile": torch.compile(DDP(ours), backend=
    "tilefuse")) and `eager_model` (the same parameters) under eager
    DistributedDataParallel, each with its own `make_optimizer(params)`, on
    the tuples of inputs `batches`: the losses side by side and what the
    torch.compile backend did. `ours` holds tilefuse's parameters after."""
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    from tilefuse import torch_integration
    eager_step = _torch_step(DDP(eager_model), make_optimizer(eager_model.parameters()))
    torch_integration.stats.reset()
    if path == "compile":
        step = _torch_step(torch.compile(DDP(ours), backend="tilefuse"),
                           make_optimizer(ours.parameters()))
    else:
        step = tilefuse.from_torch(ours, batches[0], make_optimizer(ours.parameters()),
                                   device="cpu", parallel=path, **from_torch_kwargs)
    losses = [[eager_step(*b), step(*b)] for b in batches]
    if path != "compile":
        step.copy_to(ours)
    return {"losses": np.array(losses), **backend_stats()}


def _batch_norm_ddp(rank, world, path="from_torch"):
    """A convolutional model with batch norm through from_torch(parallel=
    "ddp") (or, `path` "compile", torch.compile(DDP(model), backend=
    "tilefuse")) against eager DistributedDataParallel in the same
    processes: the running statistics follow DDP's broadcast_buffers (rank
    0's at every forward pass, then each rank's own batch)."""
    import torch

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            # No bias before batch norm (it cancels: its gradient is zero
            # in exact arithmetic, rounding noise that AdamW amplifies).
            self.conv = torch.nn.Conv2d(3, 8, 3, padding=1, bias=False)
            self.bn = torch.nn.BatchNorm2d(8)
            self.fc = torch.nn.Linear(8, 5)

        def forward(self, x, y):
            h = torch.relu(self.bn(self.conv(x))).mean(dim=(2, 3))
            return torch.nn.functional.cross_entropy(self.fc(h), y)
    torch.manual_seed(0)
    eager_model = Net()
    ours = Net()
    ours.load_state_dict(eager_model.state_dict())
    gen = torch.Generator().manual_seed(5 + rank)  # each rank's own data
    batches = [(torch.randn(4, 3, 8, 8, generator=gen), torch.randint(0, 5, (4,), generator=gen))
               for _ in range(5)]
    out = _against_eager_ddp(
        eager_model, ours, batches, "compile" if path == "compile" else "ddp",
        lambda params: torch.optim.AdamW(params, lr=ADAMW_LR, weight_decay=0.01))
    for (name, a), b in zip(eager_model.state_dict().items(), ours.state_dict().values()):
        if a.dtype.is_floating_point:
            out[f"eager/{name}"], out[f"compiled/{name}"] = a.numpy(), b.detach().numpy()
    return out


def _compiled_ddp(rank, world):
    """torch.compile(DDP(model), backend="tilefuse") against eager DDP in the
    same processes: 10 AdamW steps on each rank's part of the batches."""
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    from tilefuse import torch_integration

    class Net(torch.nn.Module):
        # A module class of the user's: Dynamo traces its forward under DDP
        # (torch.nn containers at the top of a DDP module are not traced).
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2 = torch.nn.Linear(24, 40), torch.nn.Linear(40, 7)

        def forward(self, x):
            return self.fc2(torch.nn.functional.gelu(self.fc1(x)))

    torch.manual_seed(0)
    eager_model = Net()
    compiled_model = Net()
    compiled_model.load_state_dict(eager_model.state_dict())
    eager, compiled = DDP(eager_model), DDP(compiled_model)
    run = torch.compile(compiled, backend="tilefuse")
    opts = [torch.optim.AdamW(m.parameters(), lr=3e-3, weight_decay=0.01)
            for m in (eager, compiled)]
    torch_integration.stats.reset()
    rng = np.random.default_rng(1)
    losses = []
    for _ in range(STEPS):
        x = torch.from_numpy(rng.standard_normal((16, 24)).astype(np.float32))
        y = torch.from_numpy(rng.integers(0, 7, 16))
        x, y = x[rank * 16 // world:(rank + 1) * 16 // world], y[rank * 16 // world:(rank + 1) * 16 // world]
        pair = []
        for model, opt in ((eager, opts[0]), (run, opts[1])):
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            pair.append(loss.item())
        losses.append(pair)
    out = {"losses": np.array(losses), **backend_stats()}
    # DDP around a torch.nn container: Dynamo hands over nothing; explain()
    # says so and why.
    seq = DDP(torch.nn.Sequential(torch.nn.Linear(24, 7)))
    out["sequential"] = np.array(str(torch_integration.explain(
        seq, torch.zeros(2, 24))))
    for (name, a), b in zip(eager_model.named_parameters(), compiled_model.parameters()):
        out[f"eager/{name}"], out[f"compiled/{name}"] = a.detach().numpy(), b.detach().numpy()
    return out


def _checkpoint(rank, world):
    """zero2 on gpt2_mini: 4 steps, a sharded checkpoint, 3 more steps; a
    second step loads the checkpoint and runs the same 3 steps (bit for bit
    at this world size). Rank 0 also loads it into one process's worth of
    shards later (the test reads the files at world size 1)."""
    import os
    import tempfile
    from tilefuse import distributed
    loss_fn, params, batches, extra = CASES["gpt2"]()
    directory = os.environ["TILEFUSE_TEST_CHECKPOINT"]

    def fresh():
        return tilefuse.compile_train_step(loss_fn, params, _shard(batches[0], rank, world),
                                           _optimizer(), device="cpu", parallel="zero2", **extra)
    first = fresh()
    for b in batches[:4]:
        first(_shard(b, rank, world))
    distributed.save_sharded(first, directory)
    after = [first(_shard(b, rank, world)) for b in batches[4:7]]
    second = fresh()
    distributed.load_sharded(second, directory)
    resumed = [second(_shard(b, rank, world)) for b in batches[4:7]]
    # state_dict(): whole tensors, the same as params(); loading them into
    # a third step continues like the first (whole -> this rank's shards).
    out = {"after": np.array(after), "resumed": np.array(resumed)}
    out.update({f"first/{k}": v for k, v in first.params().items()})
    out.update({f"second/{k}": v for k, v in second.params().items()})
    whole = second.state_dict()
    out["whole_matches"] = np.array(all(np.array_equal(whole[f"params/{k}"], v)
                                        for k, v in second.params().items()))
    third = fresh()
    third.load_state_dict(whole)
    out["more"] = np.array([first(_shard(batches[7], rank, world)),
                            third(_shard(batches[7], rank, world))])
    return out


def _artifact(rank, world):
    """A DDP step exported as an artifact and run through tilefuse.load in
    every rank (the runtime alone, no compiler)."""
    import os
    import tempfile
    loss_fn, params, batches, extra = CASES["mlp"]()
    g = tilefuse.train_step_graph(loss_fn, params, _shard(batches[0], rank, world), _optimizer(),
                                  parallel="ddp", **extra)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "step.tfa")
        g.export(path)
        loaded = tilefuse.load(path)
    names = sorted(params)
    loaded.set_state([params[k] for k in names] + [np.zeros_like(params[k]) for _ in range(2)
                                                   for k in names])
    losses = [loaded(_shard(b, rank, world), np.int64(t + 1), np.float64(3e-3))
              for t, b in enumerate(batches)]
    state = loaded.state_dict()
    out = {"losses": np.array(losses), "collectives": np.array(sum(
        1 for r in loaded._program.kernels() if r["kind"] == "collective"))}
    out.update({f"param/{k}": state[f"params/{k}"] for k in names})
    return out


def _hf_model(name):
    """A HuggingFace model from a small config (no weights), with its own
    loss on next-token prediction: GPT-2 (tied token embedding and LM head)
    or Llama (grouped-query attention, rotary positions, RMSNorm)."""
    import torch
    import transformers as T

    if name == "gpt2":
        model = T.GPT2LMHeadModel(T.GPT2Config(
            n_layer=2, n_embd=64, n_head=4, vocab_size=128, n_positions=64, resid_pdrop=0.0,
            embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0))
    else:
        model = T.LlamaForCausalLM(T.LlamaConfig(
            num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
            intermediate_size=128, vocab_size=128, max_position_embeddings=64,
            bos_token_id=0, eos_token_id=0, pad_token_id=0))

    class WithLoss(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, ids):
            return self.model(input_ids=ids, labels=ids).loss
    return WithLoss().train()


def _hf_data_parallel(rank, world, name, path, optimizer):
    """A HuggingFace model trained data-parallel through tilefuse (`path`:
    from_torch with parallel="ddp"|"zero2"|"zero3", or "compile":
    torch.compile(DDP(model), backend="tilefuse")) against eager
    DistributedDataParallel in the same processes, each rank on its own
    batches: the losses step by step and the parameters after STEPS steps
    of `optimizer` ("adamw", or "sgd": with momentum, sensitive to the
    gradients' scale, which AdamW's normalised update is not)."""
    import torch

    torch.manual_seed(0)
    eager_model = _hf_model(name)
    ours = _hf_model(name)
    ours.load_state_dict(eager_model.state_dict())

    def make_optimizer(params):
        if optimizer == "sgd":
            return torch.optim.SGD(params, lr=0.05, momentum=0.9)
        return torch.optim.AdamW(params, lr=1e-3)
    gen = torch.Generator().manual_seed(11 + rank)  # each rank's own sequences
    batches = [(torch.randint(3, 128, (2, 16), generator=gen),) for _ in range(STEPS)]
    out = _against_eager_ddp(eager_model, ours, batches, path, make_optimizer,
                             bucket_bytes=32 << 10)
    for (key, a), b in zip(eager_model.named_parameters(), ours.parameters()):
        out[f"eager/{key}"], out[f"compiled/{key}"] = a.detach().numpy(), b.detach().numpy()
    return out


def _zero_artifact(rank, world):
    """A zero3 step exported after 3 steps and loaded in every rank
    (tilefuse.load: the runtime alone): each rank restores its own file of
    a sharded checkpoint, and the loaded step continues bit for bit like the
    step that exported it. Whole tensors (state_dict()) are refused, saying
    what to load instead."""
    import os
    import tempfile

    import torch.distributed as dist
    from tilefuse import distributed
    loss_fn, params, batches, extra = CASES["mlp"]()
    step = tilefuse.compile_train_step(loss_fn, params, _shard(batches[0], rank, world),
                                       _optimizer(), device="cpu", parallel="zero3", **extra)
    for b in batches[:3]:
        step(_shard(b, rank, world))
    with tempfile.TemporaryDirectory() as tmp:
        # Every rank writes into rank 0's folder: the name travels.
        where = [tmp if rank == 0 else None]
        dist.broadcast_object_list(where, src=0)
        path, checkpoint = os.path.join(where[0], "step.tfa"), os.path.join(where[0], "ckpt")
        if rank == 0:
            step.export(path)
        distributed.save_sharded(step, checkpoint)  # (a barrier)
        loaded = tilefuse.load(path)
        try:
            loaded.load_state_dict(step.state_dict())
            refused = "accepted"
        except tilefuse.CompileError as e:
            refused = str(e)
        loaded.load_state_dict(dict(np.load(os.path.join(checkpoint, f"rank{rank}.npz"))))
        dist.barrier()  # every rank read its file before rank 0 removes the folder
    resumed = loaded.resumed
    rest = batches[3:]
    want = [step(_shard(b, rank, world)) for b in rest]
    got = [loaded(_shard(b, rank, world), np.int64(resumed["step"] + 1 + t),
                  np.float64(resumed["lr"])) for t, b in enumerate(rest)]
    same_state = all(np.array_equal(a, b) for a, b in
                     zip(loaded.state_dict().values(), step.kept_state().values()))
    return {"want": np.array(want), "got": np.array(got), "refused": np.array(refused),
            "resumed_step": np.array(resumed["step"]), "same_state": np.array(same_state)}


def run_rank(case, rank, world):
    if case.startswith("hf:"):  # hf:<model>:<path>:<optimizer>
        _, name, path, optimizer = case.split(":")
        return _hf_data_parallel(rank, world, name, path, optimizer)
    if case == "artifact":
        return _artifact(rank, world)
    if case == "zero_artifact":
        return _zero_artifact(rank, world)
    if case == "compiled_ddp":
        return _compiled_ddp(rank, world)
    if case.startswith("batch_norm"):  # batch_norm[:compile]
        return _batch_norm_ddp(rank, world, *case.split(":")[1:])
    if case == "from_torch":
        return run_from_torch(rank, world)
    if case == "dies":
        # Rank 1 dies before its first step: rank 0's step must fail with an
        # error (the process group's), not hang.
        loss_fn, params, batches, extra = CASES["mlp"]()
        step = tilefuse.compile_train_step(loss_fn, params, _shard(batches[0], rank, world),
                                           _optimizer(), device="cpu", parallel="ddp", **extra)
        if rank == 1:
            import os
            os._exit(0)
        step(_shard(batches[0], rank, world))
        return {"losses": np.zeros(1)}
    if case == "checkpoint":
        return _checkpoint(rank, world)
    if case == "mismatch":
        # Rank 1 compiles for another batch size: the first step must say so
        # on every rank instead of pairing collectives wrongly.
        loss_fn, params, batches, extra = CASES["mlp"]()
        part = _shard(batches[0], rank, world) if rank != 1 else _shard(batches[0], 0, 2 * world)
        step = tilefuse.compile_train_step(loss_fn, params, part, _optimizer(), device="cpu",
                                           parallel="ddp", **extra)
        step(part)
        return {"losses": np.zeros(1)}
    mode = "ddp"
    if ":" in case:  # "<mode>:<case>"
        mode, case = case.split(":")
    loss_fn, params, batches, extra, opt_kwargs, axis = _case(case)
    if rank != 0:
        # DDP starts every rank from rank 0's parameters.
        params = {k: v + 1.0 for k, v in params.items()}
    step = tilefuse.compile_train_step(loss_fn, params, _shard(batches[0], rank, world, axis),
                                       _optimizer(**opt_kwargs), device="cpu", parallel=mode,
                                       **extra)
    out = _train(step, batches, rank, world, axis)
    out["collectives"] = np.array(sum(1 for r in step.compiled._exe.kernels()
                                      if r["kind"] == "collective"))
    return out
