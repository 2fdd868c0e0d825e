"""A model owner's image files read as docs/data_formats.md says ("Image files, kind by
kind"): one reader for every file (recon_jax/data/user.py), each kind of image decided and
pinned here, and the same rules for every format of a set (classes, shapes)."""

import os

import numpy as np
from PIL import Image
import pytest

from recon_jax.data import user
from recon_jax.data.common import DataError

DENSE = ("dense", 64)  # a model whose first layer reads 8 x 8 grey pixels


def _folder(root, images, name="set"):
  """An ImageFolder root/name/{neg,pos}/i.png of ``images``: {class: [array or (filename,
  writer)]}; returns its path."""
  for label, items in images.items():
    d = root / name / label
    d.mkdir(parents=True, exist_ok=True)
    for i, item in enumerate(items):
      if isinstance(item, tuple):
        item[1](d / item[0])
      else:
        Image.fromarray(item).save(d / f"{i}.png")
  return root / name


def _grey(v, size=(8, 8)):
  return np.full(size, v, np.uint8)


def _read(path, first_layer=DENSE, size=None, heldout=None):
  ds = user.user_dataset(
    str(path), str(heldout or path), binary=True, first_layer=first_layer, size=size
  )
  return ds.x_train


def test_npz_vectors_beside_an_image_folder_take_the_images_shape(tmp_path):
  """Class 3: x of shape [N, D] for train beside images for held-out (was an IndexError)."""
  x = np.random.default_rng(0).random((4, 64)).astype(np.float32)
  np.savez(tmp_path / "train.npz", x=x, y=np.array([0, 1, 0, 1]))
  held = _folder(tmp_path, {"neg": [_grey(0)], "pos": [_grey(255)]})
  ds = user.user_dataset(str(tmp_path / "train.npz"), str(held), binary=True, first_layer=DENSE)
  assert ds.x_train.shape == (4, 8, 8, 1) and ds.x_test.shape == (2, 8, 8, 1)
  np.testing.assert_array_equal(ds.x_train.reshape(4, -1), x)
  np.testing.assert_array_equal(ds.y_train, [-1, 1, -1, 1])
  # vectors on both sides: their shape from image_size, else refused (the scores need images)
  both = dict(binary=True, first_layer=DENSE)
  path = str(tmp_path / "train.npz")
  assert user.user_dataset(path, path, size=(8, 8), **both).x_test.shape == (4, 8, 8, 1)
  with pytest.raises(DataError, match=r"vectors \[N, 64\] and no image"):
    user.user_dataset(path, path, **both)


def test_images_of_another_size_are_refused_unless_image_size_resizes_them_all(tmp_path):
  """Class 4: no silent resize to the first image's size (in the set, or across sets)."""
  mixed = _folder(tmp_path, {"neg": [_grey(0)], "pos": [_grey(255), _grey(9, (9, 9))]})
  with pytest.raises(DataError) as e:
    _read(mixed)
  assert str(e.value).startswith(f"{mixed}/pos/1.png: 9x9 pixels, but {mixed}/neg/0.png has 8x8")
  x = _read(mixed, size=(8, 8))  # image_size: every file resized, bilinearly
  assert x.shape == (3, 8, 8, 1) and np.allclose(x[2], 9 / 255)
  held = _folder(tmp_path, {"neg": [_grey(0, (10, 10))], "pos": [_grey(1, (10, 10))]}, "held")
  good = _folder(tmp_path, {"neg": [_grey(0)], "pos": [_grey(255)]}, "good")
  with pytest.raises(DataError, match=f"{held}/neg/0.png: 10x10 pixels, but {good}/neg/0.png"):
    _read(good, heldout=held)


def test_colour_and_grey_convert_to_the_channels_the_model_takes(tmp_path):
  """An RGB image among grey ones, for a grey model: grey by luminance (ITU-R 601-2, as
  Pillow's); a grey image for an RGB model: the value in each channel; opaque RGBA: its RGB."""
  rgb = np.zeros((8, 8, 3), np.uint8)
  rgb[...] = (200, 100, 50)
  opaque = np.concatenate([rgb, np.full((8, 8, 1), 255, np.uint8)], -1)
  folder = _folder(tmp_path, {"neg": [_grey(10), rgb], "pos": [_grey(20), opaque]})
  x = _read(folder)
  luminance = round((200 * 299 + 100 * 587 + 50 * 114) / 1000) / 255
  np.testing.assert_allclose(x[:, 0, 0, 0], [10 / 255, luminance, 20 / 255, luminance], atol=1e-7)
  x = _read(folder, first_layer=("dense", 3 * 64))
  assert x.shape == (4, 8, 8, 3)
  np.testing.assert_allclose(x[0, 0, 0], [10 / 255] * 3)
  np.testing.assert_allclose(x[1, 0, 0], np.array([200, 100, 50]) / 255)
  np.testing.assert_array_equal(x[3], x[1])


def test_transparency_16_bits_frames_and_extensions(tmp_path):
  """A transparent pixel is refused; 16-bit grey keeps its depth (was clipped to white);
  an animation is refused, one frame read; a PNG named .jpg is read by its content."""
  see_through = np.zeros((8, 8, 4), np.uint8)
  see_through[..., 3] = 255
  see_through[0, 0, 3] = 0
  folder = _folder(tmp_path, {"neg": [_grey(0)], "pos": [see_through]}, "alpha")
  with pytest.raises(DataError, match=r"pos/0.png: 1 transparent pixel\(s\)"):
    _read(folder)

  deep = (np.arange(64).reshape(8, 8) * 1000).astype(np.uint16)
  folder = _folder(tmp_path, {"neg": [_grey(0)], "pos": [deep]}, "deep")
  with Image.open(folder / "pos/0.png") as im:
    assert im.mode == "I;16"
  np.testing.assert_allclose(_read(folder)[1, ..., 0], deep / 65535, rtol=1e-6)

  def animation(path):
    frames = [Image.fromarray(_grey(v)) for v in (0, 200)]
    frames[0].save(path, save_all=True, append_images=frames[1:])

  folder = _folder(tmp_path, {"neg": [_grey(0)], "pos": [("a.gif", animation)]}, "anim")
  with pytest.raises(DataError, match="pos/a.gif: 2 frames"):
    _read(folder)
  still = ("b.gif", lambda p: Image.fromarray(_grey(77)).save(p))
  png_as_jpg = ("c.jpg", lambda p: Image.fromarray(_grey(33)).save(p, format="PNG"))
  folder = _folder(tmp_path, {"neg": [still], "pos": [png_as_jpg]}, "named")
  np.testing.assert_array_equal(_read(folder)[:, 0, 0, 0], np.float32([77, 33]) / 255)


def test_tiny_and_huge_images(tmp_path, monkeypatch):
  """Below 3 x 3 (the SSIM window) a file is refused, as image_size is; a 6,000 x 6,000 image
  is resized by image_size, refused from its header without it (the model reads 64
  values) and beyond MAX_PIXELS always."""
  folder = _folder(tmp_path, {"neg": [_grey(0, (1, 1))], "pos": [_grey(1, (1, 1))]}, "tiny")
  with pytest.raises(DataError, match=r"neg/0.png: 1x1 pixels; an image must be at least 3x3"):
    _read(folder, first_layer=("dense", 1))
  with pytest.raises(DataError, match="image_size must be at least 3x3"):
    user.parse_size("1x1")
  big = _grey(0, (6000, 6000))
  big[3000:] = 255
  folder = _folder(tmp_path, {"neg": [big], "pos": [_grey(7)]}, "big")
  x = _read(folder, size=(8, 8))
  assert x.shape == (2, 8, 8, 1) and x[0, 0, 0, 0] == 0 and x[0, -1, 0, 0] == 1
  with pytest.raises(DataError, match=r"neg/0.png: 6000x6000 pixels: the model's first layer"):
    _read(folder)
  monkeypatch.setattr(user, "MAX_PIXELS", 1000)
  with pytest.raises(DataError, match=r"neg/0.png: 6000x6000 pixels, more than the 1,000"):
    _read(folder, size=(8, 8))


def test_every_entry_of_an_image_folder_is_read_or_refused(tmp_path):
  """Class 5: an image one folder too deep, a broken link, a file that is no image, an image
  beside the class folders: each refused naming it; hidden files are skipped."""
  folder = _folder(tmp_path, {"neg": [_grey(0)], "pos": [_grey(255)]})
  (folder / "pos/.DS_Store").write_bytes(b"\0")
  (folder / "notes.txt").write_text("not a class")
  assert len(_read(folder)) == 2
  for make, says in (
    (lambda: (folder / "pos/deeper").mkdir(), "pos/deeper: a folder inside the class folder"),
    (lambda: os.symlink(tmp_path / "gone.png", folder / "neg/1.png"), "neg/1.png: a broken link"),
    (lambda: (folder / "neg/2.webp").write_bytes(b"RIFF"), "neg/2.webp: not an image file"),
    (lambda: Image.fromarray(_grey(3)).save(folder / "3.png"), "3.png: an image beside the"),
  ):
    make()
    with pytest.raises(DataError, match=says):
      _read(folder)
    target = next(p for p in folder.rglob("*") if says.split(":")[0] in str(p))
    target.rmdir() if target.is_dir() and not target.is_symlink() else target.unlink()
  assert len(_read(folder)) == 2


def test_one_rule_for_the_classes_of_every_format(tmp_path):
  """Class 6: a binary model's images come in two classes, each with images, whether they
  are a folder or an .npz; a multiclass .npz may not skip a class."""
  x = np.zeros((4, 8, 8), np.uint8)
  for y, says in (
    ([1, 1, 1, 1], r"no image of class 0 \(of 0, 1\)"),
    ([-1, -1, -1, -1], r"no image of class \+1 \(of -1, \+1\)"),
  ):
    np.savez(tmp_path / "one.npz", x=x, y=np.array(y))
    with pytest.raises(DataError, match=says):
      user.read_npz(str(tmp_path / "one.npz"), binary=True)
  folder = _folder(tmp_path, {"pos": [_grey(0), _grey(1)]})
  with pytest.raises(DataError, match=r"needs exactly 2 classes, found 1 \(pos\)"):
    user.read_image_folder(str(folder), True, 1)
  np.savez(tmp_path / "gap.npz", x=x, y=np.array([0, 2, 0, 2]))
  with pytest.raises(DataError, match=r"no image of class 1 \(of 0, 1, 2\)"):
    user.read_npz(str(tmp_path / "gap.npz"), binary=False)
  np.savez(tmp_path / "mono.npz", x=x, y=np.zeros(4, int))
  with pytest.raises(DataError, match="one class"):
    user.read_npz(str(tmp_path / "mono.npz"), binary=False)


def test_nan_pixels_are_named_as_nan(tmp_path):
  """Class 7: not 'must lie in [0, 1] (found [0, 1])'."""
  x = np.zeros((2, 8, 8), np.float32)
  x[1, 0, 0] = np.inf
  np.savez(tmp_path / "bad.npz", x=x, y=np.array([0, 1]))
  with pytest.raises(
    DataError, match=r"x holds 1 NaN or infinite value\(s\) \(the first in image 1\)"
  ):
    user.read_npz(str(tmp_path / "bad.npz"), binary=True)
  x[1, 0, 0] = 1.5
  np.savez(tmp_path / "bad.npz", x=x, y=np.array([0, 1]))
  with pytest.raises(DataError, match=r"must lie in \[0, 1\] \(found \[0, 1.5\]\)"):
    user.read_npz(str(tmp_path / "bad.npz"), binary=True)
