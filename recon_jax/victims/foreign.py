"""A foreign (PyTorch / safetensors) victim as a flax network, so users can attack their own models.

A foreign checkpoint is read as a flat state dict of numpy arrays by
:mod:`recon_jax.victims.state_dicts` (no torch needed for safetensors; ``torch.load(...,
weights_only=True)`` for PyTorch files, which refuses pickles that would run code), then
mapped here onto a flax network with the library's calling convention
``module.apply(params, x, act=None)`` on NHWC inputs, so
:func:`recon_jax.victims.models.make_apply_fn` and every attack work on it unchanged.

What is inferred from tensor names and shapes:

* the layers: each ``<prefix>.weight`` (with an optional ``<prefix>.bias``) is
  a layer; a 2-D weight ``[out, in]`` is a Linear layer, a 4-D weight
  ``[out, in, kh, kw]`` (OIHW) a Conv2d layer;
* their order: natural sort of the prefixes (``layers.2`` before
  ``layers.10``), convolutions before Linear layers (a small CNN is a stack of
  convolutions followed by Linear layers); ``layer_order=`` overrides it;
* widths, output size, conv kernel sizes and channels, and which layers have a
  bias.

What must be given: ``input_shape`` (H, W, C) for convolutional networks (for
MLPs it is checked against the first layer's in-features), the conv
``stride``/``padding`` (PyTorch's defaults 1 and 0 unless told), and
``input_layout``, the order in which the original network flattened features
into its first Linear layer ('nchw', PyTorch's ``x.flatten(1)`` of an NCHW
tensor, is the default).  Pooling, normalisation layers, dilation, groups and
activations other than ReLU cannot be expressed and are refused or caught as
shape mismatches.

MLPs become :class:`recon_jax.victims.models.MLP` parameters (names ``layer_i``), so
everything in the library that knows that class works on them: a bias layout of
'first', 'all' or 'none' is its ``bias`` mode, any other one flag per layer.
Convolutional networks become an :class:`recon_jax.victims.models.ImportedCNN`.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, Mapping, NamedTuple, Optional, Sequence

import flax.linen as nn
import numpy as np

from recon_jax.errors import ConfigError
from recon_jax.io.checkpoint import CheckpointError
from recon_jax.victims import models, state_dicts

INPUT_LAYOUTS = ("nchw", "nhwc")


class Imported(NamedTuple):
  """A foreign network mapped onto flax.

  Attributes:
    params: flax variable dict ``{'params': ...}``.
    module: flax module; ``models.make_apply_fn(module)`` gives the
      ``apply_fn(params, x, act=None)`` the attacks take, on NHWC inputs.
    format: 'safetensors', 'torch' or 'state_dict' (from :func:`from_state_dict`).
    arch: JSON-able description of what was inferred and assumed.
    source_names: the state-dict tensor names used, in layer order.
  """

  params: dict
  module: nn.Module
  format: str
  arch: dict
  source_names: tuple


# --------------------------------------------------------------------------
# State dict -> flax.
# --------------------------------------------------------------------------
def _natural_key(name: str):
  """Sort key comparing runs of digits as integers: 'layers.2' < 'layers.10'."""
  return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


def _pair(v, what: str, i: int, source: str) -> tuple[int, int]:
  if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
    return int(v), int(v)
  if (
    isinstance(v, (tuple, list))
    and len(v) == 2
    and all(isinstance(a, (int, np.integer)) and not isinstance(a, bool) for a in v)
  ):
    return int(v[0]), int(v[1])
  raise ConfigError(
    f"{what} for conv layer {i} must be an int or an (h, w) pair, got {v!r} ({source}).",
    argument=what,
  )


def _per_layer(value, n: int, what: str, source: str) -> list:
  """``value`` for each of ``n`` conv layers: one int/str for all, or a list of n."""
  if not isinstance(value, (list, tuple)):
    return [value] * n  # one value for all layers (checked per layer)
  value = list(value)
  if len(value) != n:
    raise ConfigError(
      f"{what} lists {len(value)} entries, but {source} has {n} conv layers; give one "
      f"int for all layers or one entry (int or (h, w) pair) per layer.",
      argument=what,
    )
  return value


def _conv_padding(p, kernel, stride, i, source) -> tuple[tuple[int, int], tuple[int, int]]:
  """PyTorch padding (int, (h, w), 'valid' or 'same') as explicit flax pads."""
  if isinstance(p, str):
    if p == "valid":
      return (0, 0), (0, 0)
    if p == "same":
      if stride != (1, 1):
        raise ConfigError(
          f"padding 'same' needs stride 1 (as in PyTorch); conv layer {i} "
          f"of {source} has stride {stride}.",
          argument="padding",
        )
      # PyTorch pads k-1 in total, the extra one at the end.
      return tuple(((k - 1) // 2, k - 1 - (k - 1) // 2) for k in kernel)
    raise ConfigError(
      f"padding for conv layer {i} must be an int, an (h, w) pair, 'valid' "
      f"or 'same', got {p!r} ({source}).",
      argument="padding",
    )
  ph, pw = _pair(p, "padding", i, source)
  if ph < 0 or pw < 0:
    raise ConfigError(
      f"padding for conv layer {i} must be >= 0, got {p!r} ({source}).", argument="padding"
    )
  return (ph, ph), (pw, pw)


def _collect_layers(sd: Mapping[str, np.ndarray], source: str) -> dict:
  """Groups ``<prefix>.weight`` / ``<prefix>.bias`` tensors into layers.

  Returns ``{prefix: (weight_name, bias_name_or_None)}``; any other tensor, or
  a weight that is neither 2-D (Linear) nor 4-D (Conv2d), is refused, since
  dropping it would silently change the network.
  """
  layers, biases = {}, {}
  for name in sd:
    if name == "weight" or name.endswith(".weight"):
      layers[name[: -len("weight")].rstrip(".")] = name
    elif name == "bias" or name.endswith(".bias"):
      biases[name[: -len("bias")].rstrip(".")] = name
    else:
      raise CheckpointError(
        f"{source}: tensor {name!r} (shape {tuple(np.shape(sd[name]))}) is not a Linear/Conv2d "
        f"weight or bias; only plain stacks of Linear and Conv2d layers can be imported."
      )
  for prefix, bname in biases.items():
    if prefix not in layers:
      raise CheckpointError(f"{source}: tensor {bname!r} is a bias without a matching weight.")
  if not layers:
    raise CheckpointError(f"{source}: the state dict has no Linear or Conv2d weights.")
  for prefix, wname in layers.items():
    w = sd[wname]
    if np.ndim(w) not in (2, 4):
      raise CheckpointError(
        f"{source}: tensor {wname!r} has shape {tuple(np.shape(w))}; only 2-D Linear and "
        f"4-D Conv2d weights can be imported (normalisation layers cannot)."
      )
    if 0 in np.shape(w):
      raise CheckpointError(
        f"{source}: tensor {wname!r} has shape {tuple(np.shape(w))}: a layer with no "
        "inputs or no outputs (a dimension of 0); the file holds no usable model."
      )
    if not np.issubdtype(np.asarray(w).dtype, np.floating):
      raise CheckpointError(
        f"{source}: tensor {wname!r} has dtype {np.asarray(w).dtype}, not floating point."
      )
  return {p: (w, biases.get(p)) for p, w in layers.items()}


def _ordered(layers: dict, sd, layer_order, source: str) -> list:
  """Layer prefixes in network order: convs, then Linears, each naturally sorted."""
  if layer_order is not None:
    order = [str(p) for p in layer_order]
    if sorted(order) != sorted(layers):
      raise ConfigError(
        f"layer_order {order} must list each layer prefix of {source} once: "
        f"{sorted(layers, key=_natural_key)}.",
        argument="layer_order",
      )
    return order
  convs = sorted((p for p in layers if np.ndim(sd[layers[p][0]]) == 4), key=_natural_key)
  linears = sorted((p for p in layers if np.ndim(sd[layers[p][0]]) == 2), key=_natural_key)
  return convs + linears


def _check_bias(sd, wname, bname, out: int, source: str) -> None:
  if bname is not None and tuple(np.shape(sd[bname])) != (out,):
    raise CheckpointError(
      f"{source}: tensor {bname!r} has shape {tuple(np.shape(sd[bname]))}, but "
      f"{wname!r} has {out} outputs, so it needs shape ({out},)."
    )


def _nchw_columns_to_nhwc(w: np.ndarray, c: int, h: int, wd: int) -> np.ndarray:
  """Linear weight [out, C*H*W] (NCHW flatten) -> flax kernel [H*W*C, out] (NHWC flatten)."""
  out = w.shape[0]
  return w.reshape(out, c, h, wd).transpose(2, 3, 1, 0).reshape(h * wd * c, out)


def _bias_layout(flags: Sequence[bool]) -> str:
  if all(flags):
    return "all"
  if not any(flags):
    return "none"
  if flags[0] and not any(flags[1:]):
    return "first"
  return "custom"


def _shape(sd, name) -> tuple:
  return tuple(int(s) for s in np.shape(sd[name]))


def from_state_dict(
  state_dict: Mapping[str, Any],
  *,
  input_shape: Optional[Sequence[int]] = None,
  input_layout: str = "nchw",
  stride=1,
  padding=0,
  dtype=np.float32,
  layer_order: Optional[Sequence[str]] = None,
  source: str = "state dict",
  format: str = "state_dict",
) -> Imported:
  """Maps a PyTorch-convention state dict onto a flax network (see module docstring).

  Args:
    state_dict: ``{name: array}``; Linear weights ``[out, in]``, Conv2d weights
      ``[out, in, kh, kw]``, biases ``[out]`` (numpy or anything ``np.asarray``
      takes, e.g. ``{k: v.numpy() for k, v in model.state_dict().items()}``).
    input_shape: one input without the batch dimension, ``(H, W, C)`` (NHWC,
      as the library feeds it); required for convolutional networks.  For an
      MLP it may be ``(d,)`` or left out (then ``(d,)`` from the first layer);
      when given, ``prod(input_shape)`` must equal the first layer's in-features.
    input_layout: how the original network flattened features into its first
      Linear layer: 'nchw' (PyTorch, ``x.flatten(1)`` of an NCHW tensor; the
      first Linear layer's columns are permuted so NHWC inputs give the same
      outputs) or 'nhwc' (already in the library's order; no permutation).
    stride: conv strides: one int for all conv layers, or one entry (int or
      (h, w) pair) per conv layer.  PyTorch's default is 1.
    padding: conv zero padding, likewise; entries may also be 'valid' or
      'same'.  PyTorch's default is 0.
    dtype: dtype of the returned parameters.
    layer_order: layer prefixes (names without ``.weight``) in network order,
      when natural sorting of the names does not give it.
    source: how errors name the state dict (the file path, for files).
    format: recorded in the result.

  Returns:
    :class:`Imported`.

  Raises:
    CheckpointError naming the tensor and both shapes when layers do not chain,
    when ``input_shape`` does not fit, or when a tensor cannot be mapped;
    ConfigError (``.argument`` names it) for an argument outside its domain
    (``stride``, ``padding``, ``input_layout``, ``input_shape``, ``layer_order``).
  """
  if input_layout not in INPUT_LAYOUTS:
    raise ConfigError(
      f"input_layout must be one of {INPUT_LAYOUTS}, got {input_layout!r}.", argument="input_layout"
    )
  sd = {k: np.asarray(v) for k, v in state_dict.items()}
  layers = _collect_layers(sd, source)
  _check_values(sd, layers, source)
  order = _ordered(layers, sd, layer_order, source)
  n_conv = _count_convs(sd, layers, order, source)
  if input_shape is not None:
    input_shape = tuple(int(s) for s in input_shape)
    if not input_shape or any(s <= 0 for s in input_shape):
      raise ConfigError(
        f"input_shape must be positive sizes, got {input_shape}.", argument="input_shape"
      )
  cast = lambda a: np.ascontiguousarray(a, dtype)  # noqa: E731
  convs = _Convs({}, [], [], [], input_shape)
  if n_conv:
    convs = _map_convs(sd, layers, order[:n_conv], input_shape, stride, padding, source, cast)
    flat_from = f"the conv stack (output H, W, C = {convs.out_shape}; stride, padding or pooling?)"
  else:
    flat_from = f"input_shape {input_shape}"
  dense = _map_linears(
    sd, layers, order[n_conv:], convs.out_shape, flat_from, input_layout, source, cast
  )
  arch, module = _arch_and_module(
    input_shape or dense.flat_shape, input_layout, order[n_conv:], convs, dense
  )
  params = {"params": {**convs.params, **dense.params}}
  return Imported(params, module, format, arch, tuple(convs.names + dense.names))


def _check_values(sd: dict, layers: dict, source: str) -> None:
  """Refuses a tensor holding NaN/Inf, and a state dict whose weights are all zero."""
  for name, a in sd.items():
    if not np.all(np.isfinite(a)):
      raise CheckpointError(f"{source}: tensor {name!r} holds NaN/Inf.")
  if not any(np.any(sd[n] != 0) for names in layers.values() for n in names if n):
    raise CheckpointError(
      f"{source}: every weight is zero (an empty or untrained model); there is nothing to attack."
    )


def _count_convs(sd: dict, layers: dict, order: list, source: str) -> int:
  """How many of the layers in ``order`` are convolutions, refusing a convolution after a
  Linear layer and a network without a Linear layer at its end."""
  kinds = [np.ndim(sd[layers[p][0]]) for p in order]
  n_conv = sum(1 for k in kinds if k == 4)
  if kinds != [4] * n_conv + [2] * (len(kinds) - n_conv):
    raise ConfigError(
      f"layer_order puts a Conv2d layer of {source} after a Linear layer; only "
      f"convolutions followed by Linear layers can be imported.",
      argument="layer_order",
    )
  if n_conv and n_conv == len(kinds):
    raise CheckpointError(
      f"{source}: the state dict has convolutions but no Linear layer "
      f"after them; the network must end in a Linear layer."
    )
  return n_conv


class _Convs(NamedTuple):
  """The conv layers mapped: flax parameters, the tensors used, ImportedCNN's spec, the
  arch's description, and the feature map they output (H, W, C; None: no conv, no shape)."""

  params: dict
  names: list
  spec: list
  arch: list
  out_shape: Optional[tuple]


def _map_convs(sd, layers, prefixes, input_shape, stride, padding, source, cast) -> _Convs:
  """The conv layers ``prefixes``: OIHW -> HWIO, shapes chained through ``input_shape``."""
  if input_shape is None or len(input_shape) != 3:
    raise CheckpointError(
      f"{source}: input_shape (H, W, C) is required for convolutional networks, got {input_shape}."
    )
  h, w, c = input_shape
  strides = _per_layer(stride, len(prefixes), "stride", source)
  pads = _per_layer(padding, len(prefixes), "padding", source)
  out = _Convs({}, [], [], [], None)
  for i, prefix in enumerate(prefixes):
    wname, bname = layers[prefix]
    o, ci, kh, kw = _shape(sd, wname)
    if ci != c:
      what = "input_shape" if i == 0 else f"conv layer {prefixes[i - 1]!r}"
      raise CheckpointError(
        f"{source}: tensor {wname!r} has shape {(o, ci, kh, kw)}, expecting {ci} input "
        f"channels, but {what} gives {c} channels (feature map H, W, C = {(h, w, c)})."
      )
    _check_bias(sd, wname, bname, o, source)
    s = _pair(strides[i], "stride", i, source)
    if s[0] <= 0 or s[1] <= 0:
      raise ConfigError(
        f"stride for conv layer {i} must be >= 1, got {strides[i]!r} ({source}).",
        argument="stride",
      )
    pad = _conv_padding(pads[i], (kh, kw), s, i, source)
    ho = (h + sum(pad[0]) - kh) // s[0] + 1
    wo = (w + sum(pad[1]) - kw) // s[1] + 1
    if ho <= 0 or wo <= 0:
      raise CheckpointError(
        f"{source}: tensor {wname!r} has a {kh}x{kw} kernel, larger than its padded input "
        f"{(h + sum(pad[0]), w + sum(pad[1]))}; check input_shape and padding."
      )
    p = {"kernel": cast(sd[wname].transpose(2, 3, 1, 0))}
    if bname is not None:
      p["bias"] = cast(sd[bname])
    out.params[f"conv_{i}"] = p
    out.names.extend([wname] + ([bname] if bname else []))
    out.spec.append((o, (kh, kw), s, pad, bname is not None))
    out.arch.append(
      {
        "features": o,
        "in_channels": ci,
        "kernel_size": [kh, kw],
        "stride": list(s),
        "padding": [list(pad[0]), list(pad[1])],
        "bias": bname is not None,
        "out_shape": [ho, wo, o],
        "name": prefix,
      }
    )
    h, w, c = ho, wo, o
  return out._replace(out_shape=(h, w, c))


class _Dense(NamedTuple):
  """The Linear layers mapped: flax parameters, the tensors used, each layer's width and
  whether it has a bias, and the features the first one takes (H, W, C or (d,))."""

  params: dict
  names: list
  widths: list
  flags: list
  flat_shape: tuple


def _map_linears(sd, layers, prefixes, flat_shape, flat_from, input_layout, source, cast):
  """The Linear layers ``prefixes``: [out, in] -> [in, out], chained from ``flat_shape``
  (None: the first layer's in-features); the first one's columns follow the flatten."""
  out = _Dense({}, [], [], [], flat_shape)
  prev_out, prev_name = None, None
  for j, prefix in enumerate(prefixes):
    wname, bname = layers[prefix]
    width, fan_in = _shape(sd, wname)
    if j == 0:
      if flat_shape is None:
        flat_shape = (fan_in,)
      elif math.prod(flat_shape) != fan_in:
        raise CheckpointError(
          f"{source}: tensor {wname!r} has shape {(width, fan_in)}, {fan_in} in-features, but "
          f"{flat_from} gives {math.prod(flat_shape)} features."
        )
    elif fan_in != prev_out:
      raise CheckpointError(
        f"{source}: layers do not chain: tensor {wname!r} has shape {(width, fan_in)} "
        f"({fan_in} in-features), but the previous layer {prev_name!r} has shape "
        f"{_shape(sd, prev_name)} ({prev_out} outputs)."
      )
    _check_bias(sd, wname, bname, width, source)
    weight = sd[wname]
    if j == 0 and input_layout == "nchw" and len(flat_shape) == 3:
      kernel = _nchw_columns_to_nhwc(weight, flat_shape[2], flat_shape[0], flat_shape[1])
    else:
      kernel = weight.T
    p = {"kernel": cast(kernel)}
    if bname is not None:
      p["bias"] = cast(sd[bname])
    out.params[f"layer_{j}"] = p
    out.names.extend([wname] + ([bname] if bname else []))
    out.widths.append(width)
    out.flags.append(bname is not None)
    prev_out, prev_name = width, wname
  return out._replace(flat_shape=flat_shape)


def _arch_and_module(input_shape, input_layout, dense_prefixes, convs: _Convs, dense: _Dense):
  """The JSON-able description of what was inferred and assumed, and the flax module: an
  :class:`~recon_jax.victims.models.ImportedCNN` after convolutions, else an
  :class:`~recon_jax.victims.models.MLP`."""
  flat_shape, widths, flags = dense.flat_shape, dense.widths, dense.flags
  layout = _bias_layout(flags)
  out_dim = widths[-1]
  permuted = input_layout == "nchw" and len(flat_shape) == 3 and flat_shape[2] > 1
  arch = {
    "kind": "cnn" if convs.spec else "mlp",
    "input_shape": list(input_shape),
    "input_layout": input_layout,
    "first_linear_permuted": bool(permuted),
    "widths": widths[:-1],
    "out_dim": out_dim,
    "bias": layout,
    "layer_bias": flags,
    "layer_names": list(dense_prefixes),
  }
  if convs.spec:
    arch["convs"] = convs.arch
    module = models.ImportedCNN(convs=tuple(convs.spec), dense=tuple(zip(widths, flags)))
    arch["module"] = "recon_jax.victims.models.ImportedCNN"
  else:  # a bias layout of its own keeps one flag per layer
    bias = layout if layout in models.BIAS_MODES else tuple(bool(f) for f in flags)
    module = models.MLP(widths=tuple(widths[:-1]), out_dim=out_dim, bias=bias)
    arch["module"] = "recon_jax.victims.models.MLP"
  json.dumps(arch)  # arch must stay JSON-able
  return arch, module


def load_foreign(
  path: str,
  *,
  input_shape: Optional[Sequence[int]] = None,
  input_layout: str = "nchw",
  stride=1,
  padding=0,
  dtype=np.float32,
  layer_order: Optional[Sequence[str]] = None,
) -> Imported:
  """Loads a safetensors or PyTorch checkpoint as a flax network to attack.

  Reads the file with :func:`read_state_dict` and maps it with
  :func:`from_state_dict` (the arguments are documented there).  Example::

    imp = load_foreign("victim.pth", input_shape=(32, 32, 3))
    apply_fn = models.make_apply_fn(imp.module)
    out = apply_fn(imp.params, x_nhwc)

  Raises:
    CheckpointError with a one-line message naming the file; ConfigError for
    an argument outside its domain (see :func:`from_state_dict`).
  """
  fmt, sd = state_dicts.read(path)
  return from_state_dict(
    sd,
    input_shape=input_shape,
    input_layout=input_layout,
    stride=stride,
    padding=padding,
    dtype=dtype,
    layer_order=layer_order,
    source=path,
    format=fmt,
  )


def first_layer_input(path: str) -> tuple[str, int]:
  """What the first layer of a safetensors or PyTorch model takes: ``('conv', channels)``
  or ``('dense', inputs)``, read from the tensors' shapes (no network is built)."""
  return first_layer_of(state_dicts.read(path)[1], path)


def first_layer_of(sd: Mapping[str, np.ndarray], source: str) -> tuple[str, int]:
  """:func:`first_layer_input` of a state dict ``sd`` read already (``source``: its file)."""
  layers = _collect_layers(sd, source)
  first = _ordered(layers, sd, None, source)[0]
  w = np.shape(sd[layers[first][0]])
  return ("conv", int(w[1])) if len(w) == 4 else ("dense", int(w[1]))


def first_layer_outputs(sd: Mapping[str, np.ndarray], source: str) -> Optional[int]:
  """A dense first layer's output width as its weight reads ([out, in]; None: a
  convolution), of a state dict ``sd`` read already (``source``: its file)."""
  layers = _collect_layers(sd, source)
  w = np.shape(sd[layers[_ordered(layers, sd, None, source)[0]][0]])
  return None if len(w) == 4 else int(w[0])


def load_data_mean(path: str, input_shape) -> np.ndarray:
  """The per-pixel training mean of a foreign model: a .npy of shape (H, W, C), (C, H, W)
  or, for one channel, (H, W)."""
  try:
    with open(path, "rb") as f:
      mean = np.load(f, allow_pickle=False)
  except (OSError, ValueError) as e:
    raise ConfigError(
      f"{path} is not a readable .npy file ({state_dicts.one_line(e)}).", argument="data_mean"
    ) from None
  h, w, c = input_shape
  if mean.shape == (c, h, w) and (c, h, w) != (h, w, c):
    mean = np.transpose(mean, (1, 2, 0))
  if mean.shape == (h, w) and c == 1:  # a grayscale mean as np.mean(x, 0) gives it
    mean = mean[..., None]
  if mean.shape != (h, w, c):
    raise ConfigError(
      f"{path} has shape {mean.shape}; the images are {(h, w, c)} (HWC), {(c, h, w)} (CHW)"
      + (f" or {(h, w)}." if c == 1 else "."),
      argument="data_mean",
    )
  if not np.issubdtype(mean.dtype, np.number) or not np.all(np.isfinite(mean)):
    raise ConfigError(f"{path} holds non-finite or non-numeric values.", argument="data_mean")
  return mean.astype(np.float32)
