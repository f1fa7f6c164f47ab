#!/usr/bin/env python3
"""PyTorch's OpInfo database through the torch.compile backend: every
selected op (tests/python/test_opinfo.py's rule and harness), two float32
CPU samples each, forward and backward, against eager.

    PYTHONPATH=build/python python3 bench/opinfo.py \\
        [--out bench/results/DATE-opinfo.md] [--json results.json] \\
        [--before earlier.json --before-label "at abc1234"] [--ops add,sum,...]

Writes a markdown report: counts of samples and ops per class (converted,
partial, fallback, wrong, raise, torch error, eager error, random), the ops
that fall back or are partial with the ops the backend left to PyTorch
(its stats.unsupported, and Dynamo's graph breaks), and every wrong or
raising sample. `--json` keeps the per-sample classes, which `--before`
reads to add a column of an earlier run's counts.
"""
import argparse
import collections
import datetime
import json
import logging
import os
import platform
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "python"))

import torch  # noqa: E402

import test_opinfo as H  # noqa: E402

CLASSES = ("converted", "partial", "fallback", "wrong", "raise", "torch error", "eager error",
           "random")


def _op_class(kinds):
    """An op's class from its samples': the worst one."""
    for k in ("raise", "wrong", "torch error", "fallback", "partial", "random", "eager error"):
        if k in kinds:
            return k
    return "converted"


def _counts(rows):
    samples = collections.Counter(r["kind"] for r in rows)
    by_op = collections.defaultdict(set)
    for r in rows:
        by_op[r["op"]].add(r["kind"])
    ops = collections.Counter(_op_class(k) for k in by_op.values())
    return samples, ops


def _rate(samples):
    """Converted samples over the samples compared (eager runs them, they
    are not random)."""
    compared = sum(v for k, v in samples.items() if k not in ("eager error", "random"))
    return samples["converted"], compared


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.path.join(
        HERE, "results", f"{datetime.date.today().isoformat()}-opinfo.md"))
    ap.add_argument("--json", help="also write the per-sample classes here")
    ap.add_argument("--before", help="an earlier run's --json, for a column of its counts")
    ap.add_argument("--before-label", default="before")
    ap.add_argument("--ops", help="comma-separated op names (default: every selected op)")
    args = ap.parse_args()
    logging.getLogger("tilefuse").setLevel(logging.ERROR)
    logging.getLogger("torch").setLevel(logging.ERROR)

    ops = H.selected_ops()
    if args.ops:
        wanted = set(args.ops.split(","))
        ops = [op for op in ops if op.name in wanted or H.op_id(op) in wanted]
    rows = []
    start = time.perf_counter()

    def progress(op, i, sample, r, seconds):
        rows.append({"op": H.op_id(op), "sample": i, "kind": r.kind, "detail": r.detail,
                     "unsupported": r.unsupported, "seconds": round(seconds, 3),
                     "args": H.describe(op, sample) if sample is not None else ""})
        print(f"{seconds:6.2f}s {H.op_id(op):45s} {i} {r.kind:11s} "
              f"{', '.join(r.unsupported)[:100]}", file=sys.stderr, flush=True)

    results = H.run_all(ops, progress)
    for op, i, sample, r in results:  # sample generators that failed (no progress call)
        if sample is None:
            rows.append({"op": H.op_id(op), "sample": i, "kind": r.kind, "detail": r.detail,
                         "unsupported": {}, "seconds": 0.0, "args": ""})
    elapsed = time.perf_counter() - start
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    before = None
    if args.before:
        with open(args.before) as f:
            before = _counts(json.load(f))

    samples, op_classes = _counts(rows)
    excluded = collections.Counter(H.exclusion(op) for op in H.op_db
                                   if H.exclusion(op) is not None)
    converted, compared = _rate(samples)
    command = "PYTHONPATH=build/python python3 bench/opinfo.py " + " ".join(
        a for a in sys.argv[1:])
    out = [f"# OpInfo conformance of the torch.compile backend "
           f"({datetime.date.today().isoformat()})", "",
           f"`{command.strip()}`", "",
           f"torch {torch.__version__}, Python {platform.python_version()}, "
           f"{platform.machine()}, {os.cpu_count()} cores; {len(ops)} ops selected of "
           f"{len(H.op_db)} in op_db, {H.SAMPLES_PER_OP} float32 CPU samples each, forward "
           f"and backward; {elapsed:.0f} s.", "",
           "Selection, classes and tolerances: tests/python/test_opinfo.py's docstring. "
           f"Left out by the rule: {', '.join(f'{k} {v}' for k, v in sorted(excluded.items()))}"
           " (OpInfo entries).", "",
           f"**{converted} of {compared} compared samples convert whole "
           f"({100.0 * converted / max(compared, 1):.1f}%)**; compared: eager runs them and they "
           "draw no random numbers.", ""]
    header = "| class | samples | ops |" + (f" samples {args.before_label} | ops "
                                             f"{args.before_label} |" if before else "")
    out += [header, "|---|---:|---:|" + ("---:|---:|" if before else "")]
    for k in CLASSES:
        row = f"| {k} | {samples[k]} | {op_classes[k]} |"
        if before:
            row += f" {before[0][k]} | {before[1][k]} |"
        out.append(row)
    if before:
        b_conv, b_comp = _rate(before[0])
        out += ["", f"{args.before_label}: {b_conv} of {b_comp} compared samples converted "
                    f"whole ({100.0 * b_conv / max(b_comp, 1):.1f}%)."]
    out += ["", "An op's class is its worst sample's (raise, wrong, torch error, fallback, "
                "partial)."]

    def listing(title, kinds, show_detail):
        chosen = [r for r in rows if r["kind"] in kinds]
        if not chosen:
            return
        out.extend(["", f"## {title}", ""])
        by_op = collections.OrderedDict()
        for r in chosen:
            by_op.setdefault(r["op"], []).append(r)
        for op, rs in by_op.items():
            reasons = sorted({u for r in rs for u in r["unsupported"]})
            kinds_here = "/".join(sorted({r["kind"] for r in rs}))
            line = f"- `{op}` ({kinds_here}, samples {', '.join(str(r['sample']) for r in rs)})"
            if reasons:
                line += ": " + ", ".join(f"`{u}`" for u in reasons)
            if show_detail:
                details = sorted({r["detail"].splitlines()[0][:300] for r in rs if r["detail"]})
                if details:
                    line += ": " + "; ".join(details)
            out.append(line)

    listing("Wrong results (test failures)", ("wrong",), True)
    listing("Exceptions through the backend (test failures)", ("raise",), True)
    listing("Partial or left to PyTorch, with what was left", ("partial", "fallback"), False)
    listing("torch.compile fails without tilefuse (not the backend's)", ("torch error",), True)
    listing("Eager PyTorch raises on the sample (left out)", ("eager error",), True)
    listing("Random (draw from PyTorch's generator; left out)", ("random",), False)
    with open(args.out, "w") as f:
        f.write("\n".join(out) + "\n")
    print(f"{converted}/{compared} converted whole; {dict(samples)}; wrote {args.out}",
          file=sys.stderr)
    return 1 if samples["wrong"] or samples["raise"] else 0


if __name__ == "__main__":
    sys.exit(main())
