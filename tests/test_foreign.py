"""Tests for recon_jax.victims.foreign: foreign (safetensors / PyTorch) victims as flax networks.

The core tests write safetensors files with numpy and compare the imported
network with a numpy forward pass in PyTorch's conventions (NCHW inputs,
cross-correlation, flatten in C, H, W order); the torch tests skip when torch
is not installed.
"""

import os
import pickle
import struct
import sys
import zipfile

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from safetensors.numpy import save_file

from recon_jax.attacks import equations, kkt
from recon_jax.errors import ConfigError
from recon_jax.io import checkpoint
from recon_jax.io.checkpoint import CheckpointError
from recon_jax.types import Target
from recon_jax.victims import models
from recon_jax.victims.foreign import from_state_dict, load_foreign
from recon_jax.victims.models import ImportedCNN
from recon_jax.victims.state_dicts import detect_format, read_state_dict

pytestmark = pytest.mark.usefixtures("fast_compile_module")  # see conftest.fast_compile

TOL = dict(rtol=1e-6, atol=1e-6)


# ------------------------------------------------------------ numpy reference (torch rules)


def _relu(z):
  return np.maximum(z, 0)


def _conv2d_nchw(x, w, b, stride, pad):
  """PyTorch Conv2d: cross-correlation of NCHW ``x`` with OIHW ``w``, zero padding."""
  (sh, sw), (ph, pw) = stride, pad
  x = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
  _, _, h, wd = x.shape
  _, _, kh, kw = w.shape
  ho, wo = (h - kh) // sh + 1, (wd - kw) // sw + 1
  out = np.zeros((x.shape[0], w.shape[0], ho, wo))
  for i in range(kh):
    for j in range(kw):
      patch = x[:, :, i : i + sh * (ho - 1) + 1 : sh, j : j + sw * (wo - 1) + 1 : sw]
      out += np.einsum("nchw,oc->nohw", patch, w[:, :, i, j])
  if b is not None:
    out += b[None, :, None, None]
  return out


def _linear_stack(h, linears, act=_relu):
  """Linear layers ``(weight [out, in], bias or None)`` with ``act`` between them."""
  for k, (w, b) in enumerate(linears):
    h = h @ w.T + (0 if b is None else b)
    if k < len(linears) - 1:
      h = act(h)
  return h


def _nchw_flat(x_nhwc):
  return x_nhwc.transpose(0, 3, 1, 2).reshape(x_nhwc.shape[0], -1)


def _f64(a):
  return np.asarray(a, np.float64)


# ------------------------------------------------------------------------- fixtures


def _mlp_state_dict(names, bias_flags, dims, seed=0):
  """A torch-layout MLP state dict: weights ``[out, in]`` for ``dims`` d-h1-...-out."""
  rng = np.random.default_rng(seed)
  sd, linears = {}, []
  for name, bias, fan_in, out in zip(names, bias_flags, dims[:-1], dims[1:]):
    w = (rng.normal(size=(out, fan_in)) / np.sqrt(fan_in)).astype(np.float32)
    b = rng.normal(size=(out,)).astype(np.float32) if bias else None
    sd[f"{name}.weight"] = w
    if bias:
      sd[f"{name}.bias"] = b
    linears.append((_f64(w), None if b is None else _f64(b)))
  return sd, linears


MLP_CASES = {
  # The reference Haim et al. NeuralNetwork: bias in the first layer only.
  "reference_first": (["layers.0", "layers.1", "layers.2"], [True, False, False], "first"),
  # nn.Sequential(Linear, ReLU, Linear, ReLU, Linear): indices 0, 2, 4.
  "sequential_all": (["0", "2", "4"], [True, True, True], "all"),
  # Natural sort: 'net.2' < 'net.10' (a string sort would put 10 first).
  "natural_none": (["net.2", "net.10", "net.11"], [False, False, False], "none"),
  "custom_last": (["fc1", "fc2", "fc3"], [False, False, True], "custom"),
}


@pytest.mark.parametrize("case", sorted(MLP_CASES))
def test_mlp_matches_numpy_forward(tmp_path, case):
  names, flags, layout = MLP_CASES[case]
  shape = (3, 2, 2)  # (H, W, C) with C > 1, so the NCHW flatten order matters
  sd, linears = _mlp_state_dict(names, flags, [12, 7, 5, 3])
  path = str(tmp_path / "victim.safetensors")
  save_file(sd, path)
  imp = load_foreign(path, input_shape=shape)

  assert imp.format == "safetensors"
  assert imp.arch["kind"] == "mlp" and imp.arch["bias"] == layout
  assert imp.arch["widths"] == [7, 5] and imp.arch["out_dim"] == 3
  assert imp.arch["layer_bias"] == flags and imp.arch["first_linear_permuted"]
  assert imp.arch["layer_names"] == names
  assert list(imp.source_names) == [
    n + s for n, f in zip(names, flags) for s in ([".weight", ".bias"] if f else [".weight"])
  ]
  assert type(imp.module) is models.MLP and tuple(imp.module.widths) == (7, 5)
  assert imp.module.bias == (layout if layout != "custom" else tuple(flags))
  for leaf in jax.tree_util.tree_leaves(imp.params):
    assert leaf.dtype == np.float32

  x = np.random.default_rng(1).normal(size=(4, *shape)).astype(np.float32)
  apply_fn = models.make_apply_fn(imp.module)
  got = np.asarray(apply_fn(imp.params, jnp.asarray(x)))
  assert got.dtype == np.float32 and got.shape == (4, 3)
  np.testing.assert_allclose(got, _linear_stack(_f64(_nchw_flat(x)), linears), **TOL)
  # The attack's activation replaces ReLU everywhere.
  got_id = np.asarray(apply_fn(imp.params, jnp.asarray(x), lambda z: z))
  want_id = _linear_stack(_f64(_nchw_flat(x)), linears, act=lambda z: z)
  np.testing.assert_allclose(got_id, want_id, **TOL)

  # 'nhwc': the original network flattened in the library's order already.
  imp_nhwc = load_foreign(path, input_shape=shape, input_layout="nhwc")
  assert not imp_nhwc.arch["first_linear_permuted"]
  got = np.asarray(models.make_apply_fn(imp_nhwc.module)(imp_nhwc.params, jnp.asarray(x)))
  np.testing.assert_allclose(got, _linear_stack(_f64(x.reshape(4, -1)), linears), **TOL)


def test_mlp_input_shape_is_optional_and_checked(tmp_path):
  sd, linears = _mlp_state_dict(["layers.0", "layers.1"], [True, False], [6, 4, 1])
  path = str(tmp_path / "flat.safetensors")
  save_file(sd, path)
  imp = load_foreign(path)
  assert imp.arch["input_shape"] == [6] and not imp.arch["first_linear_permuted"]
  x = np.random.default_rng(2).normal(size=(3, 6)).astype(np.float32)
  np.testing.assert_allclose(
    np.asarray(imp.module.apply(imp.params, jnp.asarray(x))), _linear_stack(_f64(x), linears), **TOL
  )
  with pytest.raises(CheckpointError) as e:
    load_foreign(path, input_shape=(2, 2, 2))
  msg = str(e.value)
  assert "flat.safetensors" in msg and "layers.0.weight" in msg and "(4, 6)" in msg
  assert "input_shape (2, 2, 2)" in msg and "8 features" in msg and "\n" not in msg


def test_float64_import(tmp_path):
  sd, linears = _mlp_state_dict(["a.0", "a.1"], [True, True], [5, 3, 2])
  path = str(tmp_path / "m.safetensors")
  save_file(sd, path)
  imp = load_foreign(path, dtype=np.float64)
  assert all(a.dtype == np.float64 for a in jax.tree_util.tree_leaves(imp.params))
  x = np.random.default_rng(3).normal(size=(2, 5))
  np.testing.assert_allclose(
    np.asarray(imp.module.apply(imp.params, jnp.asarray(x))), _linear_stack(x, linears), rtol=1e-12
  )


# ---------------------------------------------------------------------------- CNNs


def _cnn_state_dict(seed=0):
  """Conv(3->4, 3x3) - Conv(4->5, 3x2, no bias) - Linear(?, 6) - Linear(6, 2) (torch layout)."""
  rng = np.random.default_rng(seed)

  def f32(*shape):  # fan-in scaled, so outputs stay O(1) and 1e-6 is a float32 tolerance
    scale = 0.5 if len(shape) == 1 else 1 / np.sqrt(np.prod(shape[1:]))
    return (rng.normal(size=shape) * scale).astype(np.float32)

  return {
    "features.0.weight": f32(4, 3, 3, 3),
    "features.0.bias": f32(4),
    "features.2.weight": f32(5, 4, 3, 2),
    "classifier.1.weight": None,
    "classifier.1.bias": f32(6),
    "classifier.3.weight": f32(2, 6),
    "classifier.3.bias": f32(2),
  }, f32


CNN_CASES = {
  # (stride, padding, numpy per-layer (stride pairs, padding pairs))
  "defaults": (1, 0, [((1, 1), (0, 0)), ((1, 1), (0, 0))]),
  "per_layer": ([1, (2, 1)], [(1, 1), 0], [((1, 1), (1, 1)), ((2, 1), (0, 0))]),
  "same": (1, "same", [((1, 1), (1, 1)), ((1, 1), (1, 0))]),
}


@pytest.mark.parametrize("case", sorted(CNN_CASES))
def test_cnn_matches_numpy_forward(tmp_path, case):
  stride, padding, np_cfg = CNN_CASES[case]
  shape = (7, 6, 3)
  sd, f32 = _cnn_state_dict()
  x = np.random.default_rng(4).normal(size=(3, *shape)).astype(np.float32)

  def features(x_nchw, act):
    h = x_nchw
    for name, bias, (s, p) in zip(["features.0", "features.2"], [True, False], np_cfg):
      b = _f64(sd[f"{name}.bias"]) if bias else None
      if case == "same" and name == "features.2":  # PyTorch 'same': extra pad at the end
        h = np.pad(h, ((0, 0), (0, 0), (0, 0), (0, 1)))
      h = act(_conv2d_nchw(h, _f64(sd[f"{name}.weight"]), b, s, p))
    return h

  fmap = features(_f64(x.transpose(0, 3, 1, 2)), _relu)
  sd["classifier.1.weight"] = f32(6, int(np.prod(fmap.shape[1:])))
  path = str(tmp_path / "cnn.safetensors")
  save_file(sd, path)
  imp = load_foreign(path, input_shape=shape, stride=stride, padding=padding)

  assert isinstance(imp.module, ImportedCNN) and imp.arch["kind"] == "cnn"
  assert [c["kernel_size"] for c in imp.arch["convs"]] == [[3, 3], [3, 2]]
  assert [c["bias"] for c in imp.arch["convs"]] == [True, False]
  assert imp.arch["convs"][1]["out_shape"] == [fmap.shape[2], fmap.shape[3], 5]
  assert imp.arch["widths"] == [6] and imp.arch["out_dim"] == 2 and imp.arch["bias"] == "all"
  assert imp.source_names[0] == "features.0.weight" and len(imp.source_names) == 7
  apply_fn = models.make_apply_fn(imp.module)
  linears = [
    (_f64(sd["classifier.1.weight"]), _f64(sd["classifier.1.bias"])),
    (_f64(sd["classifier.3.weight"]), _f64(sd["classifier.3.bias"])),
  ]
  want = _linear_stack(fmap.reshape(3, -1), linears)  # torch flattens C, H, W
  got = np.asarray(apply_fn(imp.params, jnp.asarray(x)))
  assert got.dtype == np.float32
  np.testing.assert_allclose(got, want, **TOL)
  ident = lambda z: z  # noqa: E731
  want_id = _linear_stack(
    features(_f64(x.transpose(0, 3, 1, 2)), ident).reshape(3, -1), linears, act=ident
  )
  np.testing.assert_allclose(
    np.asarray(apply_fn(imp.params, jnp.asarray(x), ident)), want_id, **TOL
  )


def test_cnn_needs_and_checks_input_shape(tmp_path):
  sd, f32 = _cnn_state_dict()
  sd["classifier.1.weight"] = f32(6, 5 * 3 * 3)  # 7x6 input, two valid convs -> 3x3x5
  path = str(tmp_path / "cnn.safetensors")
  save_file(sd, path)
  load_foreign(path, input_shape=(7, 6, 3))  # fits
  file_errors = [
    (dict(), "input_shape (H, W, C) is required"),
    (dict(input_shape=(7, 6, 1)), "'features.0.weight' has shape (4, 3, 3, 3)"),
    (dict(input_shape=(8, 6, 3)), "'classifier.1.weight' has shape (6, 45)"),
    (dict(input_shape=(2, 2, 3)), "larger than its padded input"),
  ]
  for kwargs, needle in file_errors:
    with pytest.raises(CheckpointError) as e:
      load_foreign(path, **kwargs)
    msg = str(e.value)
    assert needle in msg and "cnn.safetensors" in msg and "\n" not in msg, (kwargs, msg)
  # Arguments outside their domain: ConfigError naming the argument.
  arg_errors = [
    (dict(stride=[1, 1, 1]), "stride", "stride lists 3 entries"),
    (dict(stride=0), "stride", "stride for conv layer 0 must be >= 1"),
    (dict(stride=1.5), "stride", "must be an int or an (h, w) pair"),
    (dict(padding=-1), "padding", "padding for conv layer 0 must be >= 0"),
    (dict(padding="full"), "padding", "'valid' or 'same'"),
    (dict(stride=2, padding="same"), "padding", "'same' needs stride 1"),
    (dict(input_layout="chw"), "input_layout", "input_layout must be one of"),
    (dict(input_shape=(7, 0, 3)), "input_shape", "input_shape must be positive"),
  ]
  for kwargs, argument, needle in arg_errors:
    kwargs = {"input_shape": (7, 6, 3), **kwargs}
    with pytest.raises(ConfigError) as e:
      load_foreign(path, **kwargs)
    msg = str(e.value)
    assert e.value.argument == argument and needle in msg and "\n" not in msg, (kwargs, msg)


# ------------------------------------------------------------------------------- KKT


def test_imported_mlp_gives_the_native_kkt_loss(tmp_path):
  shape = (2, 2, 2)
  native = models.MLP(widths=(6, 5), out_dim=1, bias="first")
  params = models.init_params(native, jax.random.PRNGKey(0), shape, jnp.float32)
  p = params["params"]
  # What PyTorch would hold for the same network trained on NCHW-flattened
  # images: weights [out, in], the first layer's columns in C, H, W order.
  k0 = np.asarray(p["layer_0"]["kernel"])  # [H*W*C, 6], rows in H, W, C order
  w0 = k0.reshape(2, 2, 2, 6).transpose(3, 2, 0, 1).reshape(6, 8)
  sd = {
    "layers.0.weight": w0,
    "layers.0.bias": np.asarray(p["layer_0"]["bias"]),
    "layers.1.weight": np.asarray(p["layer_1"]["kernel"]).T,
    "layers.2.weight": np.asarray(p["layer_2"]["kernel"]).T,
  }
  path = str(tmp_path / "victim.safetensors")
  save_file({k: np.ascontiguousarray(v) for k, v in sd.items()}, path)
  imp = load_foreign(path, input_shape=shape)
  assert type(imp.module) is models.MLP and imp.module == native
  jax.tree_util.tree_map(
    np.testing.assert_array_equal, imp.params, jax.tree_util.tree_map(np.asarray, params)
  )

  m = 4
  rng = np.random.default_rng(5)
  x = jnp.asarray(rng.normal(size=(m, *shape)), jnp.float32)
  labels = jnp.asarray([1.0, -1.0, 1.0, -1.0], jnp.float32)
  lam = jnp.asarray(rng.uniform(0.5, 2.0, size=m), jnp.float32)
  hp = {
    "lr_x": jnp.float32(0.01),
    "lr_lam": jnp.float32(0.01),
    "alpha": jnp.float32(3.0),
    "lam_min": jnp.float32(0.05),
  }
  losses = []
  for module, prm in ((native, params), (imp.module, imp.params)):
    apply_fn = models.make_apply_fn(module)
    stat = jax.jit(equations.stationarity, static_argnums=(0, 1, 6))(
      apply_fn, "binary", prm, x, lam, labels, None
    )
    assert np.isfinite(float(stat)) and float(stat) > 0
    target = Target(prm, labels, jnp.float32(-1.0), jnp.float32(1.0))
    attack = kkt.kkt_attack(apply_fn, "binary")
    state = attack.init(jax.random.PRNGKey(1), hp, target, x)
    step = jax.jit(attack.step)
    state, metrics = step(state, hp, target)
    _, metrics2 = step(state, hp, target)
    losses.append((float(stat), float(metrics["loss"]), float(metrics2["loss"])))
  assert losses[0] == losses[1]


# -------------------------------------------------------------------------- formats


def test_detect_format_reads_content_not_extension(tmp_path):
  sd, _ = _mlp_state_dict(["0"], [True], [3, 2])
  st = tmp_path / "weights.png"
  save_file(sd, str(st))
  assert detect_format(str(st)) == "safetensors"
  ck = tmp_path / "model.safetensors"
  checkpoint.save(str(ck), {"params": {"layer_0": {"kernel": np.ones((3, 2))}}}, {})
  assert detect_format(str(ck)) == "msgpack"
  zp = tmp_path / "model.msgpack"
  with zipfile.ZipFile(zp, "w") as zf:
    zf.writestr("archive/data.pkl", b"\x80\x02}q\x00.")
  assert detect_format(str(zp)) == "torch"
  legacy = tmp_path / "model.zip"
  legacy.write_bytes(pickle.dumps({"a": 1}, protocol=2))
  assert detect_format(str(legacy)) == "torch"


def test_recon_jax_checkpoint_is_pointed_to_checkpoint_load(tmp_path):
  ck = tmp_path / "victim.msgpack"
  checkpoint.save(str(ck), {"params": {"layer_0": {"kernel": np.ones((3, 2))}}}, {})
  with pytest.raises(CheckpointError, match="recon_jax.io.checkpoint.load"):
    load_foreign(str(ck))


def _png_bytes():
  import zlib

  def chunk(tag, data):
    return (
      struct.pack(">I", len(data))
      + tag
      + data
      + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)
    )

  ihdr = struct.pack(">IIBBBBB", 1, 1, 8, 0, 0, 0, 0)
  return (
    b"\x89PNG\r\n\x1a\n"
    + chunk(b"IHDR", ihdr)
    + chunk(b"IDAT", zlib.compress(b"\x00\x00"))
    + chunk(b"IEND", b"")
  )


def _bad_files(tmp_path):
  """``{file name: (bytes or state dict to save, load_foreign kwargs)}``."""
  sd, _ = _mlp_state_dict(["layers.0", "layers.1", "layers.2"], [True, False, False], [8, 5, 4, 1])
  good = tmp_path / "good.safetensors"
  save_file(sd, str(good))
  blob = good.read_bytes()
  (header_len,) = struct.unpack("<Q", blob[:8])
  broken_chain = dict(sd, **{"layers.1.weight": np.ones((4, 3), np.float32)})
  npz = tmp_path / "tmp.npz"
  np.savez(npz, w=np.ones(3))
  return {
    "random.safetensors": (np.random.default_rng(0).bytes(256), {}),
    "empty.pth": (b"", {}),
    "truncated_header.safetensors": (blob[: 8 + header_len // 2], {}),
    "truncated_data.safetensors": (blob[:-7], {}),
    "image.safetensors": (_png_bytes(), {}),
    "notes.pth": (b"these are not the weights you are looking for\n" * 4, {}),
    "arrays.pth": (npz.read_bytes(), {}),
    "truncated.pth": (b"PK\x03\x04" + b"\x00" * 40, {}),
    "chain.safetensors": (broken_chain, {}),
    "in_features.safetensors": (sd, {"input_shape": (3, 3, 1)}),
    "bias_shape.safetensors": (dict(sd, **{"layers.0.bias": np.ones(4, np.float32)}), {}),
    "batchnorm.safetensors": (
      dict(sd, **{"bn.weight": np.ones(5, np.float32), "bn.bias": np.ones(5, np.float32)}),
      {},
    ),
    "buffer.safetensors": (dict(sd, **{"bn.running_mean": np.ones(5, np.float32)}), {}),
    "nan.safetensors": (dict(sd, **{"layers.2.weight": np.full((1, 4), np.nan, np.float32)}), {}),
    "no_layers.safetensors": ({}, {}),
    "zeros.safetensors": ({k: np.zeros_like(v) for k, v in sd.items()}, {}),
  }


def test_bad_files_raise_one_line_errors_naming_the_file(tmp_path):
  needles = {
    "chain.safetensors": ["'layers.1.weight'", "(4, 3)", "'layers.0.weight'", "(5, 8)"],
    "in_features.safetensors": ["'layers.0.weight'", "(5, 8)", "(3, 3, 1)"],
    "bias_shape.safetensors": ["'layers.0.bias'", "(4,)", "(5,)"],
    "truncated_header.safetensors": ["truncated"],
    "truncated_data.safetensors": ["truncated"],
    "batchnorm.safetensors": ["'bn.weight'"],
    "buffer.safetensors": ["'bn.running_mean'"],
    "nan.safetensors": ["NaN"],
    "no_layers.safetensors": ["no "],
    "zeros.safetensors": ["every weight is zero"],
    "arrays.pth": ["not a PyTorch checkpoint"],
  }
  for name, (content, kwargs) in _bad_files(tmp_path).items():
    path = tmp_path / name
    if isinstance(content, bytes):
      path.write_bytes(content)
    else:
      save_file(content, str(path))
    with pytest.raises(CheckpointError) as e:
      load_foreign(str(path), **kwargs)
    msg = str(e.value)
    assert name in msg and "\n" not in msg, (name, msg)
    for needle in needles.get(name, []):
      assert needle in msg, (name, msg)
  with pytest.raises(CheckpointError, match="missing.safetensors: checkpoint file not found"):
    load_foreign(str(tmp_path / "missing.safetensors"))


def test_torch_file_without_torch_says_how_to_install(tmp_path, monkeypatch):
  path = tmp_path / "victim.pth"
  with zipfile.ZipFile(path, "w") as zf:
    zf.writestr("archive/data.pkl", b"\x80\x02}q\x00.")
  monkeypatch.setitem(sys.modules, "torch", None)  # makes `import torch` fail
  with pytest.raises(CheckpointError) as e:
    read_state_dict(str(path))
  msg = str(e.value)
  assert 'pip install -e ".[torch]"' in msg and "victim.pth" in msg and "\n" not in msg


def test_from_state_dict_layer_order(tmp_path):
  # Names with no order in them: 'layer_order' gives it.
  sd, linears = _mlp_state_dict(["out", "hidden", "inp"], [False, True, True], [4, 3, 5, 2])
  order = ["out", "hidden", "inp"]  # the network order (the widths chain 4-3-5-2)
  with pytest.raises(CheckpointError, match="do not chain"):
    from_state_dict(sd)  # natural sort: hidden, inp, out
  imp = from_state_dict(sd, layer_order=order)
  assert imp.format == "state_dict" and imp.arch["bias"] == "custom"
  x = np.random.default_rng(6).normal(size=(2, 4)).astype(np.float32)
  np.testing.assert_allclose(
    np.asarray(imp.module.apply(imp.params, jnp.asarray(x))), _linear_stack(_f64(x), linears), **TOL
  )
  with pytest.raises(ConfigError, match="layer_order") as e:
    from_state_dict(sd, layer_order=["out", "hidden"])
  assert e.value.argument == "layer_order"
  sd["conv.weight"] = np.ones((1, 1, 1, 1), np.float32)
  with pytest.raises(ConfigError, match="Conv2d layer of state dict after a Linear layer"):
    from_state_dict(sd, layer_order=order + ["conv"])


# ---------------------------------------------------------------------------- torch


def _torch():
  return pytest.importorskip("torch")


def test_torch_reference_network_matches_torch_forward(tmp_path):
  torch = _torch()
  nn = torch.nn

  class NeuralNetwork(nn.Module):
    """Haim et al.'s victim: d-1000-1000-1, bias in the first layer only."""

    def __init__(self, d, width=1000):
      super().__init__()
      self.layers = nn.ModuleList(
        [
          nn.Linear(d, width, bias=True),
          nn.Linear(width, width, bias=False),
          nn.Linear(width, 1, bias=False),
        ]
      )

    def forward(self, x):
      h = x.view(x.shape[0], -1)
      for layer in self.layers[:-1]:
        h = torch.relu(layer(h))
      return self.layers[-1](h)

  torch.manual_seed(0)
  shape = (32, 32, 3)
  net = NeuralNetwork(int(np.prod(shape)))
  path = tmp_path / "victim.pth"
  torch.save(
    {"state_dict": net.state_dict(), "epoch": 7, "note": "text", "best_acc": torch.tensor(0.9)},
    str(path),
  )
  assert detect_format(str(path)) == "torch"
  imp = load_foreign(str(path), input_shape=shape)
  assert imp.format == "torch" and type(imp.module) is models.MLP
  assert imp.arch["bias"] == "first" and imp.arch["widths"] == [1000, 1000]
  assert imp.source_names == (
    "layers.0.weight",
    "layers.0.bias",
    "layers.1.weight",
    "layers.2.weight",
  )
  x = np.random.default_rng(7).uniform(size=(5, *shape)).astype(np.float32)
  with torch.no_grad():
    want = net(torch.from_numpy(x.transpose(0, 3, 1, 2).copy())).numpy()
  got = np.asarray(models.make_apply_fn(imp.module)(imp.params, jnp.asarray(x)))
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)

  # Legacy (pre-zip) serialisation, nested under 'model'.
  legacy = tmp_path / "legacy.pt"
  torch.save({"model": net.state_dict()}, str(legacy), _use_new_zipfile_serialization=False)
  assert detect_format(str(legacy)) == "torch"
  imp2 = load_foreign(str(legacy), input_shape=shape)
  jax.tree_util.tree_map(np.testing.assert_array_equal, imp.params, imp2.params)


def test_torch_cnn_matches_torch_forward(tmp_path):
  torch = _torch()
  nn = torch.nn
  torch.manual_seed(1)
  shape = (9, 8, 3)
  net = nn.Sequential(
    nn.Conv2d(3, 4, 3, padding=1),
    nn.ReLU(),
    nn.Conv2d(4, 6, (3, 2), stride=2, bias=False),
    nn.ReLU(),
    nn.Flatten(),
    nn.Linear(6 * 4 * 4, 7),
    nn.ReLU(),
    nn.Linear(7, 3),
  )
  path = tmp_path / "cnn.pt"
  torch.save(net.state_dict(), str(path))
  imp = load_foreign(str(path), input_shape=shape, stride=[1, 2], padding=[1, 0])
  assert imp.arch["convs"][1]["out_shape"] == [4, 4, 6]
  x = np.random.default_rng(8).normal(size=(4, *shape)).astype(np.float32)
  with torch.no_grad():
    want = net(torch.from_numpy(x.transpose(0, 3, 1, 2).copy())).numpy()
  got = np.asarray(models.make_apply_fn(imp.module)(imp.params, jnp.asarray(x)))
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
  with pytest.raises(CheckpointError, match="stride, padding or pooling"):
    load_foreign(str(path), input_shape=shape)  # stride 1 everywhere: 6*7*7 features
  blob = path.read_bytes()
  for cut in (100, len(blob) // 2, len(blob) - 30):
    cut_path = tmp_path / f"cut{cut}.pt"
    cut_path.write_bytes(blob[:cut])
    with pytest.raises(CheckpointError, match=f"cut{cut}.pt: malformed or truncated"):
      load_foreign(str(cut_path), input_shape=shape)
  torch.save(net, str(tmp_path / "whole.pt"))  # a pickled module, not a state dict
  with pytest.raises(CheckpointError, match=r"whole.pt: refused .*state_dict\(\)"):
    load_foreign(str(tmp_path / "whole.pt"), input_shape=shape)


class _Marker:
  """Unpickling this creates a marker file: a harmless stand-in for running code."""

  def __init__(self, path):
    self.path = path

  def __reduce__(self):
    return (open, (self.path, "w"))


@pytest.mark.parametrize("legacy", [False, True])
def test_torch_pickle_that_runs_code_is_refused(tmp_path, legacy):
  torch = _torch()
  marker = tmp_path / "marker.txt"
  path = tmp_path / "evil.pth"
  payload = {"layers.0.weight": torch.ones(2, 3), "trap": _Marker(str(marker))}
  if legacy:
    path.write_bytes(pickle.dumps(payload, protocol=2))
  else:
    torch.save(payload, str(path))
  # Unpickled without weights_only, the payload would create the marker.
  assert not marker.exists()
  with pytest.raises(CheckpointError) as e:
    load_foreign(str(path))
  msg = str(e.value)
  assert "evil.pth" in msg and "refused" in msg and "\n" not in msg, msg
  assert not marker.exists()
  assert not os.listdir(tmp_path) or set(os.listdir(tmp_path)) == {"evil.pth"}
