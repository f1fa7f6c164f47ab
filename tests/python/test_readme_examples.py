"""The README's Python examples run as written.

Every ```python block of README.md and docs/ARCHITECTURE.md is executed in
a fresh namespace, in a scratch folder (the examples write files). A block
that leaves its inputs to the reader (the PyTorch one uses "a GPT written
as an nn.Module": `model`, `idx`, `targets`, `batches`) gets only those
names from PRELUDES, never any tilefuse code. Each block must also run to
the end: a block that raises fails with its line in the README.
"""
import os
import re

import pytest

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOCS = ("README.md", "docs/ARCHITECTURE.md")

# What the README leaves to the reader, by a line that identifies the block.
PRELUDES = {
    'compiled = torch.compile(model, backend="tilefuse")': '''
import torch
import torch_zoo
torch.manual_seed(0)
model = torch_zoo.GPT()
idx, targets = torch_zoo.GPT.make_inputs(0)
batches = [torch_zoo.GPT.make_inputs(s) for s in range(1, 4)]
''',
}


def _blocks():
    found = []
    for doc in DOCS:
        path = os.path.join(_REPO, doc)
        text = open(path).read()
        for m in re.finditer(r"^```python\n(.*?)^```", text, re.S | re.M):
            line = text.count("\n", 0, m.start()) + 2
            found.append(pytest.param(doc, line, m.group(1), id=f"{doc}:{line}"))
    return found


BLOCKS = _blocks()


def test_the_readme_has_examples():
    assert len([b for b in BLOCKS if b.values[0] == "README.md"]) >= 2


@pytest.mark.parametrize("doc,line,code", BLOCKS)
def test_example_runs(doc, line, code, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    prelude = next((p for key, p in PRELUDES.items() if key in code), "")
    namespace = {"__name__": "readme_example"}
    if prelude:
        exec(compile(prelude, "prelude", "exec"), namespace)
    # Line numbers of the README in tracebacks.
    exec(compile("\n" * (line - 1) + code, os.path.join(_REPO, doc), "exec"), namespace)
