"""Nothing tilefuse builds needs a GPU driver to start: the runtime loads
libcuda.so.1 when CUDA is asked for. CMake's CUDA::nvrtc target also links
the driver, which only the linker's --as-needed default dropped; a build
with other link flags (sanitizers) gained a hard libcuda dependency."""
import glob
import os
import re
import shutil
import subprocess

import pytest

BUILD = os.environ.get("TILEFUSE_BUILD_DIR")
pytestmark = pytest.mark.skipif(not BUILD or not os.path.exists(os.path.join(BUILD or "", "build.ninja")),
                                reason="needs the CMake build directory (TILEFUSE_BUILD_DIR)")


def test_no_link_command_names_the_driver():
    text = open(os.path.join(BUILD, "build.ninja")).read()
    mentions = {m for m in re.findall(r"\S*libcuda\.so\S*|-lcuda\b", text)
                if "fakecuda" not in m}  # the tests' CPU double of the driver
    assert not mentions, f"link commands name the GPU driver: {sorted(mentions)}"


@pytest.mark.skipif(shutil.which("readelf") is None, reason="no readelf")
def test_no_built_binary_needs_the_driver():
    files = [os.path.join(BUILD, "bin", n) for n in
             ("tilefuse-opt", "tilefuse-compile", "tilefuse-run", "tilefuse-unit-tests")]
    files += glob.glob(os.path.join(BUILD, "python", "tilefuse", "*.so"))
    files = [f for f in files if os.path.exists(f)]
    assert files
    for f in files:
        needed = subprocess.run(["readelf", "-d", f], capture_output=True, text=True).stdout
        assert "libcuda" not in needed, f"{f} needs the GPU driver:\n{needed}"
