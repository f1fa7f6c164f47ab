"""Every test of test_ops_numerics.py again, through compiled CPU kernels.

Same inputs, same float64 numpy references, same per-dtype tolerances:
the compiled path is held to the interpreter's standard, op by op.
"""
import pytest

import test_ops_numerics as base
from test_ops_numerics import *  # noqa: F401,F403 - re-collects every test


@pytest.fixture(autouse=True)
def _compiled_backend(monkeypatch):
    monkeypatch.setattr(base, "BACKEND", "cpu")
