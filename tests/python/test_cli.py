"""The command-line tools refuse malformed numbers with a one-line reason and
exit code 2, create the folders they are asked to write, and show their own
options first."""
import shutil
import subprocess

import numpy as np
import pytest

pytestmark = pytest.mark.skipif(shutil.which("tilefuse-run") is None, reason="tools not on PATH")

_LOSS = """
func.func @loss(%w: tensor<3x2xf32>, %x: tensor<4x3xf32>) -> tensor<f32> {
  %0 = graph.matmul %x, %w : (tensor<4x3xf32>, tensor<3x2xf32>) -> tensor<4x2xf32>
  %1 = graph.reduce_sum %0 {dims = array<i64: 0, 1>} : (tensor<4x2xf32>) -> tensor<f32>
  return %1 : tensor<f32>
}"""


def _run(*args):
    return subprocess.run(list(args), capture_output=True, text=True)


@pytest.fixture
def artifact(tmp_path):
    src = tmp_path / "loss.mlir"
    src.write_text(_LOSS)
    out = tmp_path / "loss.tfa"
    done = _run("tilefuse-compile", str(src), "--target=cpu", "-o", str(out))
    assert done.returncode == 0, done.stderr
    return src, out


@pytest.mark.parametrize("flag", ["--repeat=abc", "--repeat=0", "--repeat=-2", "--repeat=",
                                  "--repeat=3x", "--repeat=99999999999999999999"])
def test_run_refuses_a_malformed_repeat(artifact, flag):
    out = _run("tilefuse-run", str(artifact[1]), flag)
    assert out.returncode == 2, out
    assert "--repeat needs a positive whole number" in out.stderr
    assert out.stderr.count("\n") == 1  # one line
    assert out.stdout == ""  # nothing ran


@pytest.mark.parametrize("flag,reason", [
    ("--num-params=abc", "--num-params needs a whole number"),
    ("--num-params=-1", "--num-params needs a whole number"),
    ("--weight-decay=x", "--weight-decay needs a finite number"),
    ("--momentum=-0.5", "--momentum needs a finite number"),
    ("--clip-norm=nan", "--clip-norm needs a finite number"),
])
def test_compile_refuses_malformed_numbers(artifact, tmp_path, flag, reason):
    out = _run("tilefuse-compile", str(artifact[0]), "-o", str(tmp_path / "x.tfa"), "--train",
               flag)
    assert out.returncode == 2 and reason in out.stderr, out.stderr
    assert not (tmp_path / "x.tfa").exists()


def test_run_save_creates_the_folder(artifact, tmp_path):
    folder = tmp_path / "new" / "nested"
    out = _run("tilefuse-run", str(artifact[1]), f"--save={folder}")
    assert out.returncode == 0, out.stderr
    assert np.load(folder / "result0.npy").shape == ()
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    bad = _run("tilefuse-run", str(artifact[1]), f"--save={blocker}")
    assert bad.returncode == 1 and "cannot create the --save folder" in bad.stderr


def test_opt_help_shows_tilefuse_options_first():
    out = _run("tilefuse-opt", "--help")
    assert out.returncode == 0
    lines = out.stdout.splitlines()
    assert len(lines) < 60, f"--help printed {len(lines)} lines"
    head = "\n".join(lines[:15])
    assert "--emit=STAGE" in head and "--target=" in head
    for name in ("--decompose-composites", "--autodiff", "--fuse", "--tilefuse-fused"):
        assert name in out.stdout
    everything = _run("tilefuse-opt", "--help-mlir")
    assert everything.returncode == 0 and len(everything.stdout.splitlines()) > 100
    assert "--mlir-print-ir-after-all" in everything.stdout


@pytest.mark.parametrize("text,reason", [
    ("func.func private @f(%x: tensor<4xf32>) -> tensor<4xf32>\n",
     "is declared without a body"),
    ("func.func @g(%x: f32, %y: tensor<4xf32>) -> tensor<4xf32> {\n"
     "  %0 = graph.neg %y : tensor<4xf32>\n  return %0 : tensor<4xf32>\n}\n",
     "graph functions take and return statically shaped tensors"),
])
def test_functions_the_compiler_cannot_take_are_refused_never_crash(tmp_path, text, reason):
    src = tmp_path / "bad.mlir"
    src.write_text(text)
    runs = [_run("tilefuse-compile", str(src), "-o", str(tmp_path / "x.tfa"))]
    runs += [_run("tilefuse-opt", str(src), f"--emit={stage}", f"--target={target}")
             for stage, target in [("fused", "cpu"), ("tile", "cpu"), ("llvm", "cpu"),
                                   ("cuda", "cuda:sm_90")]]
    for out in runs:
        assert out.returncode in (1, 2), (out.args, out.returncode, out.stderr[-2000:])
        assert reason in out.stderr or "arguments and results must be statically shaped" \
            in out.stderr, (out.args, out.stderr[-2000:])
    import tilefuse
    with pytest.raises(tilefuse.CompileError):
        tilefuse.parse(text).fuse()


def _npy_with_header(shape_text, payload=b""):
    """A .npy (version 1.0) whose header's shape is `shape_text` verbatim."""
    header = ("{'descr': '<f4', 'fortran_order': False, 'shape': (" + shape_text + "), }").encode()
    header += b" " * ((64 - (10 + len(header) + 1) % 64) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header + payload


@pytest.mark.parametrize("shape_text,reason", [
    ("-3, 4", "has '-3', not a dimension"),
    ("99999999999999999999999, 1", "does not fit in 64 bits"),
    ("4611686018427387904, 4", "more bytes than a 64-bit size can count"),
    ("3, x", "has ' x', not a dimension"),
])
def test_run_refuses_npy_headers_with_bad_shapes(tmp_path, shape_text, reason):
    src = tmp_path / "f.mlir"
    src.write_text("""
func.func @f(%x: tensor<3x4xf32>) -> tensor<3x4xf32> {
  %0 = graph.neg %x : tensor<3x4xf32>
  return %0 : tensor<3x4xf32>
}""")
    art = tmp_path / "f.tfa"
    assert _run("tilefuse-compile", str(src), "-o", str(art)).returncode == 0
    bad = tmp_path / "bad.npy"
    bad.write_bytes(_npy_with_header(shape_text, b"\0" * 48))
    out = _run("tilefuse-run", str(art), f"--inputs={bad}")
    assert out.returncode == 1 and reason in out.stderr, (out.returncode, out.stderr)


def test_run_takes_zero_size_arguments(tmp_path):
    src = tmp_path / "f.mlir"
    src.write_text("""
func.func @f(%x: tensor<0x4xf32>, %w: tensor<4x3xf32>) -> tensor<0x3xf32> {
  %0 = graph.matmul %x, %w : (tensor<0x4xf32>, tensor<4x3xf32>) -> tensor<0x3xf32>
  return %0 : tensor<0x3xf32>
}""")
    art = tmp_path / "f.tfa"
    assert _run("tilefuse-compile", str(src), "-o", str(art)).returncode == 0
    np.save(tmp_path / "x.npy", np.zeros((0, 4), np.float32))
    np.save(tmp_path / "w.npy", np.ones((4, 3), np.float32))
    out = _run("tilefuse-run", str(art), f"--inputs={tmp_path / 'x.npy'},{tmp_path / 'w.npy'}",
               f"--save={tmp_path / 'out'}")
    assert out.returncode == 0, out.stderr
    assert np.load(tmp_path / "out" / "result0.npy").shape == (0, 3)
