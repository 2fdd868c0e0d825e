"""A user's own images: the training set a model owner has, and held-out images of the same
distribution, read from the files they already keep.

Formats (the format is read off the path):

* a folder with one subfolder per class (the ImageFolder layout): PNG, JPEG, BMP, GIF or
  TIFF files; the classes are the subfolders in sorted order.  For a binary model (one
  output) there must be two, and the second in sorted order is the positive class (+1).
  Every entry is accounted for: an image in a class folder is read, a hidden file
  skipped, anything else there (a subfolder, a broken link, a file of another kind)
  refused, as is an image beside the class folders;
* an ``.npz`` with ``x`` (``[N, H, W]``, ``[N, H, W, C]``, or ``[N, D]``: flattened
  images, shaped by the other set's images or ``image_size``) and ``y`` (binary:
  ``{0, 1}`` or ``{-1, +1}``; multiclass: class ids ``0..C-1``); uint8 pixels are divided
  by 255, floats must be finite and lie in [0, 1];
* a folder with MNIST's idx files or CIFAR-10/100's python batches (the layouts of
  ``docs/data_formats.md``): the official train split as training images, the test
  split as held-out images.

Every image file goes through one reader (:func:`_read_image`): its header checked first
(size, frames, pixel count), then its pixels converted to the channels the model takes
and resized only to ``image_size``; the kinds of file and what becomes of each are in
docs/data_formats.md.  Every format obeys one rule for its classes (:func:`_labels`).
Anything else is refused in one line naming the file.
"""

from __future__ import annotations

import contextlib
import os
from typing import NamedTuple, Optional, Sequence, Tuple
import warnings

import numpy as np

from recon_jax.data import dataset, files
from recon_jax.data.common import DataError
from recon_jax.data.dataset import Dataset

IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff")
# The smallest image file read: SSIM, the scores' measure, needs a window of 3 x 3 pixels.
MIN_SIDE = 3
# The largest image file read, in pixels (Pillow's own decompression-bomb limit): a bigger
# one is refused from its header, before it is decoded.
MAX_PIXELS = 89_478_485
# Pillow's modes read as 8-bit pixels (divided by 255), and those of 16-bit grey (by 65535).
EIGHT_BIT_MODES = ("1", "L", "LA", "La", "P", "PA", "RGB", "RGBA", "RGBa", "RGBX", "CMYK", "YCbCr")
SIXTEEN_BIT_MODES = ("I;16", "I;16L", "I;16B", "I;16N", "I")


class Images(NamedTuple):
  """Images read from one path: pixels in [0, 1] and their labels."""

  x: np.ndarray  # [N, H, W, C] float32 (or [N, D] vectors)
  y: np.ndarray  # [N] binary in {-1, +1} (float32) or class ids (int32)
  classes: Tuple[str, ...]  # the class names (ImageFolder) or ids, in label order
  source: str  # the path


class Size(NamedTuple):
  """The size every image file of a run is read at: ``(H, W)``, and whether the files are
  resized to it (``image_size``) or must all have it already (the first file's, ``source``)."""

  hw: Tuple[int, int]
  resize: bool
  source: str  # 'image_size', or the file whose size the others must have


def _hidden(name: str) -> bool:
  return name.startswith(".")  # .DS_Store, ._x (macOS), .ipynb_checkpoints


def _is_image_name(name: str) -> bool:
  return name.lower().endswith(IMAGE_EXTENSIONS)


def _broken_link(path: str) -> DataError:
  return DataError(f"{path}: a broken link (its target {os.readlink(path)} does not exist).")


def _listing(folder: str) -> list:
  """The names in ``folder``, sorted; DataError naming it when it cannot be listed."""
  try:
    return sorted(os.listdir(folder))
  except OSError as e:
    raise DataError(f"{folder}: cannot list the folder ({e.strerror}).") from None


def _class_folders(folder: str) -> list:
  """The class subfolders of an ImageFolder tree, sorted.  An image file or a broken link
  beside them is refused (it would belong to no class); other files are left alone."""
  subs = []
  for name in _listing(folder):
    path = os.path.join(folder, name)
    if _hidden(name):
      continue
    if os.path.isdir(path):
      subs.append(name)
    elif not os.path.exists(path):
      raise _broken_link(path)
    elif _is_image_name(name):
      raise DataError(
        f"{path}: an image beside the class folders of {folder}, in no class; move it into "
        "its class's folder (FOLDER/CLASS/IMAGE)."
      )
  return subs


def _image_files(folder: str) -> list:
  """The images of one class folder, sorted.  Every entry is accounted for: hidden files
  are skipped; a subfolder, a broken link or a file that is not an image is refused, since
  its images would silently be left out."""
  files = []
  for name in _listing(folder):
    path = os.path.join(folder, name)
    if _hidden(name):
      continue
    if os.path.isdir(path):
      raise DataError(
        f"{path}: a folder inside the class folder {folder}; its images would be left out "
        "(the ImageFolder layout is FOLDER/CLASS/IMAGE, one level of class folders)."
      )
    if not os.path.exists(path):
      raise _broken_link(path)
    if not _is_image_name(name):
      raise DataError(
        f"{path}: not an image file ({', '.join(IMAGE_EXTENSIONS)}); a class folder holds "
        "its images only (hidden files are skipped)."
      )
    files.append(path)
  return files


def _looks_like_image_folder(folder: str) -> bool:
  """Whether ``folder`` is an ImageFolder tree: a subfolder holding an image file."""
  for name in _listing(folder):
    sub = os.path.join(folder, name)
    if not _hidden(name) and os.path.isdir(sub):
      if any(_is_image_name(f) and not _hidden(f) for f in _listing(sub)):
        return True
  return False


def first_image(path: str) -> Optional[str]:
  """The first image file of an ImageFolder tree at ``path`` (None for other formats)."""
  if not path or not os.path.isdir(path) or not _looks_like_image_folder(path):
    return None
  for name in _class_folders(path):
    files = _image_files(os.path.join(path, name))
    if files:
      return files[0]
  return None


@contextlib.contextmanager
def _open(path: str):
  """``path`` opened by Pillow (its header read, no pixel decoded), or DataError naming it:
  not an image, an animation, a file beyond :data:`MAX_PIXELS` or below 3 x 3 pixels."""
  from PIL import Image, UnidentifiedImageError

  try:
    with warnings.catch_warnings():
      warnings.simplefilter("error", Image.DecompressionBombWarning)
      im = Image.open(path)
  except (Image.DecompressionBombError, Image.DecompressionBombWarning):
    raise DataError(
      f"{path}: more than {MAX_PIXELS:,} pixels, beyond what is read (a decompression bomb, "
      "or an image to shrink before use)."
    ) from None
  except (OSError, UnidentifiedImageError, ValueError) as e:
    raise DataError(f"{path}: not a readable image ({type(e).__name__}).") from None
  with im:
    if im.width * im.height > MAX_PIXELS:
      raise DataError(
        f"{path}: {im.height}x{im.width} pixels, more than the {MAX_PIXELS:,} read (an image "
        "to shrink before use)."
      )
    if min(im.height, im.width) < MIN_SIDE:
      raise DataError(
        f"{path}: {im.height}x{im.width} pixels; an image must be at least {MIN_SIDE}x"
        f"{MIN_SIDE} (the scores' SSIM window)."
      )
    frames = getattr(im, "n_frames", 1)
    if frames > 1:
      raise DataError(
        f"{path}: {frames} frames (an animation or a multi-page file); which one the model "
        "saw is unknown: save that frame as an image of its own."
      )
    yield im


def image_size(path: str) -> Tuple[int, int]:
  """(H, W) of an image file, from its header."""
  with _open(path) as im:
    return im.height, im.width


def _pixels(im, path: str, channels: int) -> np.ndarray:
  """An open image's pixels as [H, W, channels] float32 in [0, 1]: 8-bit modes divided by
  255, 16-bit grey by 65535; colour to grey by luminance (Pillow's ITU-R 601-2), grey to
  RGB repeated; an alpha channel must be opaque everywhere (what the model saw under a
  transparent pixel is unknown)."""
  mode = im.mode
  if mode in SIXTEEN_BIT_MODES:
    a = np.asarray(im, np.float64)
    if a.min() < 0 or a.max() > 65535:
      raise DataError(f"{path}: 32-bit integer pixels; save it with 8 or 16 bits per channel.")
    a = (a / 65535.0).astype(np.float32)[..., None]
    return np.repeat(a, channels, axis=-1)
  if mode not in EIGHT_BIT_MODES:
    raise DataError(
      f"{path}: pixels of Pillow's mode {mode!r}, not read; save it as 8-bit grey or RGB(A), "
      "or 16-bit grey."
    )
  if "A" in mode or "a" in mode or (mode == "P" and "transparency" in im.info):
    im = im.convert("RGBA")
    alpha = np.asarray(im)[..., 3]
    if alpha.min() < 255:
      raise DataError(
        f"{path}: {int(np.sum(alpha < 255))} transparent pixel(s); what the model saw "
        "there is unknown: flatten the image onto the background it was trained with."
      )
  a = np.asarray(im.convert("L" if channels == 1 else "RGB"), np.float32) / 255.0
  return a[..., None] if a.ndim == 2 else a


def _resize(a: np.ndarray, hw: Tuple[int, int]) -> np.ndarray:
  """[H, W, C] pixels resized bilinearly to ``hw``, each channel in 32-bit float."""
  from PIL import Image

  if a.shape[:2] == tuple(hw):
    return a
  planes = [
    np.asarray(Image.fromarray(a[..., c], "F").resize((hw[1], hw[0]), Image.BILINEAR))
    for c in range(a.shape[-1])
  ]
  return np.clip(np.stack(planes, -1), 0.0, 1.0).astype(np.float32)


def _read_image(path: str, channels: int, size: Optional[Size]) -> np.ndarray:
  """One image file as [H, W, channels] float32 in [0, 1]: the one reader of every image
  file.  ``size``: the size the file must have, or is resized to (``size.resize``); its
  header is checked before any pixel is decoded."""
  with _open(path) as im:
    if size is not None and not size.resize and (im.height, im.width) != tuple(size.hw):
      raise DataError(
        f"{path}: {im.height}x{im.width} pixels, but {size.source} has "
        f"{size.hw[0]}x{size.hw[1]}; the images must be of one size (or give image_size=HxW "
        "to resize them all)."
      )
    try:
      a = _pixels(im, path, channels)
    except (OSError, ValueError) as e:  # a file whose pixels are cut short or corrupt
      if isinstance(e, DataError):
        raise
      raise DataError(f"{path}: not a readable image ({type(e).__name__}).") from None
  return _resize(a, size.hw) if size is not None and size.resize else a


def _labels(classes: Sequence, binary: bool, source: str, raw: np.ndarray) -> np.ndarray:
  """Class indices ``raw`` (0..K-1) of ``classes`` as the model's labels (-1/+1 for a
  binary model), the same rule for every format: a binary model's images come in 2
  classes, a multiclass model's in at least 2, and every class holds an image."""
  if binary and len(classes) != 2:
    raise DataError(
      f"{source}: a binary model needs exactly 2 classes, found {len(classes)} "
      f"({', '.join(str(c) for c in classes[:5])})."
    )
  if len(classes) < 2:
    raise DataError(f"{source}: one class ({classes[0]}); a model's images need at least 2.")
  present = np.isin(np.arange(len(classes)), raw)
  if not present.all():
    missing = classes[int(np.flatnonzero(~present)[0])]
    raise DataError(
      f"{source}: no image of class {missing} (of {', '.join(str(c) for c in classes[:5])}"
      f"{', ...' if len(classes) > 5 else ''}); every class of the model needs images."
    )
  if binary:
    return np.where(raw == 1, 1.0, -1.0).astype(np.float32)
  return raw.astype(np.int32)


def read_image_folder(
  folder: str, binary: bool, channels: int, size: Optional[Size] = None
) -> Images:
  """An ImageFolder tree: one subfolder per class, sorted; see the module doc.  ``size``:
  see :func:`_read_image` (None: the first image's)."""
  subs = _class_folders(folder)
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
      if size is None:
        size = Size(image_size(f), False, f)
      xs.append(_read_image(f, channels, size))
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
    finite = np.isfinite(x)
    if not finite.all():
      first = int(np.flatnonzero(~finite.reshape(len(x), -1).all(1))[0])
      raise DataError(
        f"{path}: x holds {int(np.sum(~finite))} NaN or infinite value(s) (the first in "
        f"image {first}); pixels must be numbers in [0, 1]."
      )
    x = x.astype(np.float32)
    if x.min() < 0 or x.max() > 1:
      raise DataError(
        f"{path}: float pixels must lie in [0, 1] (found [{x.min():.3g}, {x.max():.3g}]); "
        "subtract no mean here (data_mean does)."
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
    classes = ("0", "1") if values <= {0, 1} else ("-1", "+1")
    return Images(x, _labels(classes, True, path, (y == 1).astype(np.int64)), classes, path)
  if y.min() < 0:
    raise DataError(f"{path}: class ids must be >= 0, got {int(y.min())}.")
  classes = tuple(str(c) for c in range(int(y.max()) + 1))
  return Images(x, _labels(classes, False, path, y), classes, path)


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
      raw = dataset.SOURCES[name].positive(y).astype(np.int64)
      return Images(x, _labels(("-1", "+1"), True, folder, raw), ("-1", "+1"), folder)
    classes = tuple(str(c) for c in range(int(y.max()) + 1))
    return Images(x, _labels(classes, False, folder, y), classes, folder)
  raise DataError(
    f"{folder}: neither class subfolders (ImageFolder) nor MNIST/CIFAR-10 files; see "
    "docs/data_formats.md."
  )


def read_images(
  path: str,
  binary: bool,
  *,
  channels: int = 1,
  size: Optional[Size] = None,
  split: str = "train",
) -> Images:
  """The images at ``path`` in any of the module's formats (``split``: which split of
  MNIST/CIFAR files; ``size``: the size image files must have or are resized to, None: the
  first file's)."""
  if not path or not os.path.exists(path):
    raise DataError(f"{path}: no such file or folder.")
  if os.path.isfile(path):
    if not path.lower().endswith(".npz"):
      raise DataError(f"{path}: expected a folder (ImageFolder, MNIST/CIFAR files) or an .npz.")
    return read_npz(path, binary)
  if _looks_like_image_folder(path):
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


def _image_shape(tr: Images, ho: Images, size, train: str) -> Tuple[int, ...]:
  """The [H, W, C] of a dense model's images: the images' own, else vectors [N, D] (the
  model reads D values) shaped by the other set's images or by ``size``; the scores
  compare images, so vectors with neither are refused."""
  shape = next((s.x.shape[1:] for s in (tr, ho) if s.x.ndim == 4), None)
  if shape is not None:
    return shape
  d = tr.x.shape[1]
  if size is not None and d % (size[0] * size[1]) == 0 and d // (size[0] * size[1]) in (1, 3):
    return (size[0], size[1], d // (size[0] * size[1]))
  raise DataError(
    f"{train}: vectors [N, {d}] and no image to take their shape from"
    + (f" (image_size={size[0]}x{size[1]} gives neither 1 nor 3 channels)" if size else "")
    + "; the scores compare images: give image_size=HxW, or x as [N, H, W(, C)].",
    "image_size" if size else None,
  )


def parse_size(text: str) -> Optional[Tuple[int, int]]:
  """``'HxW'`` as (H, W); '' as None."""
  if not text:
    return None
  try:
    h, w = (int(v) for v in str(text).lower().split("x"))
  except ValueError:
    raise DataError(f"image_size must be HxW, e.g. 25x25, got {text!r}.", "image_size") from None
  if h < MIN_SIDE or w < MIN_SIDE:
    raise DataError(
      f"image_size must be at least {MIN_SIDE}x{MIN_SIDE} (the scores' SSIM window), got {text!r}.",
      "image_size",
    )
  return h, w


def _transposed(model: str, outputs: int, inputs: int, images: str) -> None:
  """Raises DataError: ``model``'s dense first layer reads as ``outputs`` of ``inputs``, and
  the ``images`` have ``outputs`` values: its weight was written [in, out]."""
  raise DataError(
    f"{model}: the file looks transposed (written [in, out]): its first layer's weight, "
    f"read as PyTorch's [out, in], has out={outputs} and in={inputs}, and {images} have "
    f"{outputs} values; save each Linear weight as [out, in]."
  )


def user_dataset(
  train: Optional[str],
  heldout: str,
  *,
  binary: bool,
  first_layer: Tuple[str, int],
  size: Optional[Tuple[int, int]] = None,
  mean: Optional[np.ndarray] = None,
  first_outputs: Optional[int] = None,
  model: str = "the model",
):
  """The :class:`~recon_jax.data.Dataset` of a user's model: its training images ``train``
  and held-out images ``heldout`` (paths in the module's formats), fitted to the model's
  first layer (``('conv', channels)`` or ``('dense', inputs)``), minus ``mean`` (the
  per-pixel mean the model was trained with, or None).  ``train`` None: a blind attack,
  no training images (the held-out images give the inputs' shape).  ``first_outputs``: a
  dense first layer's output width, where known: images of that many values say the
  ``model`` file was written transposed ([in, out]).

  Raises:
    DataError: naming the file whose images, labels or sizes do not fit.
  """
  kind, width = first_layer
  blind = not train
  if blind:
    train = heldout  # the held-out images stand in for the shape and classes
  first = first_image(train) or first_image(heldout)  # an image file sets the size
  hw = size or (image_size(first) if first else None)
  if kind == "conv":
    channels = width
  elif hw is not None and width % (hw[0] * hw[1]) == 0:
    channels = width // (hw[0] * hw[1])
  else:
    channels = 1
  if hw is not None and (
    channels not in (1, 3) or kind == "dense" and hw[0] * hw[1] * channels != width
  ):
    if kind == "dense" and first_outputs in (hw[0] * hw[1], 3 * hw[0] * hw[1]):
      _transposed(model, first_outputs, width, f"{hw[0]}x{hw[1]} images")
    where = f"image_size={hw[0]}x{hw[1]}" if size else f"{first}: {hw[0]}x{hw[1]} pixels"
    takes = f"{width} channels" if kind == "conv" else f"{width} inputs"
    # A dense weight is read [out, in] as PyTorch stores it; one written [in, out] shows here.
    order = (
      " (its weight is read as PyTorch's [out, in]: a file written [in, out] gives its "
      "output width as the inputs)"
      if kind == "dense"
      else ""
    )
    raise DataError(
      f"{where}: the model's first layer takes {takes}{order}, which neither grey (1 "
      f"channel) nor RGB (3) images of {hw[0]}x{hw[1]} give; give image_size=HxW of the "
      "model's input.",
      "image_size" if size else None,
    )
  read_size = Size(hw, bool(size), "image_size" if size else first) if hw else None
  tr = read_images(train, binary, channels=channels, size=read_size, split="train")
  ho = read_images(heldout, binary, channels=channels, size=read_size, split="test")
  if kind == "dense":
    if int(np.prod(tr.x.shape[1:])) != width:
      if first_outputs == int(np.prod(tr.x.shape[1:])):
        _transposed(model, first_outputs, width, f"{train}'s {tr.x.shape[1:]} images")
      raise DataError(
        f"{train}: {tr.x.shape[1:]} images have {int(np.prod(tr.x.shape[1:]))} values; the "
        f"model's first layer takes {width}."
      )
    tr = fit_to(tr, _image_shape(tr, ho, size, train))
  elif tr.x.ndim != 4 or tr.x.shape[-1] != width:
    raise DataError(
      f"{train}: images of shape {tr.x.shape[1:]}; the model's first layer is a convolution "
      f"over {width}-channel images [H, W, {width}]."
    )
  ho = fit_to(ho, tr.x.shape[1:])
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
