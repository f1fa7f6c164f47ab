# -*- Python -*-
# lit configuration for tilefuse's FileCheck tests (tests/ir, tests/passes).
#
#   lit -v tests --param tools_dir=build/bin [--param exec_root=build/tests/lit]
#
# tilefuse-opt is looked up in the `tools_dir` param, else $TILEFUSE_TOOLS_DIR;
# FileCheck and `not` come from LLVM 19 (param `llvm_tools_dir`, else
# $LLVM_TOOLS_DIR, else /usr/lib/llvm-19/bin).

import os
import tempfile

import lit.formats
import lit.util

config.name = "tilefuse"
try:
    config.test_format = lit.formats.ShTest(True)
except ValueError:
    # lit >= 23 refuses execute_external=True ("deprecated"); its internal
    # shell runs these RUN lines (pipes, `not`, 2>&1) the same way.
    config.test_format = lit.formats.ShTest(False)
config.suffixes = [".mlir"]

config.test_source_root = os.path.dirname(os.path.abspath(__file__))
exec_root = lit_config.params.get("exec_root")
if exec_root:
    exec_root = os.path.abspath(exec_root)
    os.makedirs(exec_root, exist_ok=True)
    config.test_exec_root = exec_root
else:
    # Keep lit's Output/ folders out of the source tree.
    config.test_exec_root = os.path.join(
        tempfile.gettempdir(), "tilefuse-lit-%d" % os.getuid())

# Only the .mlir suites are lit tests: python/ and unit/ have their own
# runners (pytest, gtest), and the CMake/py helpers here are not tests.
config.excludes = [
    "python",
    "unit",
    "CMakeLists.txt",
    "LitTests.cmake",
    "lit.cfg.py",
    "lit.site.cfg.py",
    "__pycache__",
]


def _param_or_env(param, env, default=None):
    value = lit_config.params.get(param) or os.environ.get(env) or default
    return os.path.abspath(value) if value else None


tools_dir = _param_or_env("tools_dir", "TILEFUSE_TOOLS_DIR")
llvm_tools_dir = _param_or_env("llvm_tools_dir", "LLVM_TOOLS_DIR",
                               "/usr/lib/llvm-19/bin")

# Later prepends win: tilefuse's tools come first, then LLVM's.
path = config.environment.get("PATH", os.environ.get("PATH", ""))
for d in (llvm_tools_dir, tools_dir):
    if d:
        path = os.pathsep.join([d, path])
config.environment["PATH"] = path

for var in ("HOME", "TMPDIR", "TMP", "TEMP", "LD_LIBRARY_PATH"):
    if var in os.environ:
        config.environment[var] = os.environ[var]

missing = [t for t in ("tilefuse-opt", "FileCheck", "not")
           if not lit.util.which(t, path)]
if missing:
    lit_config.fatal(
        "cannot find %s; pass --param tools_dir=<dir with tilefuse-opt> "
        "(or set TILEFUSE_TOOLS_DIR) and make sure LLVM 19's FileCheck/not are "
        "in %s (--param llvm_tools_dir=...)" % (", ".join(missing),
                                               llvm_tools_dir))
