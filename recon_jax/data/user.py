"""A user's own images: the training set a model owner has, and held-out images of the same
distribution, read from the files they already keep.

Formats (the format is read off the path):

* a folder with one subfolder per class (the ImageFolder layout): PNG, JPEG, BMP, GIF or
  TIFF files; the classes are the subfolders in sorted order.  For a binary model (one
  output) there must be two, and the second in sorted order is the positive class (+1);
* an ``.npz`` with ``x`` (``[N, H, W]``, ``[N, H, W, C]``, or ``[N, D]`` for vectors) and
  ``y`` (binary: ``{0, 1}`` or ``{-1, +1}``; multiclass: class ids ``0..C-1``); uint8
  pixels are divided by 255, floats must lie in [0, 1];
* a folder with MNIST's idx files or CIFAR-10/100's python batches (the layouts of
  ``docs/data_formats.md``): the official train split as training images, the test
  split as held-out images.

Images are converted to the channels and size the model takes (``input_shape``), or
refused in one line naming the file.
"""

from __future__ import annotations

import os
from typing import NamedTuple, Optional, Sequence, Tuple

import numpy as np

from recon_jax.data import dataset, files
from recon_jax.data.common import DataError
from recon_jax.data.dataset import Dataset

IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff")


class Images(NamedTuple):
  """Images read from one path: pixels in [0, 1] and their labels."""

  x: np.ndarray  # [N, H, W, C] float32 (or [N, D] vectors)
  y: np.ndarray  # [N] binary in {-1, +1} (float32) or class ids (int32)
  classes: Tuple[str, ...]  # the class names (ImageFolder) or ids, in label order
  source: str  # the path


def _image_files(folder: str) -> list:
  return sorted(
    os.path.join(folder, f)
    for f in os.listdir(folder)
    if f.lower().endswith(IMAGE_EXTENSIONS) and os.path.isfile(os.path.join(folder, f))
  )


def _read_image(path: str, channels: int, size: Optional[Tuple[int, int]]) -> np.ndarray:
  """One image file as [H, W, C] float32 in [0, 1] (converted to ``channels``, resized to
  ``size`` (H, W) when given)."""
  from PIL import Image, UnidentifiedImageError

  try:
    with Image.open(path) as im:
      im = im.convert("L" if channels == 1 else "RGB")
      if size is not None and (im.height, im.width) != tuple(size):
        im = im.resize((size[1], size[0]), Image.BILINEAR)
      a = np.asarray(im, np.float32) / 255.0
  except (OSError, UnidentifiedImageError, ValueError) as e:
    raise DataError(f"{path}: not a readable image ({type(e).__name__}).") from None
  return a[..., None] if a.ndim == 2 else a


def _labels(classes: Sequence, binary: bool, source: str, raw: np.ndarray) -> np.ndarray:
  """Class indices ``raw`` (0..K-1) as the model's labels: -1/+1 for a binary model."""
  if binary:
    if len(classes) != 2:
      raise DataError(
        f"{source}: a binary model needs exactly 2 classes, found {len(classes)} "
        f"({', '.join(str(c) for c in classes[:5])})."
      )
    return np.where(raw == 1, 1.0, -1.0).astype(np.float32)
  return raw.astype(np.int32)


def read_image_folder(
  folder: str, binary: bool, channels: int, size: Optional[Tuple[int, int]] = None
) -> Images:
  """An ImageFolder tree: one subfolder per class, sorted; see the module doc."""
  subs = sorted(d for d in os.listdir(folder) if os.path.isdir(os.path.join(folder, d)))
  if not subs:
    raise DataError(
      f"{folder}: no class subfolders (the ImageFolder layout: FOLDER/CLASS/IMAGE.png)."
    )
  xs, ys = [], []
  for k, name in enumerate(subs):
    files = _image_files(os.path.join(folder, name))
    if not files:
      raise DataError(
        f"{os.path.join(folder, name)}: no image files ({', '.join(IMAGE_EXTENSIONS)})."
      )
    for f in files:
      a = _read_image(f, channels, size)
      if xs and a.shape != xs[0].shape:
        raise DataError(
          f"{f}: {a.shape[0]}x{a.shape[1]} pixels, but {folder}'s first image has "
          f"{xs[0].shape[0]}x{xs[0].shape[1]}; give images of one size (or image_size)."
        )
      xs.append(a)
      ys.append(k)
  raw = np.asarray(ys)
  return Images(np.stack(xs), _labels(subs, binary, folder, raw), tuple(subs), folder)


def read_npz(path: str, binary: bool) -> Images:
  """An ``.npz`` with ``x`` and ``y``; see the module doc."""
  try:
    with np.load(path, allow_pickle=False) as z:
      if "x" not in z or "y" not in z:
        raise DataError(f"{path}: needs arrays 'x' and 'y', has {', '.join(z.files) or 'none'}.")
      x, y = np.asarray(z["x"]), np.asarray(z["y"])
  except DataError:
    raise
  except (OSError, ValueError) as e:
    raise DataError(f"{path}: not a readable .npz ({type(e).__name__}).") from None
  if x.ndim not in (2, 3, 4) or len(x) == 0:
    raise DataError(f"{path}: x must be [N, H, W(, C)] or [N, D] with N >= 1, got {x.shape}.")
  if y.shape != (len(x),):
    raise DataError(f"{path}: y must hold one label per image ({len(x)}), got shape {y.shape}.")
  if x.dtype == np.uint8:
    x = x.astype(np.float32) / 255.0
  elif x.dtype.kind == "f":
    x = x.astype(np.float32)
    if not np.all(np.isfinite(x)) or x.min() < 0 or x.max() > 1:
      raise DataError(
        f"{path}: float pixels must lie in [0, 1] (found [{np.nanmin(x):.3g}, "
        f"{np.nanmax(x):.3g}]); subtract no mean here (data_mean does)."
      )
  else:
    raise DataError(f"{path}: x must be uint8 or float pixels, got {x.dtype}.")
  if x.ndim == 3:
    x = x[..., None]
  if y.dtype.kind not in "iuf" or not np.all(np.isfinite(y)) or np.any(y != np.round(y)):
    raise DataError(f"{path}: y must hold integer labels, got {y.dtype}.")
  y = y.astype(np.int64)
  if binary:
    values = set(np.unique(y).tolist())
    if not values <= {0, 1} and not values <= {-1, 1}:
      raise DataError(
        f"{path}: a binary model's labels must be 0/1 or -1/+1, got {sorted(values)}."
      )
    return Images(x, np.where(y == 1, 1.0, -1.0).astype(np.float32), ("-1", "+1"), path)
  if y.min() < 0:
    raise DataError(f"{path}: class ids must be >= 0, got {int(y.min())}.")
  classes = tuple(str(c) for c in range(int(y.max()) + 1))
  return Images(x, y.astype(np.int32), classes, path)


def read_split_files(folder: str, split: str, binary: bool) -> Images:
  """MNIST or CIFAR files in ``folder``: its ``split`` ('train' or 'test') with the
  dataset's own labels (binary: its binary labelling, as the library's datasets)."""
  for name, loader in (("mnist", files.load_mnist), ("cifar10", files.load_cifar10)):
    try:
      (xtr, ytr), (xte, yte) = loader(folder)
    except DataError:
      continue
    x, y = (xtr, ytr) if split == "train" else (xte, yte)
    x = x.astype(np.float32) / 255.0
    if binary:
      labels = np.where(dataset.SOURCES[name].positive(y), 1.0, -1.0).astype(np.float32)
      return Images(x, labels, ("-1", "+1"), folder)
    return Images(x, y.astype(np.int32), tuple(str(c) for c in range(int(y.max()) + 1)), folder)
  raise DataError(
    f"{folder}: neither class subfolders (ImageFolder) nor MNIST/CIFAR-10 files; see "
    "docs/data_formats.md."
  )


def read_images(
  path: str, binary: bool, *, channels: int = 1, size=None, split: str = "train"
) -> Images:
  """The images at ``path`` in any of the module's formats (``split``: which split of
  MNIST/CIFAR files)."""
  if not path or not os.path.exists(path):
    raise DataError(f"{path}: no such file or folder.")
  if os.path.isfile(path):
    if not path.lower().endswith(".npz"):
      raise DataError(f"{path}: expected a folder (ImageFolder, MNIST/CIFAR files) or an .npz.")
    return read_npz(path, binary)
  subs = [d for d in os.listdir(path) if os.path.isdir(os.path.join(path, d))]
  if subs and any(_image_files(os.path.join(path, d)) for d in subs):
    return read_image_folder(path, binary, channels, size)
  return read_split_files(path, split, binary)


def fit_to(images: Images, input_shape: Optional[Tuple[int, ...]]) -> Images:
  """``images`` as inputs of ``input_shape`` (the model's), or DataError naming the file."""
  x = images.x
  if input_shape is None:
    return images
  want = tuple(input_shape)
  if x.shape[1:] == want:
    return images
  if int(np.prod(x.shape[1:])) == int(np.prod(want)):
    return images._replace(x=x.reshape((len(x), *want)))
  raise DataError(
    f"{images.source}: images of shape {x.shape[1:]} ({int(np.prod(x.shape[1:]))} values) do not "
    f"fit the model's input {want} ({int(np.prod(want))} values); give image_size or images of "
    "that size and channels."
  )


def _peek_size(path: str) -> Optional[Tuple[int, int]]:
  """(H, W) of the first image of an ImageFolder tree (None for other formats)."""
  if not os.path.isdir(path):
    return None
  for d in sorted(os.listdir(path)):
    files = _image_files(os.path.join(path, d)) if os.path.isdir(os.path.join(path, d)) else []
    if files:
      from PIL import Image

      try:
        with Image.open(files[0]) as im:
          return im.height, im.width
      except OSError:
        raise DataError(f"{files[0]}: not a readable image.") from None
  return None


def parse_size(text: str) -> Optional[Tuple[int, int]]:
  """``'HxW'`` as (H, W); '' as None."""
  if not text:
    return None
  try:
    h, w = (int(v) for v in str(text).lower().split("x"))
  except ValueError:
    raise DataError(f"image_size must be HxW, e.g. 25x25, got {text!r}.", "image_size") from None
  if h < 1 or w < 1:
    raise DataError(f"image_size must be positive, got {text!r}.", "image_size")
  return h, w


def user_dataset(
  train: Optional[str],
  heldout: str,
  *,
  binary: bool,
  first_layer: Tuple[str, int],
  size: Optional[Tuple[int, int]] = None,
  mean: Optional[np.ndarray] = None,
):
  """The :class:`~recon_jax.data.Dataset` of a user's model: its training images ``train``
  and held-out images ``heldout`` (paths in the module's formats), fitted to the model's
  first layer (``('conv', channels)`` or ``('dense', inputs)``), minus ``mean`` (the
  per-pixel mean the model was trained with, or None).  ``train`` None: a blind attack,
  no training images (the held-out images give the inputs' shape).

  Raises:
    DataError: naming the file whose images, labels or sizes do not fit.
  """
  kind, width = first_layer
  blind = not train
  if blind:
    train = heldout  # the held-out images stand in for the shape and classes
  size = size or _peek_size(train)
  if kind == "conv":
    channels = width
  elif size is not None and width % (size[0] * size[1]) == 0:
    channels = width // (size[0] * size[1])
  else:
    channels = 1
  if channels not in (1, 3) and os.path.isdir(train) and size is not None:
    raise DataError(
      f"{train}: {size[0]}x{size[1]} images give {size[0] * size[1]} values per channel, and "
      f"the model's first layer takes {width}: neither 1 nor 3 channels fit."
    )
  tr = read_images(train, binary, channels=channels, size=size, split="train")
  ho = read_images(heldout, binary, channels=channels, size=size or tr.x.shape[1:3], split="test")
  want = None
  if kind == "dense":
    if int(np.prod(tr.x.shape[1:])) != width:
      raise DataError(
        f"{train}: {tr.x.shape[1:]} images have {int(np.prod(tr.x.shape[1:]))} values; the "
        f"model's first layer takes {width}."
      )
    want = tr.x.shape[1:]
  elif tr.x.shape[-1] != width:
    raise DataError(
      f"{train}: {tr.x.shape[-1]}-channel images; the model's first layer takes {width}."
    )
  ho = fit_to(ho, want or tr.x.shape[1:])
  if len(tr.classes) != len(ho.classes) and not binary:
    raise DataError(
      f"{heldout}: {len(ho.classes)} classes, but {train} has {len(tr.classes)}; the held-out "
      "images must come from the same classes."
    )
  mean = np.zeros(tr.x.shape[1:], np.float32) if mean is None else np.asarray(mean, np.float32)
  if mean.shape != tr.x.shape[1:]:
    raise DataError(f"data_mean has shape {mean.shape}, the images {tr.x.shape[1:]}.", "data_mean")
  empty = np.zeros((0, *tr.x.shape[1:]), np.float32)
  num_classes = 2 if binary else len(tr.classes)
  if blind:
    tr = tr._replace(x=empty, y=tr.y[:0])
  return Dataset(
    x_train=tr.x - mean,
    y_train=tr.y,
    x_test=ho.x - mean,
    y_test=ho.y,
    x_part=empty,
    y_part=tr.y[:0],
    mean=mean,
    train_idx=np.arange(len(tr.x), dtype=np.int64),
    name=f"user:{os.path.basename(os.path.normpath(train))}",
    task="binary" if binary else "multiclass",
    num_classes=num_classes,
    value_range=(0.0, 1.0),
  )
