#!/usr/bin/env python3
"""Runs every corpus artifact of a prepared folder (bench/gpu/prepare.py) on
this machine's GPU and compares each result with the expected output the
reference interpreter computed on the build machine.

    python3 bench/gpu/verify.py --prepared DIR [--results-dir DIR]

Needs only the runtime: `tilefuse.load`, or, where the Python module could
not be built (no pybind11), the `tilefuse-run` tool (--tilefuse-run BIN). Tolerances per result dtype:
floats as the manifest says for the case (|got - want| <= rtol*|want| +
atol*max(1, max|want|); 1e-4 for f32 graphs, 1e-2 for graphs computing in
f16), f16/bf16 results at least 1e-2, f64 results 1e-10, integers and
booleans exact.
Exit status 1 when any case fails.
"""
import argparse
import json
import os
import sys
import time

import subprocess
import tempfile

import numpy as np

try:
    import tilefuse
except ImportError:  # checked with tilefuse-run instead
    tilefuse = None


def tolerance(dtype, case):
    if dtype == np.float32:
        return case["rtol"], case["atol"]
    if dtype == np.float16 or str(dtype) == "bfloat16":
        return max(1e-2, case["rtol"]), max(1e-2, case["atol"])
    if dtype == np.float64:
        return 1e-10, 1e-10
    return 0.0, 0.0


def compare(got, want, case):
    """(ok, worst error as a fraction of the allowed error)."""
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        return False, float("inf")
    rtol, atol = tolerance(want.dtype, case)
    g, w = got.astype(np.float64), want.astype(np.float64)
    if rtol == 0 and atol == 0:
        return bool(np.array_equal(g, w)), float(np.count_nonzero(g != w))
    allowed = rtol * np.abs(w) + atol * max(1.0, float(np.max(np.abs(w))) if w.size else 1.0)
    err = np.abs(g - w)
    same_nan = np.isnan(g) & np.isnan(w)
    bad = (err > allowed) & ~same_nan
    ratio = float(np.max(np.where(same_nan, 0, err / allowed))) if w.size else 0.0
    return not bool(bad.any()), ratio


def run_with_tool(tool, artifact, leaves):
    """Results of `artifact` run by the tilefuse-run tool: three calls
    (eager, captured into a CUDA graph, replayed), the last one's results."""
    with tempfile.TemporaryDirectory() as d:
        paths = []
        for i, leaf in enumerate(leaves):
            paths.append(os.path.join(d, f"in{i}.npy"))
            np.save(paths[-1], leaf)
        out = os.path.join(d, "out")
        cmd = [tool, artifact, "--repeat=3", f"--save={out}"]
        if paths:
            cmd.append("--inputs=" + ",".join(paths))
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(r.stderr.strip().splitlines()[-1] if r.stderr.strip() else
                               f"tilefuse-run exited {r.returncode}")
        n = len([f for f in os.listdir(out) if f.startswith("result")])
        return [np.load(os.path.join(out, f"result{i}.npy")) for i in range(n)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prepared", required=True)
    ap.add_argument("--results-dir")
    ap.add_argument("--tilefuse-run", help="run artifacts with this tilefuse-run binary "
                    "(the default when the tilefuse Python module is missing)")
    args = ap.parse_args()
    if tilefuse is None and not args.tilefuse_run:
        sys.exit("verify: no tilefuse Python module; pass --tilefuse-run BIN")
    with open(os.path.join(args.prepared, "manifest.json")) as f:
        manifest = json.load(f)
    rows, failed = [], False
    for case in manifest.get("corpus", []):
        name = case["name"]
        try:
            start = time.time()
            artifact = os.path.join(args.prepared, case["artifact"])
            inputs = np.load(os.path.join(args.prepared, case["inputs"]))
            expected = np.load(os.path.join(args.prepared, case["expected"]))
            leaves = [inputs[f"arr_{i}"] for i in range(len(inputs.files))]
            if args.tilefuse_run:
                got = again = run_with_tool(args.tilefuse_run, artifact, leaves)
            else:
                fn = tilefuse.load(artifact)
                got = fn.run(leaves)  # eager
                fn.run(leaves)  # captured into a CUDA graph
                again = fn.run(leaves)  # replayed
            checks = [compare(g, expected[f"arr_{i}"], case) for i, g in enumerate(got)]
            # (scatter-adds use atomics: the replay may round differently,
            # within the same tolerance)
            checks += [compare(a, expected[f"arr_{i}"], case) for i, a in enumerate(again)]
            ok = all(c[0] for c in checks)
            worst = max((c[1] for c in checks), default=0.0)
            rows.append((name, "pass" if ok else "FAIL", f"{worst:.3g}",
                         f"{time.time() - start:.2f}"))
            failed |= not ok
        except Exception as e:  # one bad case is a row, not the end of the check
            rows.append((name, "ERROR", type(e).__name__ + ": " + str(e).splitlines()[0][:120], ""))
            failed = True
        print(f"[verify] {' | '.join(rows[-1])}", file=sys.stderr, flush=True)
    table = ["| case | result | worst error / allowed | seconds |", "|---|---|---|---|"]
    table += [f"| {' | '.join(r)} |" for r in rows]
    text = "\n".join(table)
    print(text)
    if args.results_dir:
        os.makedirs(args.results_dir, exist_ok=True)
        with open(os.path.join(args.results_dir, "verify.md"), "w") as f:
            f.write(text + "\n")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
