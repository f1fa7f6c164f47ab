#!/usr/bin/env python3
"""tilefuse on an NVIDIA GPU against PyTorch eager and torch.compile.

    python3 bench/gpu/bench.py --prepared DIR [--quick] [--results-dir DIR]
                               [--only NAME,...] [--no-compile]

The artifacts are compiled elsewhere (this machine has only the runtime:
``tilefuse.load``); DIR holds them and ``manifest.json``, which says what
they are. Everything below runs in one process, one after the other, so
every number in the final table comes from the same run on the same GPU.

manifest.json
-------------
::

    {
      "commit":  "<the tilefuse commit that compiled the artifacts>",
      "created": "<when, ISO 8601 UTC, e.g. 2026-12-01T10:00:00Z>",
      "kernels": [
        {"name": "softmax", "artifact": "kernels/softmax.tfa"},
        ...
      ],
      "training": [
        {"name": "gpt2_small",
         "artifact": "train/gpt2_small.tfa",
         "config": {"n_layer": 12, "d_model": 768, "n_head": 12, "seq": 1024,
                    "vocab": 50257, "batch": 8, "dropout": 0.0,
                    "layer_norm_eps": 1e-05},
         "lr": 0.0001, "weight_decay": 0.01,
         "param_names": ["h0.attn.proj.b", ..., "wte"],
         "init_seed": 0, "batch_seed": 1},
        ...
      ]
    }

* Paths of artifacts are relative to DIR.
* ``kernels``: each name one of torch_models.KERNELS (pointwise_chain,
  softmax, layer_norm_fwd_bwd, cross_entropy_fwd_bwd, adamw_update), each at
  most once. The artifact is the graph of that name in
  bench/kernel_bench.cpp compiled for ``cuda:sm_90``, with the same
  arguments and results (for the two ``*_fwd_bwd`` kernels: the
  value-and-gradient graph, i.e. the graph's arguments, then results
  (value, gradients in argument order)). A kernel missing from the manifest
  is reported as an error row.
* ``training``: ``name`` is a label (``gpt2_mini`` or ``gpt2_small``);
  ``config`` gives every key of torch_models.gpt2_config (none defaulted,
  ``dropout`` 0); the artifact is the training step of
  ``lambda p, b, s: workloads.gpt2_mini_loss(p, b, s, config, True)`` with
  ``tilefuse.optim.AdamW(lr=lr, weight_decay=weight_decay)``, compiled for
  ``cuda:sm_90``: arguments (params in ``param_names`` order -- the sorted
  names of gpt2_init_numpy --, AdamW m for each, v for each, tokens int64
  [batch, seq + 1], seed int64, step int64 (1-based), lr float64), results
  (loss f32, params', m', v'). Parameters come from
  ``gpt2_init_numpy(config, init_seed)``, the batch from
  ``gpt2_batch_numpy(config, batch_seed)``.

What is measured
----------------
* The D2D copy baseline: torch ``dst.copy_(src)`` of 1 GiB of float32;
  GB/s = (read + written bytes) / time.
* Kernels: tilefuse (inputs as torch CUDA tensors passed by DLPack; results
  as device views of tilefuse's buffers when timed, as owned DLPack copies
  when checked; no host copy), torch eager and torch.compile
  (default mode; compilation is the untimed first call). Each time is the
  median over repeats of (back-to-back calls between two device
  synchronisations) / calls. GB/s counts the bytes of all arguments and
  results, as kernel_bench.cpp does. Numerics: every tilefuse result
  against torch eager, in float32: pass when
  ``|tilefuse - torch| <= rtol * |torch| + atol * max|torch|`` everywhere
  (rtol 1e-4, atol 1e-5; atol is relative to the result's largest
  magnitude, so the check means the same for a loss of 1e7 and a gradient
  of 1e-8, and sums of 65536 terms with cancellation pass when right).
* Training steps: the same initial parameters and batch for all three;
  3 warm-up steps then N timed ones, each between device synchronisations;
  the median step. torch.compile wraps the loss function (forward and
  backward); the AdamW step stays eager (torch's multi-tensor AdamW).
  Numerics: the first step's loss (rel 1e-4) and the loss of the first
  step after the warm-up, i.e. after 3 updates (rel 1e-3), tilefuse against
  torch eager. Seed argument 0 (no dropout), step counted from 1, lr as a
  float64 scalar.

Speedups are the baseline's time divided by tilefuse's (above 1: tilefuse
is faster). Matmuls are float32 on both sides as far as torch is concerned
(torch's TF32 switches are left at their defaults and printed).

Output: progress on stderr; the markdown report last on stdout (and, with
--results-dir, in gpu_results.md and gpu_results.json there). Exit status
1 when a numerics check failed or could not run, or tilefuse failed in a
row (a torch.compile error alone does not count), 0 otherwise; a failure
in one row becomes an error cell with its reason under the tables, never a
crash. --only limits the run to the named rows; --no-compile skips
torch.compile (its compile time dominates the run).
"""
import argparse
import datetime
import gc
import json
import os
import statistics
import sys
import time
import traceback

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_models as TM  # noqa: E402

try:
    import torch
    import torch._dynamo
except ImportError as e:
    sys.exit(f"bench/gpu/bench.py needs PyTorch with CUDA (import torch failed: {e})")

try:
    import tilefuse
    _TILEFUSE_ERROR = None
except ImportError as e:  # every tilefuse cell becomes an error; torch still runs
    tilefuse = None
    _TILEFUSE_ERROR = f"import tilefuse failed: {e}"

RTOL, ATOL = 1e-4, 1e-5
LOSS_RTOL_FIRST, LOSS_RTOL_AFTER_WARMUP = 1e-4, 1e-3
TRAIN_WARMUP = 3
COPY_BYTES = 1 << 30

SETTINGS = {
    "full": dict(warmup=3, repeats=15, inner=10, train_steps=20),
    "quick": dict(warmup=2, repeats=5, inner=5, train_steps=5),
}

_DTYPES = {"f32": torch.float32, "f64": torch.float64, "f16": torch.float16,
           "bf16": torch.bfloat16, "i32": torch.int32, "i64": torch.int64, "i1": torch.bool}

_T0 = time.perf_counter()


def log(msg):
    """Progress on stderr, with the seconds since start: the run has a time
    budget, so where it goes should be visible while it runs."""
    print(f"[{time.perf_counter() - _T0:7.1f}s] {msg}", file=sys.stderr, flush=True)


def reason(e):
    """One line for a table note: the exception's type and first line."""
    first = (str(e).strip().splitlines() or [""])[0]
    return f"{type(e).__name__}: {first}"[:200]


def free_device_memory():
    """Between rows: the next row's gigabytes should not meet this row's
    leftovers (torch's cache, tilefuse buffers kept alive by cycles)."""
    torch._dynamo.reset()  # compiled graphs of the previous row
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()


# ---------------------------------------------------------------------------
# Timing
# ---------------------------------------------------------------------------

def median_seconds(call, sync, warmup, repeats, inner):
    """Median seconds per call over `repeats` timings, each of `inner`
    back-to-back calls between two synchronisations. Back-to-back calls keep
    the launch queue full, so host overhead only counts where it exceeds the
    GPU time, as in a real program; the synchronisations make the clock
    cover all the device work whatever stream it ran on."""
    for _ in range(warmup):
        call()
    sync()
    times = []
    for _ in range(repeats):
        sync()
        t = time.perf_counter()
        for _ in range(inner):
            call()
        sync()
        times.append((time.perf_counter() - t) / inner)
    return statistics.median(times)


def torch_sync():
    torch.cuda.synchronize()


def tilefuse_sync(fn):
    """Waits for tilefuse's work and torch's (inputs made by torch)."""
    def sync():
        torch.cuda.synchronize()
        fn.synchronize()
    return sync


def copy_baseline(settings):
    """GB/s of a 1 GiB device-to-device copy (read + written bytes)."""
    src = torch.ones(COPY_BYTES // 4, dtype=torch.float32, device="cuda")
    dst = torch.empty_like(src)
    s = median_seconds(lambda: dst.copy_(src), torch_sync, settings["warmup"],
                       settings["repeats"], settings["inner"])
    return 2 * COPY_BYTES / s / 1e9


# ---------------------------------------------------------------------------
# Manifest and artifacts
# ---------------------------------------------------------------------------

def load_manifest(prepared):
    """manifest.json, with the top-level keys checked; entries are checked
    where they are used, so one bad entry is one error row."""
    path = os.path.join(prepared, "manifest.json")
    with open(path) as f:
        m = json.load(f)
    for key, kind in [("commit", str), ("created", str), ("kernels", list), ("training", list)]:
        if not isinstance(m.get(key), kind):
            raise ValueError(f"{path}: '{key}' must be a {kind.__name__}")
    return m


def require_tilefuse():
    if tilefuse is None:
        raise RuntimeError(_TILEFUSE_ERROR)


def load_artifact(prepared, entry):
    """tilefuse.load of a manifest entry, refusing non-CUDA artifacts (a CPU
    artifact here would silently measure the host)."""
    require_tilefuse()
    path = os.path.join(prepared, entry["artifact"])
    fn = tilefuse.load(path)
    target = getattr(fn, "target", "")
    if not str(target).startswith("cuda"):
        raise ValueError(f"{entry['artifact']}: target {target!r}, expected a cuda target")
    return fn


def describe(dtype, shape):
    return f"{dtype}{list(shape)}"


def check_signature(what, declared, actual):
    """`declared`: the artifact's (name, dtype string, shape) list;
    `actual`: (torch dtype, shape) of what will be passed or compared."""
    if len(declared) != len(actual):
        raise ValueError(f"the artifact has {len(declared)} {what}, torch has {len(actual)}")
    for i, ((name, dtype, shape), (tdtype, tshape)) in enumerate(zip(declared, actual)):
        if _DTYPES.get(dtype) != tdtype or tuple(shape) != tuple(tshape):
            raise ValueError(f"{what} {i} ({name}): artifact {describe(dtype, shape)}, "
                             f"torch {tdtype} {list(tshape)}")


# ---------------------------------------------------------------------------
# Numerics
# ---------------------------------------------------------------------------

def compare(got, want):
    """Per result: max abs error, max error / max|want|, and the verdict of
    |got - want| <= RTOL |want| + ATOL max|want| (NaN anywhere fails)."""
    out = []
    for i, (a, b) in enumerate(zip(got, want)):
        if a.shape != b.shape or a.dtype != b.dtype:
            out.append(dict(index=i, ok=False, max_abs=None, max_rel=None,
                            note=f"{a.dtype} {list(a.shape)} vs {b.dtype} {list(b.shape)}"))
            continue
        a, b = a.float(), b.float()
        diff = (a - b).abs()
        scale = b.abs().max().item() if b.numel() else 0.0
        ok = bool((diff <= RTOL * b.abs() + ATOL * scale).all().item())
        max_abs = diff.max().item() if b.numel() else 0.0
        out.append(dict(index=i, ok=ok, max_abs=max_abs,
                        max_rel=max_abs / scale if scale else max_abs))
    return out


def rel_diff(a, b):
    return abs(a - b) / abs(b) if b else abs(a - b)


# ---------------------------------------------------------------------------
# Kernels
# ---------------------------------------------------------------------------

def as_tuple(x):
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def run_tilefuse_kernel(fn, inputs):
    """One call; results as torch tensors sharing tilefuse's device memory."""
    return [torch.from_dlpack(r) for r in fn.run(list(inputs), out="dlpack")]


def bench_kernel(name, entry, prepared, settings, use_compile):
    """One kernel row: torch eager (also the numerics reference), tilefuse,
    torch.compile. Each part fails on its own. The caller frees the
    device memory afterwards (the inputs live until this returns)."""
    fn, make_inputs, nbytes = TM.KERNELS[name]
    row = dict(kind="kernel", name=name, bytes=nbytes, tilefuse_ms=None, eager_ms=None,
               compile_ms=None, compile_s=None, numerics=dict(status="error"), errors={})
    timing = (settings["warmup"], settings["repeats"], settings["inner"])
    inputs = make_inputs("cuda", seed=0)

    log(f"{name}: torch eager")
    row["eager_ms"] = 1e3 * median_seconds(lambda: fn(*inputs), torch_sync, *timing)

    log(f"{name}: tilefuse")
    try:
        if entry is None:
            raise ValueError("not in the manifest")
        row["numerics"], row["tilefuse_ms"] = tilefuse_kernel(
            load_artifact(prepared, entry), as_tuple(fn(*inputs)), inputs, timing)
    except Exception as e:  # noqa: BLE001 - one row's failure is a cell, not a crash
        traceback.print_exc()
        row["errors"]["tilefuse"] = reason(e)
    free_device_memory()

    if use_compile:
        log(f"{name}: torch.compile (compiling)")
        row["compile_ms"], row["compile_s"] = time_compiled(fn, inputs, timing)
    else:
        row["compile_ms"] = "skipped"
    return row


def tilefuse_kernel(tf, want, inputs, timing):
    """(numerics against `want`, ms per call) of a loaded kernel artifact
    called on torch tensors, results kept on the device."""
    check_signature("arguments", tf.arguments, [(t.dtype, t.shape) for t in inputs])
    check_signature("results", tf.results, [(t.dtype, t.shape) for t in want])
    got = run_tilefuse_kernel(tf, inputs)
    tf.synchronize()
    results = compare(got, want)
    numerics = dict(status="pass" if all(r["ok"] for r in results) else "fail",
                    results=results)
    del got
    # Timed with results viewed in place (out="view": no copy), as torch's
    # own results are its allocator's buffers.
    seconds = median_seconds(lambda: tf.run(list(inputs), out="view"), tilefuse_sync(tf),
                             *timing)
    return numerics, 1e3 * seconds


def time_compiled(fn, inputs, timing):
    """(ms per call, compile seconds) of torch.compile(fn), or
    ("error: ...", None) when compiling or running it raises."""
    try:
        compiled = torch.compile(fn)
        t = time.perf_counter()
        compiled(*inputs)
        torch.cuda.synchronize()
        compile_s = time.perf_counter() - t
        return 1e3 * median_seconds(lambda: compiled(*inputs), torch_sync, *timing), compile_s
    except Exception as e:  # noqa: BLE001
        traceback.print_exc()
        return f"error: {reason(e)}", None


# ---------------------------------------------------------------------------
# Training steps
# ---------------------------------------------------------------------------

def training_setup(entry):
    """(config, numpy params, numpy tokens) from a manifest entry, checked
    against what torch_models computes."""
    cfg_in = entry["config"]
    missing = set(TM.gpt2_config()) - set(cfg_in)
    if missing:
        raise ValueError(f"config lacks {sorted(missing)} (every key is required)")
    cfg = TM.gpt2_config(**cfg_in)
    if cfg["dropout"] != 0:
        raise ValueError("config dropout must be 0 (torch cannot reproduce Philox masks)")
    params = TM.gpt2_init_numpy(cfg, seed=int(entry["init_seed"]))
    if list(entry["param_names"]) != sorted(params):
        raise ValueError("param_names differ from the sorted names of gpt2_init_numpy")
    tokens = TM.gpt2_batch_numpy(cfg, seed=int(entry["batch_seed"]))["tokens"]
    return cfg, params, tokens


def run_steps(step, n_steps, sync, to_float):
    """Runs step(t) for t = 1..n_steps, each between synchronisations.
    Returns (losses, seconds of each step); step 1 includes any compile."""
    losses, times = [], []
    for t in range(1, n_steps + 1):
        sync()
        t0 = time.perf_counter()
        loss = step(t)
        sync()
        times.append(time.perf_counter() - t0)
        losses.append(to_float(loss))
    return losses, times


def check_train_signature(step, params, names, tokens):
    """The artifact's arguments against the layout of the manifest; returns
    whether it takes a seed argument."""
    declared = getattr(step, "arguments", None)
    if declared is None:
        return True  # the contract's layout, unchecked
    n = len(names)
    with_seed = len(declared) == 3 * n + 4
    if len(declared) not in (3 * n + 3, 3 * n + 4):
        raise ValueError(f"{len(declared)} arguments, expected {3 * n + 4} "
                         f"({n} params, m, v, tokens, seed, step, lr)")
    expected = [(torch.float32, params[k].shape) for k in names] * 3
    expected.append((torch.int64, tokens.shape))
    expected += [(torch.int64, ())] * (2 if with_seed else 1) + [(torch.float64, ())]
    check_signature("arguments", declared, expected)
    return with_seed


def train_tilefuse(prepared, entry, params, tokens, lr, n_steps):
    require_tilefuse()
    path = os.path.join(prepared, entry["artifact"])
    step = tilefuse.load(path)
    names = list(entry["param_names"])
    with_seed = check_train_signature(step, params, names, tokens)
    first = [params[k] for k in names]
    step.set_state(first + [np.zeros_like(p) for p in first] * 2)
    seed = [np.int64(0)] if with_seed else []

    def one(t):  # seed 0 (no dropout), 1-based step, lr as a float64 scalar
        return step(tokens, *seed, np.int64(t), np.float64(lr))
    sync = getattr(step, "synchronize", torch_sync)
    return run_steps(one, n_steps, sync, lambda loss: float(np.asarray(loss)))


def train_torch(params, tokens_np, cfg, lr, wd, n_steps, compile):
    step_fn, _ = TM.make_torch_train_step(params, cfg, lr, weight_decay=wd, compile=compile)
    tokens = torch.from_numpy(tokens_np).cuda()
    return run_steps(lambda t: step_fn(tokens), n_steps, torch_sync, lambda loss: loss.item())


def summarise_steps(row, key, losses, times):
    row[key + "_ms"] = 1e3 * statistics.median(times[TRAIN_WARMUP:])
    row[key + "_first_step_s"] = times[0]
    row[key + "_losses"] = losses


def bench_training(entry, prepared, settings, use_compile):
    """One training row: tilefuse's step, torch eager, torch.compile, from
    the same parameters and batch; the losses of tilefuse against eager."""
    name = entry.get("name", "?")
    row = dict(kind="training", name=name, tilefuse_ms=None, eager_ms=None, compile_ms=None,
               numerics=dict(status="error"), errors={})
    cfg, params, tokens = training_setup(entry)
    row["params_m"] = sum(p.size for p in params.values()) / 1e6
    row["tokens"] = cfg["batch"] * cfg["seq"]
    lr, wd = float(entry["lr"]), float(entry["weight_decay"])
    n_steps = TRAIN_WARMUP + settings["train_steps"]

    log(f"{name}: tilefuse, {n_steps} steps")
    try:
        summarise_steps(row, "tilefuse",
                        *train_tilefuse(prepared, entry, params, tokens, lr, n_steps))
    except Exception as e:  # noqa: BLE001
        traceback.print_exc()
        row["errors"]["tilefuse"] = reason(e)
    free_device_memory()

    log(f"{name}: torch eager, {n_steps} steps")
    try:
        summarise_steps(row, "eager", *train_torch(params, tokens, cfg, lr, wd, n_steps, False))
    except Exception as e:  # noqa: BLE001
        traceback.print_exc()
        row["errors"]["eager"] = reason(e)
    free_device_memory()

    if use_compile:
        log(f"{name}: torch.compile (first step compiles), {n_steps} steps")
        try:
            summarise_steps(row, "compile",
                            *train_torch(params, tokens, cfg, lr, wd, n_steps, True))
        except Exception as e:  # noqa: BLE001
            traceback.print_exc()
            row["compile_ms"] = f"error: {reason(e)}"
        free_device_memory()
    else:
        row["compile_ms"] = "skipped"

    if "tilefuse_losses" in row and "eager_losses" in row:
        row["numerics"] = loss_checks(row["tilefuse_losses"], row["eager_losses"])
    return row


def loss_checks(ours, theirs):
    """First-step loss (same parameters: only the forward's rounding
    differs) and the loss after the warm-up updates (the optimizer's
    rounding adds up)."""
    first = rel_diff(ours[0], theirs[0])
    after = rel_diff(ours[TRAIN_WARMUP], theirs[TRAIN_WARMUP])
    ok = first <= LOSS_RTOL_FIRST and after <= LOSS_RTOL_AFTER_WARMUP
    return dict(status="pass" if ok else "fail", first_rel=first, after_warmup_rel=after)


# ---------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------

def fmt(x, spec):
    if x is None:
        return "-"
    if isinstance(x, str):
        return "error" if x.startswith("error") else x
    return format(x, spec)


def speedup(baseline_ms, ours_ms):
    if isinstance(baseline_ms, float) and isinstance(ours_ms, float) and ours_ms > 0:
        return f"{baseline_ms / ours_ms:.2f}x"
    return "-"


def gbps(nbytes, ms):
    return nbytes / (ms * 1e-3) / 1e9 if isinstance(ms, float) and ms > 0 else None


def percent(g, copy_gbps):
    return f"{100 * g / copy_gbps:.0f}%" if g else "-"


def numerics_cell(n):
    status = n["status"]
    if status == "error":
        return "error"
    if "results" in n:
        worst = max((r["max_rel"] or 0.0) for r in n["results"])
        bad = [str(r["index"]) for r in n["results"] if not r["ok"]]
        return (f"pass ({worst:.1e})" if status == "pass"
                else f"**FAIL** result {','.join(bad)} ({worst:.1e})")
    cell = f"{n['first_rel']:.1e} / {n['after_warmup_rel']:.1e}"
    return f"pass ({cell})" if status == "pass" else f"**FAIL** ({cell})"


def kernel_table(rows, copy_gbps):
    lines = ["| kernel | MiB | tilefuse ms | GB/s | % copy | eager ms | compile ms | "
             "compile % copy | vs eager | vs compile | numerics (max err / max) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        if "bytes" not in r:
            lines.append(f"| {r['name']} | | | | | | | | | | error |")
            continue
        ours = gbps(r["bytes"], r["tilefuse_ms"])
        theirs = gbps(r["bytes"], r["compile_ms"])
        lines.append(
            f"| {r['name']} | {r['bytes'] / 2**20:.0f} | "
            f"{fmt(r['tilefuse_ms'] if 'tilefuse' not in r['errors'] else 'error', '.3f')} | "
            f"{fmt(ours, '.0f')} | {percent(ours, copy_gbps)} | {fmt(r['eager_ms'], '.3f')} | "
            f"{fmt(r['compile_ms'], '.3f')} | {percent(theirs, copy_gbps)} | "
            f"{speedup(r['eager_ms'], r['tilefuse_ms'])} | "
            f"{speedup(r['compile_ms'], r['tilefuse_ms'])} | {numerics_cell(r['numerics'])} |")
    return lines


def training_table(rows):
    lines = ["| workload | params (M) | tokens/step | tilefuse ms | eager ms | compile ms | "
             "vs eager | vs compile | loss step 1 (tilefuse / eager) | "
             f"loss step {TRAIN_WARMUP + 1} (tilefuse / eager) | numerics (rel diff 1 / {TRAIN_WARMUP + 1}) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---|---|---|"]
    for r in rows:
        if "params_m" not in r:
            lines.append(f"| {r['name']} | | | | | | | | | | error |")
            continue
        tl, el = r.get("tilefuse_losses"), r.get("eager_losses")

        def loss(i):
            return f"{tl[i]:.6f} / {el[i]:.6f}" if tl and el else "-"
        lines.append(
            f"| {r['name']} | {r['params_m']:.1f} | {r['tokens']} | "
            f"{fmt(r['tilefuse_ms'] if 'tilefuse' not in r['errors'] else 'error', '.2f')} | "
            f"{fmt(r['eager_ms'] if 'eager' not in r['errors'] else 'error', '.2f')} | "
            f"{fmt(r['compile_ms'], '.2f')} | {speedup(r['eager_ms'], r['tilefuse_ms'])} | "
            f"{speedup(r['compile_ms'], r['tilefuse_ms'])} | {loss(0)} | {loss(TRAIN_WARMUP)} | "
            f"{numerics_cell(r['numerics'])} |")
    return lines


def notes(rows):
    """The reasons behind every error cell, one line each."""
    out = []
    for r in rows:
        for part, why in r["errors"].items():
            out.append(f"- {r['name']}, {part}: {why}")
        if isinstance(r.get("compile_ms"), str) and r["compile_ms"].startswith("error"):
            out.append(f"- {r['name']}, torch.compile: {r['compile_ms'][len('error: '):]}")
    return out


def render(info, kernels, training):
    mode = "quick" if info["quick"] else "full"
    s = info["settings"]
    lines = [
        f"## tilefuse GPU benchmark, {info['date']}",
        "",
        f"GPU: {info['gpu']}; torch {info['torch']} (CUDA {info['cuda']}), "
        f"triton {info['triton']}; tilefuse commit {info['commit']} "
        f"(artifacts made {info['created']}); mode {mode}.",
        f"torch float32 matmul precision {info['matmul_precision']!r}, "
        f"allow_tf32 matmul {info['tf32_matmul']}, cudnn {info['tf32_cudnn']}.",
        f"D2D copy baseline (torch copy_, 1 GiB f32, read + write): "
        f"{info['copy_gbps']:.0f} GB/s.",
        "",
        f"Kernels: median of {s['repeats']} x {s['inner']} back-to-back calls; GB/s = "
        "(argument + result bytes) / time; vs = baseline time / tilefuse time; "
        f"numerics: |tf - eager| <= {RTOL:g} |eager| + {ATOL:g} max|eager|.",
        "",
    ]
    lines += kernel_table(kernels, info["copy_gbps"])
    lines += [
        "",
        f"Training steps (AdamW): median of {s['train_steps']} steps after {TRAIN_WARMUP} "
        "warm-up steps, each step between device synchronisations; torch.compile wraps the "
        "loss (forward + backward), AdamW eager (foreach). Numerics: step-1 loss rel "
        f"{LOSS_RTOL_FIRST:g}, step-{TRAIN_WARMUP + 1} loss rel {LOSS_RTOL_AFTER_WARMUP:g}.",
        "",
    ]
    lines += training_table(training)
    extra = notes(kernels + training)
    if extra:
        lines += ["", "Errors:", ""] + extra
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------

def run_info(manifest, args, settings):
    try:
        import triton
        triton_version = triton.__version__
    except ImportError:
        triton_version = "not installed"
    return dict(
        date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        gpu=torch.cuda.get_device_name(), torch=torch.__version__, cuda=torch.version.cuda,
        triton=triton_version, commit=manifest["commit"], created=manifest["created"],
        quick=args.quick, settings=settings,
        matmul_precision=torch.get_float32_matmul_precision(),
        tf32_matmul=torch.backends.cuda.matmul.allow_tf32,
        tf32_cudnn=torch.backends.cudnn.allow_tf32)


def selected(name, only):
    return not only or name in only


def run_kernels(manifest, args, settings):
    entries = {}
    for e in manifest["kernels"]:
        entries[e.get("name")] = e
    rows = []
    for name in TM.KERNELS:
        if not selected(name, args.only):
            continue
        try:
            rows.append(bench_kernel(name, entries.get(name), args.prepared, settings,
                                     not args.no_compile))
        except Exception as e:  # noqa: BLE001 - e.g. out of memory in the torch part
            traceback.print_exc()
            rows.append(dict(kind="kernel", name=name, numerics=dict(status="error"),
                             errors={"row": reason(e)}))
        free_device_memory()
    unknown = sorted((n for n in set(entries) - set(TM.KERNELS) if selected(n, args.only)),
                     key=str)
    rows += [dict(kind="kernel", name=str(n), numerics=dict(status="error"),
                  errors={"manifest": "unknown kernel name"}) for n in unknown]
    return rows


def run_training(manifest, args, settings):
    rows = []
    for entry in manifest["training"]:
        name = str(entry.get("name", "?"))
        if not selected(name, args.only):
            continue
        try:
            rows.append(bench_training(entry, args.prepared, settings, not args.no_compile))
        except Exception as e:  # noqa: BLE001
            traceback.print_exc()
            rows.append(dict(kind="training", name=name, numerics=dict(status="error"),
                             errors={"row": reason(e)}))
        free_device_memory()
    return rows


def write_results(results_dir, text, payload):
    os.makedirs(results_dir, exist_ok=True)
    with open(os.path.join(results_dir, "gpu_results.md"), "w") as f:
        f.write(text)
    with open(os.path.join(results_dir, "gpu_results.json"), "w") as f:
        json.dump(payload, f, indent=2, default=str)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prepared", required=True,
                        help="folder with manifest.json and the artifacts")
    parser.add_argument("--quick", action="store_true", help="fewer repeats and steps")
    parser.add_argument("--results-dir", help="also write gpu_results.md and .json here")
    parser.add_argument("--only", type=lambda s: set(s.split(",")), default=set(),
                        help="comma-separated kernel / workload names")
    parser.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    args = parser.parse_args(argv)

    if not torch.cuda.is_available():
        sys.exit("bench/gpu/bench.py: torch sees no CUDA device")
    try:
        manifest = load_manifest(args.prepared)
    except (OSError, ValueError) as e:
        sys.exit(f"bench/gpu/bench.py: cannot read the manifest: {e}")
    settings = SETTINGS["quick" if args.quick else "full"]
    info = run_info(manifest, args, settings)
    log(f"{info['gpu']}, torch {info['torch']}, commit {info['commit']}")

    log("D2D copy baseline")
    info["copy_gbps"] = copy_baseline(settings)
    free_device_memory()
    kernels = run_kernels(manifest, args, settings)
    training = run_training(manifest, args, settings)

    text = render(info, kernels, training)
    log("done")
    print(text, flush=True)
    if args.results_dir:
        write_results(args.results_dir, text,
                      dict(info=info, kernels=kernels, training=training))
    failed = [r["name"] for r in kernels + training
              if r["numerics"]["status"] != "pass" or "tilefuse" in r["errors"]]
    if failed:
        log(f"numerics failed or did not run: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
