"""The WORKLOADS.md models written with tilefuse (tilefuse.workloads), traced
and run on the reference interpreter, against independent numpy versions
(numpy_reference.py).

Tolerances (never loosened to make a test pass):
* a float32 graph is compared with the numpy model computed in float64 from
  the same float32 parameters: loss within 1e-5 relative; logits within
  1e-5 of the largest |logit| (max-abs error, since single logits can be ~0);
* a float64 graph: 1e-10 relative on the loss, 1e-10 of the largest |logit|.
Dropout masks are reproduced exactly (same Philox bits, same stream order),
so training-mode results are compared with the same tolerances.
"""
import numpy as np
import pytest

import tilefuse
import tilefuse.functional as F
from tilefuse import workloads as W

import numpy_reference as R

SEED = np.int64(-0x0123456789ABCDEF)  # both 32-bit halves of the key matter
TOL = {np.float32: 1e-5, np.float64: 1e-10}


def _jitter(params, seed):
    """Adds noise to every 1-d parameter (biases, LayerNorm weights), which
    are 0 or 1 at init, so that they are exercised."""
    rng = np.random.default_rng(seed)
    return {k: v + rng.normal(0.0, 0.05, v.shape).astype(v.dtype) if v.ndim == 1 else v
            for k, v in params.items()}


def _run(loss_fn, params, batch, seed=SEED):
    graph = tilefuse.trace(loss_fn, params, batch, seed)
    return graph.interpret(params, batch, seed)


def _check_loss(got, want, dtype):
    assert np.asarray(got).dtype == dtype
    rel = abs(float(got) - want) / abs(want)
    assert rel <= TOL[dtype], f"loss {float(got)!r} vs reference {want!r}: relative error {rel:.3g}"


def _check_array(got, want, dtype):
    assert got.shape == want.shape and got.dtype == dtype
    err = np.abs(got.astype(np.float64) - want).max() / np.abs(want).max()
    assert err <= TOL[dtype], f"max error {err:.3g} of the largest |value|"


# ---------------------------------------------------------------------------
# dropout randomness: the reference Philox, then the graph against it
# ---------------------------------------------------------------------------

def test_reference_philox_known_answers():
    """Published Philox 4x32-10 known answers (Random123 kat_vectors)."""
    cases = [
        ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
        ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
        ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
         (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
    ]
    for ctr, key, want in cases:
        got = R.philox4x32_10(*ctr, *key)
        assert tuple(int(w) for w in got) == want


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_random_uniform_matches_reference(dtype):
    """graph.random_uniform values, bit for bit (dropout masks alone cannot
    tell 24 from 32 random bits). The op has no public Python wrapper, so
    this goes through the tracer binding directly."""
    shape, stream = (3, 7), 5
    name = {np.float32: "f32", np.float64: "f64"}[dtype]

    def fn(seed):
        return tilefuse.Tensor(seed._tracer, seed._tracer.random_uniform(seed._id, name,
                                                                         list(shape), stream))

    got = tilefuse.trace(fn, SEED).interpret(SEED)
    want = R.random_uniform(SEED, stream, shape, dtype)
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_dropout_masks_and_streams_match_reference(dtype):
    """Three dropout calls in one trace draw streams 0, 1, 2; the masks
    match the numpy Philox bit for bit (odd sizes: a partial last block)."""
    shapes = [(3, 5), (7,), (2, 3, 11)]
    ps = [0.1, 0.5, 0.9]
    xs = [np.ones(s, dtype) for s in shapes]

    def fn(xs, seed):
        return [F.dropout(x, p, True, seed=seed) for x, p in zip(xs, ps)]

    outs = tilefuse.trace(fn, xs, SEED).interpret(xs, SEED)
    for stream, (out, p, shape) in enumerate(zip(outs, ps, shapes)):
        u = R.random_uniform(SEED, stream, shape, dtype)
        keep = u >= dtype(p)
        np.testing.assert_array_equal(out != 0, keep)
        np.testing.assert_allclose(out[keep], 1.0 / (1.0 - p), rtol=TOL[dtype])
        assert 0 < keep.sum() < keep.size


# ---------------------------------------------------------------------------
# gpt2_mini
# ---------------------------------------------------------------------------

GPT2_SMALL = dict(n_layer=2, d_model=32, n_head=4, seq=16, vocab=64, batch=2)


def _gpt2_case(dtype, training, **overrides):
    cfg = W.gpt2_mini_config(**overrides)
    params = _jitter(W.gpt2_mini_init(cfg, seed=0, dtype=dtype), seed=1)
    batch = W.gpt2_mini_batch(cfg, seed=2)
    fn = lambda p, b, s: W.gpt2_mini_loss_and_logits(p, b, s, cfg, training)  # noqa: E731
    loss, logits = _run(fn, params, batch)
    ref_loss, ref_logits = R.gpt2_mini(params, batch["tokens"], SEED, cfg, training,
                                       dtype=np.float64, mask_dtype=dtype)
    return cfg, (loss, logits), (ref_loss, ref_logits)


@pytest.fixture(scope="module")
def gpt2_f32_runs():
    """WORKLOADS.md CPU sizes in float32, training and eval (the slow part)."""
    return {training: _gpt2_case(np.float32, training) for training in (True, False)}


@pytest.mark.parametrize("training", [True, False])
def test_gpt2_mini_f32_loss(gpt2_f32_runs, training):
    cfg, (loss, _), (ref_loss, _) = gpt2_f32_runs[training]
    assert (cfg["n_layer"], cfg["d_model"], cfg["n_head"], cfg["seq"], cfg["vocab"],
            cfg["batch"]) == (2, 128, 4, 128, 1024, 4)
    _check_loss(loss, ref_loss, np.float32)


@pytest.mark.parametrize("training", [True, False])
def test_gpt2_mini_f32_logits(gpt2_f32_runs, training):
    cfg, (_, logits), (_, ref_logits) = gpt2_f32_runs[training]
    assert logits.shape == (cfg["batch"], cfg["seq"], cfg["vocab"])
    _check_array(logits, ref_logits, np.float32)


def test_gpt2_mini_dropout_is_active(gpt2_f32_runs):
    (_, (train, _), _), (_, (ev, _), _) = gpt2_f32_runs[True], gpt2_f32_runs[False]
    assert abs(float(train) - float(ev)) > 1e-4 * abs(float(ev))


@pytest.mark.parametrize("training", [True, False])
def test_gpt2_mini_f64_small(training):
    _, (loss, logits), (ref_loss, ref_logits) = _gpt2_case(np.float64, training, **GPT2_SMALL)
    _check_loss(loss, ref_loss, np.float64)
    _check_array(logits, ref_logits, np.float64)


def test_gpt2_mini_f64_detects_wrong_dropout_streams():
    """The comparison has teeth: the reference with another seed (other
    masks) is far outside the tolerance."""
    cfg = W.gpt2_mini_config(**GPT2_SMALL)
    params = _jitter(W.gpt2_mini_init(cfg, dtype=np.float64), seed=1)
    batch = W.gpt2_mini_batch(cfg, seed=2)
    fn = lambda p, b, s: W.gpt2_mini_loss(p, b, s, cfg)  # noqa: E731
    loss = float(_run(fn, params, batch))
    other, _ = R.gpt2_mini(params, batch["tokens"], SEED + 1, cfg, True)
    assert abs(loss - other) > 1e3 * TOL[np.float64] * abs(other)


def test_gpt2_mini_logits_function():
    """gpt2_mini_logits on its own (inputs [B, T] with T < seq)."""
    cfg = W.gpt2_mini_config(**GPT2_SMALL)
    params = _jitter(W.gpt2_mini_init(cfg, dtype=np.float64), seed=1)
    tokens = W.gpt2_mini_batch(cfg, seed=2)["tokens"][:, :10]
    g = tilefuse.trace(lambda p, t: W.gpt2_mini_logits(p, t, None, cfg), params, tokens)
    got = g.interpret(params, tokens)
    # the reference reads inputs tokens[:, :-1]: append a dummy target column
    with_target = np.concatenate([tokens, tokens[:, :1]], axis=1)
    _, want = R.gpt2_mini(params, with_target, 0, cfg, training=False)
    _check_array(got, want, np.float64)


# ---------------------------------------------------------------------------
# mlp_mnist
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("batch_size", [32, 64])
def test_mlp_mnist(batch_size, training, dtype):
    cfg = W.mlp_mnist_config(batch=batch_size)
    params = W.mlp_mnist_init(cfg, seed=3, dtype=dtype)
    batch = W.mlp_mnist_batch(cfg, seed=4, dtype=dtype)
    loss = _run(lambda p, b, s: W.mlp_mnist_loss(p, b, s, cfg, training), params, batch)
    want = R.mlp_mnist(params, batch["x"], batch["y"], SEED, cfg, training,
                       dtype=np.float64, mask_dtype=dtype)
    _check_loss(loss, want, dtype)


# ---------------------------------------------------------------------------
# deepfm
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_deepfm(dtype):
    cfg = W.deepfm_config()
    assert cfg["batch"] == 240 and cfg["n_users"] + cfg["n_movies"] == 10334
    params = _jitter(W.deepfm_init(cfg, seed=5, dtype=dtype), seed=6)
    batch = W.deepfm_batch(cfg, seed=7, dtype=dtype)
    loss = _run(lambda p, b, s: W.deepfm_loss(p, b, s, cfg), params, batch)
    want = R.deepfm(params, batch["user"], batch["movie"], batch["label"], cfg)
    _check_loss(loss, want, dtype)
