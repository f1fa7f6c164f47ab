"""Data parallel training through the torch.compile backend: two gloo
processes (torchrun, one thread each) train DDP(torch.compile(model,
backend="tilefuse")) exactly as eager DDP does: tilefuse compiles each
rank's forward and backward, DDP's hooks all-reduce the gradients.

Tolerances (float32, AdamW, 4 steps): parameters max|compiled - eager| <=
1e-5 (observed ~1e-7), losses relative 1e-5; replicas equal across ranks
(spread 0: both ranks apply the same averaged gradients).
"""
import os
import re
import shutil
import subprocess
import sys

import pytest

_HERE = os.path.dirname(os.path.abspath(__file__))


def _torchrun():
    exe = shutil.which("torchrun")
    return [exe] if exe else [sys.executable, "-m", "torch.distributed.run"]


def test_ddp_of_a_backend_compiled_module_trains_like_eager_ddp(tmp_path):
    env = dict(os.environ, OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    cmd = _torchrun() + ["--standalone", "--nproc_per_node=2",
                         os.path.join(_HERE, "distributed", "ddp_backend.py")]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    rows = re.findall(r"rank (\d): param_diff (\S+) loss_rel (\S+) replica_spread (\S+) "
                      r"compiled (\d+) partitioned (\d+) eager (\d+) unsupported (\d+)",
                      done.stdout)
    assert sorted(r[0] for r in rows) == ["0", "1"], done.stdout
    for rank, diff, loss_rel, spread, compiled, partitioned, eager, unsupported in rows:
        assert float(diff) <= 1e-5 and float(loss_rel) <= 1e-5, (rank, diff, loss_rel)
        assert float(spread) == 0.0, (rank, spread)
        assert int(compiled) >= 2 and (partitioned, eager, unsupported) == ("0", "0", "0"), \
            done.stdout
