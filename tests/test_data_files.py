"""Tests for the file datasets of recon_jax.data: MNIST IDX, CIFAR-10/100, and their hardening."""

import gc
import gzip
import os
import pickle
import time
import tracemalloc
import warnings
import zlib

import numpy as np
import pytest

from recon_jax import data as D
from recon_jax.data import DataError, load_dataset

# --------------------------------------------------------------------------
# Fixtures: tiny on-disk datasets in the official formats.
# --------------------------------------------------------------------------

MNIST_FILES = (
  "train-images-idx3-ubyte",
  "train-labels-idx1-ubyte",
  "t10k-images-idx3-ubyte",
  "t10k-labels-idx1-ubyte",
)


def _mnist_arrays(n_train=40, n_test=20):
  rng = np.random.default_rng(123)
  xtr = rng.integers(0, 256, size=(n_train, 28, 28), dtype=np.uint8)
  xte = rng.integers(0, 256, size=(n_test, 28, 28), dtype=np.uint8)
  ytr = (np.arange(n_train) % 10).astype(np.uint8)
  yte = (np.arange(n_test) % 10).astype(np.uint8)
  return xtr, ytr, xte, yte


def _write_mnist(root, gz=False, dotted=False):
  xtr, ytr, xte, yte = _mnist_arrays()
  names = list(MNIST_FILES)
  if dotted:
    names = [n.replace("-idx", ".idx") for n in names]
  suffix = ".gz" if gz else ""
  for n, a in zip(names, (xtr, ytr, xte, yte)):
    D.write_idx(os.path.join(root, n + suffix), a)
  return xtr, ytr, xte, yte


def _idx_header(magic_ndim, dims):
  return bytes([0, 0, 8, magic_ndim]) + np.asarray(dims, ">u4").tobytes()


def _cifar_arrays(n, label_offset=0):
  rng = np.random.default_rng(7 + label_offset)
  x = rng.integers(0, 256, size=(n, 32, 32, 3), dtype=np.uint8)
  y = ((np.arange(n) + label_offset) % 10).astype(np.uint8)
  return x, y


def _write_cifar10_bin(root, n=20):
  batches = []
  for i in range(1, 6):
    x, y = _cifar_arrays(n, label_offset=i - 1)
    if i == 1:  # Record 0: pure red image, label airplane.
      x[0] = 0
      x[0, ..., 0] = 255
      assert y[0] == 0
      x[1] = 0  # Record 1: pure blue image, label automobile.
      x[1, ..., 2] = 255
      assert y[1] == 1
    D.write_cifar10_bin(os.path.join(root, f"data_batch_{i}.bin"), x, y)
    batches.append((x, y))
  xt, yt = _cifar_arrays(n, label_offset=11)
  D.write_cifar10_bin(os.path.join(root, "test_batch.bin"), xt, yt)
  return batches, (xt, yt)


def _to_cifar_flat(x):
  return x.transpose(0, 3, 1, 2).reshape(x.shape[0], -1)


def _write_cifar10_py(root, n=20, protocol=2):
  sub = os.path.join(root, "cifar-10-batches-py")
  os.makedirs(sub, exist_ok=True)
  out = []
  for name, off in [(f"data_batch_{i}", i) for i in range(1, 6)] + [("test_batch", 11)]:
    x, y = _cifar_arrays(n, label_offset=off)
    d = {b"data": _to_cifar_flat(x), b"labels": [int(v) for v in y], b"batch_label": b"fixture"}
    with open(os.path.join(sub, name), "wb") as f:
      pickle.dump(d, f, protocol=protocol)
    out.append((x, y))
  return out


# --------------------------------------------------------------------------
# MNIST.
# --------------------------------------------------------------------------


@pytest.mark.parametrize("gz,dotted", [(False, False), (True, False), (False, True)])
def test_mnist_idx_roundtrip(tmp_path, gz, dotted):
  xtr, ytr, _, _ = _write_mnist(str(tmp_path), gz=gz, dotted=dotted)
  ds = load_dataset("mnist", data_dir=str(tmp_path), n_per_class=3)
  assert ds.x_train.shape == (6, 28, 28, 1)
  assert ds.x_train.dtype == np.float32 and ds.y_train.dtype == np.float32
  assert ds.train_idx.dtype == np.int64
  np.testing.assert_array_equal(ds.y_train, [1, 1, 1, -1, -1, -1])
  np.testing.assert_array_equal(ds.y_train, np.where(ytr[ds.train_idx] % 2, 1.0, -1.0))
  for j in (0, 4):
    np.testing.assert_array_equal(
      ds.x_train[j, ..., 0], xtr[ds.train_idx[j]].astype(np.float32) / np.float32(255.0)
    )
  # Defaults: partition = n_per_class, test = everything in the test pool.
  assert ds.x_part.shape == (6, 28, 28, 1)
  assert ds.x_test.shape == (20, 28, 28, 1)
  assert sorted(ds.y_test.tolist()) == [-1.0] * 10 + [1.0] * 10
  assert ds.value_range == (0.0, 1.0) and ds.num_classes == 2


@pytest.mark.parametrize("sub", [("mnist",), ("MNIST", "raw")])
def test_mnist_subdirs(tmp_path, sub):
  root = tmp_path.joinpath(*sub)
  root.mkdir(parents=True)
  _write_mnist(str(root), gz=True)
  ds = load_dataset("mnist", data_dir=tmp_path, n_per_class=1)  # os.PathLike works too.
  assert ds.x_train.shape == (2, 28, 28, 1)


def test_mnist_multiclass(tmp_path):
  xtr, ytr, _, _ = _write_mnist(str(tmp_path))
  ds = load_dataset(
    "mnist",
    task="multiclass",
    data_dir=str(tmp_path),
    n_per_class=2,
    n_part_per_class=1,
    n_test_per_class=1,
  )
  assert ds.y_train.dtype == np.int32 and ds.num_classes == 10
  np.testing.assert_array_equal(ds.y_train, np.repeat(np.arange(10), 2))
  np.testing.assert_array_equal(ds.y_train, ytr[ds.train_idx])
  assert ds.x_part.shape[0] == 10 and ds.x_test.shape[0] == 10
  # Partition drawn from the train pool, disjoint from train.
  train_rows = {xtr[i].tobytes() for i in ds.train_idx}
  for row in ds.x_part:
    assert np.rint(row[..., 0] * 255).astype(np.uint8).tobytes() not in train_rows


def test_write_idx_header(tmp_path):
  p = tmp_path / "x-idx1-ubyte"
  D.write_idx(p, np.arange(5, dtype=np.uint8))
  raw = p.read_bytes()
  assert raw[:4] == b"\x00\x00\x08\x01" and raw[4:8] == b"\x00\x00\x00\x05"
  assert raw[8:] == bytes(range(5))
  with pytest.raises(DataError):
    D.write_idx(p, np.arange(5, dtype=np.int32))


def test_mnist_truncated(tmp_path):
  _write_mnist(str(tmp_path))
  path = tmp_path / "train-images-idx3-ubyte"
  path.write_bytes(path.read_bytes()[:-10])
  with pytest.raises(DataError, match="truncated IDX file") as e:
    load_dataset("mnist", data_dir=str(tmp_path), n_per_class=1)
  msg = str(e.value)
  assert str(path) in msg
  want, got = 40 * 28 * 28, 40 * 28 * 28 - 10
  assert f"expected {want} bytes of image data, got {got}" in msg


def test_mnist_truncated_header_and_trailing_bytes(tmp_path):
  _write_mnist(str(tmp_path))
  path = tmp_path / "t10k-images-idx3-ubyte"
  raw = path.read_bytes()
  path.write_bytes(raw[:10])
  with pytest.raises(DataError, match="16-byte header, got 10 bytes") as e:
    load_dataset("mnist", data_dir=str(tmp_path), n_per_class=1)
  assert str(path) in str(e.value)
  path.write_bytes(raw + b"\x00\x00")
  with pytest.raises(DataError, match=r"got 15682 \(trailing bytes\)") as e:
    load_dataset("mnist", data_dir=str(tmp_path), n_per_class=1)
  assert str(path) in str(e.value)


def test_mnist_truncated_gz(tmp_path):
  _write_mnist(str(tmp_path), gz=True)
  path = tmp_path / "t10k-labels-idx1-ubyte.gz"
  raw = gzip.decompress(path.read_bytes())
  path.write_bytes(gzip.compress(raw[:-3]))
  with pytest.raises(DataError, match="truncated IDX file") as e:
    load_dataset("mnist", data_dir=str(tmp_path), n_per_class=1)
  assert str(path) in str(e.value) and "label data" in str(e.value)


@pytest.mark.parametrize("content", [b"not gzip at all", "cut"])
def test_mnist_corrupt_gzip(tmp_path, content):
  _write_mnist(str(tmp_path), gz=True)
  path = tmp_path / "train-images-idx3-ubyte.gz"
  if content == "cut":  # A gzip stream cut short.
    content = path.read_bytes()[:200]
  path.write_bytes(content)
  with pytest.raises(DataError) as e:
    load_dataset("mnist", data_dir=str(tmp_path), n_per_class=1)
  assert str(path) in str(e.value)


def test_mnist_wrong_magic(tmp_path):
  _write_mnist(str(tmp_path))
  path = tmp_path / "train-labels-idx1-ubyte"
  raw = bytearray(path.read_bytes())
  raw[3] = 3
  path.write_bytes(bytes(raw))
  with pytest.raises(DataError, match="magic") as e:
    load_dataset("mnist", data_dir=str(tmp_path), n_per_class=1)
  assert str(path) in str(e.value)


def test_mnist_missing_file(tmp_path):
  _write_mnist(str(tmp_path))
  os.remove(tmp_path / "t10k-images-idx3-ubyte")
  with pytest.raises(DataError, match="t10k-images-idx3-ubyte") as e:
    load_dataset("mnist", data_dir=str(tmp_path), n_per_class=1)
  assert "missing" in str(e.value) and e.value.argument == "data_dir"


def test_missing_data_dir(tmp_path):
  for name in ("mnist", "cifar10", "cifar100"):
    for empty in (None, ""):
      with pytest.raises(DataError, match="^data_dir is required") as e:
        load_dataset(name, task="multiclass", data_dir=empty)
      assert name in str(e.value) and e.value.argument == "data_dir"
      assert "--" not in str(e.value)
  with pytest.raises(DataError, match="^data_dir ") as e:
    load_dataset("cifar10", data_dir=str(tmp_path / "nope"))
  assert str(tmp_path / "nope") in str(e.value) and "no such directory" in str(e.value)
  assert e.value.argument == "data_dir" and "--" not in str(e.value)


def test_mnist_label_image_count_mismatch(tmp_path):
  _write_mnist(str(tmp_path))
  D.write_idx(tmp_path / "train-labels-idx1-ubyte", np.zeros(39, dtype=np.uint8))
  with pytest.raises(DataError, match="train-labels-idx1-ubyte"):
    load_dataset("mnist", data_dir=str(tmp_path), n_per_class=1)


def test_mnist_label_out_of_range(tmp_path):
  _write_mnist(str(tmp_path))
  path = tmp_path / "t10k-labels-idx1-ubyte"
  D.write_idx(path, np.full(20, 10, dtype=np.uint8))
  with pytest.raises(DataError, match="label 10 out of range 0..9") as e:
    load_dataset("mnist", data_dir=str(tmp_path), n_per_class=1)
  assert str(path) in str(e.value)


# --------------------------------------------------------------------------
# MNIST hardening: gzip bombs, impossible headers, mismatched files.
# --------------------------------------------------------------------------


def _gzip_stream(chunks):
  """A gzip file of the concatenated ``chunks``, compressed without holding them all."""
  comp = zlib.compressobj(9, zlib.DEFLATED, 31)
  return b"".join([comp.compress(c) for c in chunks] + [comp.flush()])


def test_mnist_gzip_bomb_refused_fast_and_small(tmp_path):
  _write_mnist(str(tmp_path), gz=True)
  # The header announces 40x28x28 images (31 kB); the stream inflates to 50 MB.
  bomb = _gzip_stream([_idx_header(3, (40, 28, 28))] + [bytes(1 << 20)] * 50)
  assert len(bomb) < 100_000
  path = tmp_path / "train-images-idx3-ubyte.gz"
  path.write_bytes(bomb)
  tracemalloc.start()
  start = time.perf_counter()
  try:
    with pytest.raises(DataError, match="gzip bomb") as e:
      load_dataset("mnist", data_dir=str(tmp_path), n_per_class=1)
    elapsed = time.perf_counter() - start
    _, peak = tracemalloc.get_traced_memory()
  finally:
    tracemalloc.stop()
  msg = str(e.value)
  assert str(path) in msg and "31376 bytes" in msg  # 16-byte header + 31360.
  assert elapsed < 0.5, elapsed
  assert peak < 8 << 20, peak  # Reading all of it would take 50 MB.


def test_idx_header_with_huge_dimensions(tmp_path):
  _write_mnist(str(tmp_path))
  path = tmp_path / "train-images-idx3-ubyte"
  path.write_bytes(_idx_header(3, (0xFFFFFFFF,) * 3) + bytes(100))
  with pytest.raises(DataError, match="4294967295x4294967295x4294967295") as e:
    load_dataset("mnist", data_dir=str(tmp_path), n_per_class=1)
  assert str(path) in str(e.value) and "limit" in str(e.value)
  # Under the limit, but far more than a small gzip file can inflate to.
  os.remove(path)
  gz = tmp_path / "train-images-idx3-ubyte.gz"
  gz.write_bytes(_gzip_stream([_idx_header(3, (1_000_000, 28, 28)), bytes(1000)]))
  start = time.perf_counter()
  with pytest.raises(DataError, match="1000000x28x28") as e:
    load_dataset("mnist", data_dir=str(tmp_path), n_per_class=1)
  assert time.perf_counter() - start < 0.5
  assert str(gz) in str(e.value) and "gzip file can hold" in str(e.value)


@pytest.mark.parametrize("gz", [False, True])
def test_idx_header_with_zero_dimensions(tmp_path, gz):
  _write_mnist(str(tmp_path), gz=gz)
  suffix = ".gz" if gz else ""
  path = tmp_path / ("t10k-images-idx3-ubyte" + suffix)
  D.write_idx(path, np.zeros((0, 28, 28), np.uint8))
  D.write_idx(tmp_path / ("t10k-labels-idx1-ubyte" + suffix), np.zeros((0,), np.uint8))
  with pytest.raises(DataError, match="0x28x28") as e:
    load_dataset("mnist", data_dir=str(tmp_path), n_per_class=1)
  assert str(path) in str(e.value) and "dimension must be >= 1" in str(e.value)
  header = _idx_header(3, (20, 0, 28))
  path.write_bytes(gzip.compress(header) if gz else header)
  with pytest.raises(DataError, match="20x0x28") as e:
    load_dataset("mnist", data_dir=str(tmp_path), n_per_class=1)
  assert str(path) in str(e.value)


def test_mnist_train_and_test_image_sizes_differ(tmp_path):
  _write_mnist(str(tmp_path))
  test_images = tmp_path / "t10k-images-idx3-ubyte"
  D.write_idx(test_images, np.zeros((20, 32, 32), np.uint8))
  with pytest.raises(DataError) as e:
    load_dataset("mnist", data_dir=str(tmp_path), n_per_class=1, subtract_mean=True)
  msg = str(e.value)
  assert str(tmp_path / "train-images-idx3-ubyte") in msg and str(test_images) in msg
  assert "28x28" in msg and "32x32" in msg


def test_loading_leaves_no_open_files(tmp_path):
  mnist, cifar = tmp_path / "mnist", tmp_path / "cifar"
  mnist.mkdir()
  cifar.mkdir()
  _write_mnist(str(mnist), gz=True)
  _write_cifar10_py(str(cifar))
  (tmp_path / "bad").mkdir()
  _write_mnist(str(tmp_path / "bad"), gz=True)
  (tmp_path / "bad" / "t10k-labels-idx1-ubyte.gz").write_bytes(b"junk")
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    load_dataset("mnist", data_dir=str(mnist), n_per_class=1)
    load_dataset("cifar10", data_dir=str(cifar), n_per_class=1)
    with pytest.raises(DataError):
      load_dataset("mnist", data_dir=str(tmp_path / "bad"), n_per_class=1)
    gc.collect()
  assert not [w for w in caught if issubclass(w.category, ResourceWarning)]


# --------------------------------------------------------------------------
# CIFAR-10.
# --------------------------------------------------------------------------


def test_cifar10_binary(tmp_path):
  batches, (_, yt) = _write_cifar10_bin(str(tmp_path))
  x_pool = np.concatenate([b[0] for b in batches])
  y_pool = np.concatenate([b[1] for b in batches])
  ds = load_dataset("cifar10", data_dir=str(tmp_path), n_per_class=4)
  assert ds.x_train.shape == (8, 32, 32, 3)
  vehicles = np.isin(y_pool[ds.train_idx], [0, 1, 8, 9])
  np.testing.assert_array_equal(ds.y_train, np.where(vehicles, 1.0, -1.0))
  np.testing.assert_array_equal(ds.y_train, [1] * 4 + [-1] * 4)
  for j in range(8):
    np.testing.assert_array_equal(ds.x_train[j], x_pool[ds.train_idx[j]] / np.float32(255.0))
  # Test set from the official test pool, default = all of it (balanced).
  n_veh = int(np.isin(yt, [0, 1, 8, 9]).sum())
  assert ds.x_test.shape[0] == 2 * min(n_veh, len(yt) - n_veh)


def test_cifar10_channel_order(tmp_path):
  _write_cifar10_bin(str(tmp_path))
  ds = load_dataset(
    "cifar10",
    task="multiclass",
    data_dir=str(tmp_path),
    n_per_class=10,
    n_part_per_class=0,
    n_test_per_class=1,
  )
  # Class-balanced with 10 per class over a pool of 100: the whole pool.
  assert sorted(ds.train_idx.tolist()) == list(range(100))
  red = ds.x_train[list(ds.train_idx).index(0)]
  blue = ds.x_train[list(ds.train_idx).index(1)]
  assert np.all(red[..., 0] == 1) and np.all(red[..., 1:] == 0)
  assert np.all(blue[..., 2] == 1) and np.all(blue[..., :2] == 0)
  assert ds.y_train[list(ds.train_idx).index(0)] == 0
  assert ds.y_train[list(ds.train_idx).index(1)] == 1
  np.testing.assert_array_equal(ds.y_train, np.repeat(np.arange(10), 10))
  assert ds.x_part.shape == (0, 32, 32, 3)


def test_cifar10_subdir(tmp_path):
  sub = tmp_path / "cifar-10-batches-bin"
  sub.mkdir()
  _write_cifar10_bin(str(sub))
  ds = load_dataset("cifar10", data_dir=str(tmp_path), n_per_class=2)
  assert ds.x_train.shape == (4, 32, 32, 3)


def test_cifar10_bad_size(tmp_path):
  _write_cifar10_bin(str(tmp_path))
  path = tmp_path / "data_batch_3.bin"
  path.write_bytes(path.read_bytes() + b"\x00")
  with pytest.raises(DataError, match="3073") as e:
    load_dataset("cifar10", data_dir=str(tmp_path), n_per_class=2)
  assert str(path) in str(e.value)
  path.write_bytes(b"")
  with pytest.raises(DataError, match="size 0 bytes") as e:
    load_dataset("cifar10", data_dir=str(tmp_path), n_per_class=2)
  assert str(path) in str(e.value)


def test_cifar10_bad_label(tmp_path):
  _write_cifar10_bin(str(tmp_path))
  x, _ = _cifar_arrays(3)
  path = tmp_path / "test_batch.bin"
  D.write_cifar10_bin(path, x, np.array([1, 12, 2]))
  with pytest.raises(DataError, match="label 12") as e:
    load_dataset("cifar10", data_dir=str(tmp_path), n_per_class=2)
  assert str(path) in str(e.value)


def test_write_cifar10_bin_checks(tmp_path):
  x, y = _cifar_arrays(2)
  with pytest.raises(DataError, match="32, 32, 3"):
    D.write_cifar10_bin(tmp_path / "a.bin", x[:, :16], y)
  with pytest.raises(DataError, match="expected 2 labels"):
    D.write_cifar10_bin(tmp_path / "a.bin", x, y[:1])
  with pytest.raises(DataError, match="labels must lie"):
    D.write_cifar10_bin(tmp_path / "a.bin", x, np.array([0, 256]))


def test_cifar10_missing_batch(tmp_path):
  _write_cifar10_bin(str(tmp_path))
  os.remove(tmp_path / "data_batch_5.bin")
  with pytest.raises(DataError, match="data_batch_5.bin"):
    load_dataset("cifar10", data_dir=str(tmp_path), n_per_class=2)
  with pytest.raises(DataError, match="data_batch_1.bin"):
    load_dataset("cifar10", data_dir=str(tmp_path / ".."), n_per_class=2)


@pytest.mark.parametrize("protocol", [2, 5])
def test_cifar10_python_pickle(tmp_path, protocol):
  batches = _write_cifar10_py(str(tmp_path), protocol=protocol)
  x_pool = np.concatenate([b[0] for b in batches[:5]])
  ds = load_dataset("cifar10", data_dir=str(tmp_path), n_per_class=3)
  assert ds.x_train.shape == (6, 32, 32, 3)
  for j in range(6):
    np.testing.assert_array_equal(ds.x_train[j], x_pool[ds.train_idx[j]] / np.float32(255.0))


def test_cifar10_python_pickle_legacy_module_name(tmp_path):
  # Pickles written by numpy < 2 (such as the official CIFAR python
  # release) refer to numpy.core.multiarray._reconstruct.
  batches = _write_cifar10_py(str(tmp_path), protocol=2)
  sub = tmp_path / "cifar-10-batches-py"
  for f in sub.iterdir():
    raw = f.read_bytes()
    assert b"numpy._core.multiarray" in raw
    f.write_bytes(raw.replace(b"numpy._core.multiarray", b"numpy.core.multiarray"))
  ds = load_dataset(
    "cifar10",
    task="multiclass",
    data_dir=str(tmp_path),
    n_per_class=1,
    n_part_per_class=0,
    n_test_per_class=1,
  )
  x_pool = np.concatenate([b[0] for b in batches[:5]])
  np.testing.assert_array_equal(ds.x_train, x_pool[ds.train_idx] / np.float32(255.0))


def test_cifar10_prefers_binary(tmp_path):
  _write_cifar10_py(str(tmp_path))
  batches, _ = _write_cifar10_bin(str(tmp_path))
  ds = load_dataset(
    "cifar10",
    task="multiclass",
    data_dir=str(tmp_path),
    n_per_class=10,
    n_part_per_class=0,
    n_test_per_class=1,
  )
  red = ds.x_train[list(ds.train_idx).index(0)]
  np.testing.assert_array_equal(red, batches[0][0][0] / np.float32(255.0))


class _Evil:
  def __init__(self, marker):
    self.marker = marker

  def __reduce__(self):
    return (os.system, (f"touch {self.marker}",))


def test_cifar10_malicious_pickle_refused(tmp_path):
  _write_cifar10_py(str(tmp_path))
  marker = tmp_path / "pwned"
  path = tmp_path / "cifar-10-batches-py" / "data_batch_2"
  with open(path, "wb") as f:
    pickle.dump({b"data": _Evil(marker), b"labels": [0]}, f, protocol=2)
  with pytest.raises(DataError, match="refusing to unpickle") as e:
    load_dataset("cifar10", data_dir=str(tmp_path), n_per_class=1)
  assert str(path) in str(e.value)
  assert "system" in str(e.value)
  assert not marker.exists()


def test_cifar10_pickle_wrong_content(tmp_path):
  _write_cifar10_py(str(tmp_path))
  path = tmp_path / "cifar-10-batches-py" / "test_batch"
  with open(path, "wb") as f:
    pickle.dump({b"data": np.zeros((2, 10), np.uint8), b"labels": [0, 1]}, f)
  with pytest.raises(DataError, match="3072") as e:
    load_dataset("cifar10", data_dir=str(tmp_path), n_per_class=1)
  assert str(path) in str(e.value)
  for content, match in (
    ([1, 2], "expected a pickled dict"),
    ({b"data": np.zeros((2, 3072), np.uint8)}, "lacks the data/labels"),
    ({b"data": np.zeros((2, 3072), np.uint8), b"labels": [0]}, "1 labels for 2 images"),
    ({b"data": np.zeros((2, 3072), np.uint8), b"labels": [0, 10]}, "out of range"),
  ):
    with open(path, "wb") as f:
      pickle.dump(content, f)
    with pytest.raises(DataError, match=match) as e:
      load_dataset("cifar10", data_dir=str(tmp_path), n_per_class=1)
    assert str(path) in str(e.value)
  path.write_bytes(b"garbage")
  with pytest.raises(DataError, match="test_batch"):
    load_dataset("cifar10", data_dir=str(tmp_path), n_per_class=1)


# --------------------------------------------------------------------------
# CIFAR-100.
# --------------------------------------------------------------------------


def _write_cifar100_bin(root, n):
  rng = np.random.default_rng(3)
  x = rng.integers(0, 256, size=(n, 3072), dtype=np.uint8)
  fine = (np.arange(n) % 100).astype(np.uint8)
  coarse = (fine // 5).astype(np.uint8)
  rec = np.concatenate([coarse[:, None], fine[:, None], x], axis=1)
  (root / "train.bin").write_bytes(rec.tobytes())
  (root / "test.bin").write_bytes(rec[:100].tobytes())
  return x, fine


def test_cifar100_binary_format(tmp_path):
  x, fine = _write_cifar100_bin(tmp_path, 200)
  ds = load_dataset(
    "cifar100", task="multiclass", data_dir=str(tmp_path), n_per_class=1, n_part_per_class=1
  )
  assert ds.num_classes == 100 and ds.x_train.shape == (100, 32, 32, 3)
  np.testing.assert_array_equal(ds.y_train, np.arange(100))
  np.testing.assert_array_equal(ds.y_train, fine[ds.train_idx])
  img = x[ds.train_idx[5]].reshape(3, 32, 32).transpose(1, 2, 0)
  np.testing.assert_array_equal(ds.x_train[5], img / np.float32(255.0))
  with pytest.raises(DataError, match="binary") as e:
    load_dataset("cifar100", data_dir=str(tmp_path))
  assert e.value.argument == "task" and str(e.value).startswith("task ")


def test_cifar100_bad_coarse_label(tmp_path):
  _write_cifar100_bin(tmp_path, 200)
  raw = bytearray((tmp_path / "test.bin").read_bytes())
  raw[0] = 20
  (tmp_path / "test.bin").write_bytes(bytes(raw))
  with pytest.raises(DataError, match="coarse label 20") as e:
    load_dataset("cifar100", task="multiclass", data_dir=str(tmp_path), n_per_class=1)
  assert str(tmp_path / "test.bin") in str(e.value)


def test_cifar100_python_version(tmp_path):
  sub = tmp_path / "cifar-100-python"
  sub.mkdir()
  rng = np.random.default_rng(5)
  x = rng.integers(0, 256, size=(200, 3072), dtype=np.uint8)
  fine = [i % 100 for i in range(200)]
  for name in ("train", "test"):
    with open(sub / name, "wb") as f:
      pickle.dump({b"data": x, b"fine_labels": fine, b"coarse_labels": [0] * 200}, f)
  ds = load_dataset(
    "cifar100",
    task="multiclass",
    data_dir=str(tmp_path),
    n_per_class=2,
    n_part_per_class=0,
    n_test_per_class=1,
  )
  np.testing.assert_array_equal(ds.y_train, np.repeat(np.arange(100), 2))
  img = x[ds.train_idx[3]].reshape(3, 32, 32).transpose(1, 2, 0)
  np.testing.assert_array_equal(ds.x_train[3], img / np.float32(255.0))
  os.remove(sub / "train")
  with pytest.raises(DataError, match="train.bin: missing file") as e:
    load_dataset("cifar100", task="multiclass", data_dir=str(tmp_path))
  assert e.value.argument == "data_dir"
