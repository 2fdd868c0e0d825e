"""Tests for recon_jax.data: loaders, formats, sampling and safety."""

import gzip
import os
import pickle

import numpy as np
import pytest

from recon_jax import data as D
from recon_jax.data import DataError, load_dataset

# --------------------------------------------------------------------------
# Fixtures: tiny on-disk datasets in the official formats.
# --------------------------------------------------------------------------

MNIST_FILES = ('train-images-idx3-ubyte', 'train-labels-idx1-ubyte',
        't10k-images-idx3-ubyte', 't10k-labels-idx1-ubyte')


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
    names = [n.replace('-idx', '.idx') for n in names]
  suffix = '.gz' if gz else ''
  for n, a in zip(names, (xtr, ytr, xte, yte)):
    D.write_idx(os.path.join(root, n + suffix), a)
  return xtr, ytr, xte, yte


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
    D.write_cifar10_bin(os.path.join(root, f'data_batch_{i}.bin'), x, y)
    batches.append((x, y))
  xt, yt = _cifar_arrays(n, label_offset=11)
  D.write_cifar10_bin(os.path.join(root, 'test_batch.bin'), xt, yt)
  return batches, (xt, yt)


def _to_cifar_flat(x):
  return x.transpose(0, 3, 1, 2).reshape(x.shape[0], -1)


def _write_cifar10_py(root, n=20, protocol=2):
  sub = os.path.join(root, 'cifar-10-batches-py')
  os.makedirs(sub, exist_ok=True)
  out = []
  for name, off in [(f'data_batch_{i}', i) for i in range(1, 6)] + [
    ('test_batch', 11)]:
    x, y = _cifar_arrays(n, label_offset=off)
    d = {b'data': _to_cifar_flat(x), b'labels': [int(v) for v in y],
       b'batch_label': b'fixture'}
    with open(os.path.join(sub, name), 'wb') as f:
      pickle.dump(d, f, protocol=protocol)
    out.append((x, y))
  return out


# --------------------------------------------------------------------------
# MNIST.
# --------------------------------------------------------------------------


@pytest.mark.parametrize('gz,dotted', [(False, False), (True, False),
                    (False, True)])
def test_mnist_idx_roundtrip(tmp_path, gz, dotted):
  xtr, ytr, _, _ = _write_mnist(str(tmp_path), gz=gz, dotted=dotted)
  ds = load_dataset('mnist', data_dir=str(tmp_path), n_per_class=3)
  assert ds.x_train.shape == (6, 28, 28, 1)
  assert ds.x_train.dtype == np.float32 and ds.y_train.dtype == np.float32
  assert ds.train_idx.dtype == np.int64
  np.testing.assert_array_equal(ds.y_train, [1, 1, 1, -1, -1, -1])
  np.testing.assert_array_equal(ds.y_train, np.where(ytr[ds.train_idx] % 2,
                            1.0, -1.0))
  for j in (0, 4):
    np.testing.assert_array_equal(
      ds.x_train[j, ..., 0],
      xtr[ds.train_idx[j]].astype(np.float32) / np.float32(255.0))
  # Defaults: partition = n_per_class, test = everything in the test pool.
  assert ds.x_part.shape == (6, 28, 28, 1)
  assert ds.x_test.shape == (20, 28, 28, 1)
  assert sorted(ds.y_test.tolist()) == [-1.0] * 10 + [1.0] * 10
  assert ds.value_range == (0.0, 1.0) and ds.num_classes == 2
  assert D.input_shape(ds) == (28, 28, 1)


def test_mnist_multiclass(tmp_path):
  xtr, ytr, _, _ = _write_mnist(str(tmp_path))
  ds = load_dataset('mnist', task='multiclass', data_dir=str(tmp_path),
           n_per_class=2, n_part_per_class=1, n_test_per_class=1)
  assert ds.y_train.dtype == np.int32 and ds.num_classes == 10
  np.testing.assert_array_equal(ds.y_train, np.repeat(np.arange(10), 2))
  np.testing.assert_array_equal(ds.y_train, ytr[ds.train_idx])
  assert ds.x_part.shape[0] == 10 and ds.x_test.shape[0] == 10
  # Partition drawn from the train pool, disjoint from train.
  train_rows = {xtr[i].tobytes() for i in ds.train_idx}
  for row in ds.x_part:
    assert (np.rint(row[..., 0] * 255).astype(np.uint8).tobytes()
        not in train_rows)


def test_write_idx_header(tmp_path):
  p = tmp_path / 'x-idx1-ubyte'
  D.write_idx(p, np.arange(5, dtype=np.uint8))
  raw = p.read_bytes()
  assert raw[:4] == b'\x00\x00\x08\x01' and raw[4:8] == b'\x00\x00\x00\x05'
  assert raw[8:] == bytes(range(5))
  with pytest.raises(DataError):
    D.write_idx(p, np.arange(5, dtype=np.int32))


def test_mnist_truncated(tmp_path):
  _write_mnist(str(tmp_path))
  path = tmp_path / 'train-images-idx3-ubyte'
  path.write_bytes(path.read_bytes()[:-10])
  with pytest.raises(DataError, match='truncated IDX file') as e:
    load_dataset('mnist', data_dir=str(tmp_path), n_per_class=1)
  msg = str(e.value)
  assert str(path) in msg
  want, got = 40 * 28 * 28, 40 * 28 * 28 - 10
  assert f'expected {want} bytes of image data, got {got}' in msg


def test_mnist_truncated_gz(tmp_path):
  _write_mnist(str(tmp_path), gz=True)
  path = tmp_path / 't10k-labels-idx1-ubyte.gz'
  raw = gzip.decompress(path.read_bytes())
  path.write_bytes(gzip.compress(raw[:-3]))
  with pytest.raises(DataError, match='truncated IDX file') as e:
    load_dataset('mnist', data_dir=str(tmp_path), n_per_class=1)
  assert str(path) in str(e.value) and 'label data' in str(e.value)


def test_mnist_corrupt_gzip(tmp_path):
  _write_mnist(str(tmp_path), gz=True)
  path = tmp_path / 'train-labels-idx1-ubyte.gz'
  path.write_bytes(b'not gzip at all')
  with pytest.raises(DataError) as e:
    load_dataset('mnist', data_dir=str(tmp_path), n_per_class=1)
  assert str(path) in str(e.value)


def test_mnist_wrong_magic(tmp_path):
  _write_mnist(str(tmp_path))
  path = tmp_path / 'train-labels-idx1-ubyte'
  raw = bytearray(path.read_bytes())
  raw[3] = 3
  path.write_bytes(bytes(raw))
  with pytest.raises(DataError, match='magic') as e:
    load_dataset('mnist', data_dir=str(tmp_path), n_per_class=1)
  assert str(path) in str(e.value)


def test_mnist_missing_file(tmp_path):
  _write_mnist(str(tmp_path))
  os.remove(tmp_path / 't10k-images-idx3-ubyte')
  with pytest.raises(DataError, match='t10k-images-idx3-ubyte') as e:
    load_dataset('mnist', data_dir=str(tmp_path), n_per_class=1)
  assert 'missing' in str(e.value)


def test_missing_data_dir(tmp_path):
  with pytest.raises(DataError, match='--data_dir'):
    load_dataset('mnist')
  with pytest.raises(DataError, match='--data_dir') as e:
    load_dataset('cifar10', data_dir=str(tmp_path / 'nope'))
  assert str(tmp_path / 'nope') in str(e.value)


def test_mnist_label_image_count_mismatch(tmp_path):
  _write_mnist(str(tmp_path))
  D.write_idx(tmp_path / 'train-labels-idx1-ubyte',
        np.zeros(39, dtype=np.uint8))
  with pytest.raises(DataError, match='train-labels-idx1-ubyte'):
    load_dataset('mnist', data_dir=str(tmp_path), n_per_class=1)


# --------------------------------------------------------------------------
# CIFAR-10.
# --------------------------------------------------------------------------


def test_cifar10_binary(tmp_path):
  batches, (xt, yt) = _write_cifar10_bin(str(tmp_path))
  x_pool = np.concatenate([b[0] for b in batches])
  y_pool = np.concatenate([b[1] for b in batches])
  ds = load_dataset('cifar10', data_dir=str(tmp_path), n_per_class=4)
  assert ds.x_train.shape == (8, 32, 32, 3)
  vehicles = np.isin(y_pool[ds.train_idx], [0, 1, 8, 9])
  np.testing.assert_array_equal(ds.y_train, np.where(vehicles, 1.0, -1.0))
  np.testing.assert_array_equal(ds.y_train, [1] * 4 + [-1] * 4)
  for j in range(8):
    np.testing.assert_array_equal(
      ds.x_train[j], x_pool[ds.train_idx[j]] / np.float32(255.0))
  # Test set from the official test pool, default = all of it (balanced).
  n_veh = int(np.isin(yt, [0, 1, 8, 9]).sum())
  assert ds.x_test.shape[0] == 2 * min(n_veh, len(yt) - n_veh)


def test_cifar10_channel_order(tmp_path):
  _write_cifar10_bin(str(tmp_path))
  ds = load_dataset('cifar10', task='multiclass', data_dir=str(tmp_path),
           n_per_class=10, n_part_per_class=0, n_test_per_class=1)
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
  sub = tmp_path / 'cifar-10-batches-bin'
  sub.mkdir()
  _write_cifar10_bin(str(sub))
  ds = load_dataset('cifar10', data_dir=str(tmp_path), n_per_class=2)
  assert ds.x_train.shape == (4, 32, 32, 3)


def test_cifar10_bad_size(tmp_path):
  _write_cifar10_bin(str(tmp_path))
  path = tmp_path / 'data_batch_3.bin'
  path.write_bytes(path.read_bytes() + b'\x00')
  with pytest.raises(DataError, match='3073') as e:
    load_dataset('cifar10', data_dir=str(tmp_path), n_per_class=2)
  assert str(path) in str(e.value)


def test_cifar10_bad_label(tmp_path):
  _write_cifar10_bin(str(tmp_path))
  x, _ = _cifar_arrays(3)
  path = tmp_path / 'test_batch.bin'
  D.write_cifar10_bin(path, x, np.array([1, 12, 2]))
  with pytest.raises(DataError, match='label 12') as e:
    load_dataset('cifar10', data_dir=str(tmp_path), n_per_class=2)
  assert str(path) in str(e.value)


def test_cifar10_missing_batch(tmp_path):
  _write_cifar10_bin(str(tmp_path))
  os.remove(tmp_path / 'data_batch_5.bin')
  with pytest.raises(DataError, match='data_batch_5.bin'):
    load_dataset('cifar10', data_dir=str(tmp_path), n_per_class=2)
  with pytest.raises(DataError, match='data_batch_1.bin'):
    load_dataset('cifar10', data_dir=str(tmp_path / '..'), n_per_class=2)


@pytest.mark.parametrize('protocol', [2, 5])
def test_cifar10_python_pickle(tmp_path, protocol):
  batches = _write_cifar10_py(str(tmp_path), protocol=protocol)
  x_pool = np.concatenate([b[0] for b in batches[:5]])
  ds = load_dataset('cifar10', data_dir=str(tmp_path), n_per_class=3)
  assert ds.x_train.shape == (6, 32, 32, 3)
  for j in range(6):
    np.testing.assert_array_equal(
      ds.x_train[j], x_pool[ds.train_idx[j]] / np.float32(255.0))


def test_cifar10_python_pickle_legacy_module_name(tmp_path):
  # Pickles written by numpy < 2 (such as the official CIFAR python
  # release) refer to numpy.core.multiarray._reconstruct.
  batches = _write_cifar10_py(str(tmp_path), protocol=2)
  sub = tmp_path / 'cifar-10-batches-py'
  for f in sub.iterdir():
    raw = f.read_bytes()
    assert b'numpy._core.multiarray' in raw
    f.write_bytes(raw.replace(b'numpy._core.multiarray',
                 b'numpy.core.multiarray'))
  ds = load_dataset('cifar10', task='multiclass', data_dir=str(tmp_path),
           n_per_class=1, n_part_per_class=0, n_test_per_class=1)
  x_pool = np.concatenate([b[0] for b in batches[:5]])
  np.testing.assert_array_equal(
    ds.x_train, x_pool[ds.train_idx] / np.float32(255.0))


def test_cifar10_prefers_binary(tmp_path):
  _write_cifar10_py(str(tmp_path))
  batches, _ = _write_cifar10_bin(str(tmp_path))
  ds = load_dataset('cifar10', task='multiclass', data_dir=str(tmp_path),
           n_per_class=10, n_part_per_class=0, n_test_per_class=1)
  red = ds.x_train[list(ds.train_idx).index(0)]
  np.testing.assert_array_equal(red, batches[0][0][0] / np.float32(255.0))


class _Evil:

  def __init__(self, marker):
    self.marker = marker

  def __reduce__(self):
    return (os.system, (f'touch {self.marker}',))


def test_cifar10_malicious_pickle_refused(tmp_path):
  _write_cifar10_py(str(tmp_path))
  marker = tmp_path / 'pwned'
  path = tmp_path / 'cifar-10-batches-py' / 'data_batch_2'
  with open(path, 'wb') as f:
    pickle.dump({b'data': _Evil(marker), b'labels': [0]}, f, protocol=2)
  with pytest.raises(DataError, match='refusing to unpickle') as e:
    load_dataset('cifar10', data_dir=str(tmp_path), n_per_class=1)
  assert str(path) in str(e.value)
  assert 'system' in str(e.value)
  assert not marker.exists()


def test_cifar10_pickle_wrong_content(tmp_path):
  _write_cifar10_py(str(tmp_path))
  path = tmp_path / 'cifar-10-batches-py' / 'test_batch'
  with open(path, 'wb') as f:
    pickle.dump({b'data': np.zeros((2, 10), np.uint8),
           b'labels': [0, 1]}, f)
  with pytest.raises(DataError, match='3072') as e:
    load_dataset('cifar10', data_dir=str(tmp_path), n_per_class=1)
  assert str(path) in str(e.value)
  path.write_bytes(b'garbage')
  with pytest.raises(DataError, match='test_batch'):
    load_dataset('cifar10', data_dir=str(tmp_path), n_per_class=1)


# --------------------------------------------------------------------------
# CIFAR-100.
# --------------------------------------------------------------------------


def _write_cifar100_bin(root, n):
  rng = np.random.default_rng(3)
  x = rng.integers(0, 256, size=(n, 3072), dtype=np.uint8)
  fine = (np.arange(n) % 100).astype(np.uint8)
  coarse = (fine // 5).astype(np.uint8)
  rec = np.concatenate([coarse[:, None], fine[:, None], x], axis=1)
  (root / 'train.bin').write_bytes(rec.tobytes())
  (root / 'test.bin').write_bytes(rec[:100].tobytes())
  return x, fine


def test_cifar100_binary_format(tmp_path):
  x, fine = _write_cifar100_bin(tmp_path, 200)
  ds = load_dataset('cifar100', task='multiclass', data_dir=str(tmp_path),
           n_per_class=1, n_part_per_class=1)
  assert ds.num_classes == 100 and ds.x_train.shape == (100, 32, 32, 3)
  np.testing.assert_array_equal(ds.y_train, np.arange(100))
  np.testing.assert_array_equal(ds.y_train, fine[ds.train_idx])
  img = x[ds.train_idx[5]].reshape(3, 32, 32).transpose(1, 2, 0)
  np.testing.assert_array_equal(ds.x_train[5], img / np.float32(255.0))
  with pytest.raises(DataError, match='binary'):
    load_dataset('cifar100', data_dir=str(tmp_path))


# --------------------------------------------------------------------------
# Embedded datasets and sampling.
# --------------------------------------------------------------------------


def test_digits():
  ds = load_dataset('digits', n_per_class=5)
  assert ds.x_train.shape == (10, 8, 8, 1) and ds.x_train.dtype == np.float32
  np.testing.assert_array_equal(ds.y_train, [1] * 5 + [-1] * 5)
  for x in (ds.x_train, ds.x_test, ds.x_part):
    assert x.min() >= 0.0 and x.max() <= 1.0
  assert ds.x_train.max() > 0.9
  from sklearn.datasets import load_digits
  digits = load_digits()
  np.testing.assert_allclose(ds.x_train[..., 0],
                digits.images[ds.train_idx] / 16.0, atol=1e-7)
  np.testing.assert_array_equal(
    ds.y_train, np.where(digits.target[ds.train_idx] % 2, 1.0, -1.0))
  mc = load_dataset('digits', task='multiclass', n_per_class=3)
  assert mc.num_classes == 10 and mc.y_train.dtype == np.int32
  np.testing.assert_array_equal(mc.y_train, np.repeat(np.arange(10), 3))
  np.testing.assert_array_equal(mc.y_train, digits.target[mc.train_idx])
  assert np.bincount(mc.y_test, minlength=10).min() == np.bincount(
    mc.y_test, minlength=10).max()


def _row_set(x):
  return {r.tobytes() for r in x}


def test_lfw_and_disjoint_splits():
  ds = load_dataset('lfw', n_per_class=10, n_part_per_class=7,
           n_test_per_class=20)
  assert ds.x_train.shape == (20, 25, 25, 1)
  assert ds.x_part.shape == (14, 25, 25, 1)
  assert ds.x_test.shape == (40, 25, 25, 1)
  for x in (ds.x_train, ds.x_test, ds.x_part):
    assert x.dtype == np.float32 and x.min() >= 0.0 and x.max() <= 1.0
  np.testing.assert_array_equal(ds.y_train, [1] * 10 + [-1] * 10)
  # First 100 images of the lfw subset are faces (+1).
  np.testing.assert_array_equal(ds.y_train,
                 np.where(ds.train_idx < 100, 1.0, -1.0))
  for y, n in ((ds.y_part, 7), (ds.y_test, 20)):
    assert (y == 1).sum() == n and (y == -1).sum() == n
  tr, te, pa = _row_set(ds.x_train), _row_set(ds.x_test), _row_set(ds.x_part)
  assert len(tr) == 20 and len(te) == 40 and len(pa) == 14
  assert not tr & te and not tr & pa and not te & pa
  # Defaults: partition = n_per_class, test = the remaining balanced rest.
  d2 = load_dataset('lfw', n_per_class=30)
  assert d2.x_part.shape[0] == 60 and d2.x_test.shape[0] == 80
  mc = load_dataset('lfw', task='multiclass', n_per_class=2)
  assert mc.num_classes == 2 and mc.y_train.dtype == np.int32
  np.testing.assert_array_equal(mc.y_train, [0, 0, 1, 1])


def test_digits_disjoint_by_index():
  # Full partition of the pool: train, part and test exhaust each class.
  ds = load_dataset('digits', task='multiclass', n_per_class=50,
           n_part_per_class=50)
  n_min = 174  # Smallest digit class in load_digits.
  assert ds.x_test.shape[0] == 10 * (n_min - 100)
  # No training image index repeats; identical train_idx for identical seeds.
  assert len(set(ds.train_idx.tolist())) == ds.train_idx.size


def test_determinism_and_seed():
  a = load_dataset('digits', n_per_class=4, seed=3)
  b = load_dataset('digits', n_per_class=4, seed=3)
  c = load_dataset('digits', n_per_class=4, seed=4)
  for fa, fb in zip(a, b):
    if isinstance(fa, np.ndarray):
      np.testing.assert_array_equal(fa, fb)
    else:
      assert fa == fb
  assert not np.array_equal(a.train_idx, c.train_idx)
  assert not np.array_equal(a.x_part, c.x_part)


def test_sampling_errors(tmp_path):
  with pytest.raises(DataError, match='--n_per_class') as e:
    load_dataset('lfw', n_per_class=101)
  assert '100' in str(e.value)
  with pytest.raises(DataError, match='--n_per_class'):
    load_dataset('lfw', n_per_class=0)
  with pytest.raises(DataError, match='--n_part_per_class'):
    load_dataset('lfw', n_per_class=60, n_part_per_class=41)
  with pytest.raises(DataError, match='--n_test_per_class'):
    load_dataset('lfw', n_per_class=50, n_test_per_class=1)
  _write_mnist(str(tmp_path))
  with pytest.raises(DataError, match='--n_per_class') as e:
    load_dataset('mnist', data_dir=str(tmp_path), n_per_class=21)
  assert '20' in str(e.value)
  with pytest.raises(DataError, match='--n_test_per_class'):
    load_dataset('mnist', data_dir=str(tmp_path), n_per_class=1,
           n_test_per_class=11)


def test_name_and_task_errors():
  with pytest.raises(DataError, match='--dataset') as e:
    load_dataset('imagenet')
  assert 'cifar10' in str(e.value) and 'digits' in str(e.value)
  with pytest.raises(DataError, match='--task'):
    load_dataset('digits', task='regression')
  assert issubclass(DataError, ValueError)
  assert set(D.DATASETS) == {'digits', 'lfw', 'toy2d', 'mnist', 'cifar10',
                'cifar100'}


def test_toy2d():
  ds = load_dataset('toy2d', toy_n=12, seed=1)
  assert ds.x_train.shape == (12, 2) and ds.x_train.dtype == np.float32
  assert ds.x_test.shape == (200, 2) and ds.x_part.shape == (200, 2)
  for x in (ds.x_train, ds.x_test, ds.x_part):
    np.testing.assert_allclose(np.linalg.norm(x, axis=1), 1.0, atol=1e-6)
  np.testing.assert_array_equal(ds.y_train, [1] * 6 + [-1] * 6)
  # Labels alternate around the circle (train_idx = position on the circle).
  by_angle = np.empty(12)
  by_angle[ds.train_idx] = ds.y_train
  np.testing.assert_array_equal(by_angle, np.tile([1, -1], 6))
  ang = np.sort(np.arctan2(ds.x_train[:, 1], ds.x_train[:, 0]))
  np.testing.assert_allclose(np.diff(ang), 2 * np.pi / 12, atol=1e-5)
  for x, y in ((ds.x_test, ds.y_test), (ds.x_part, ds.y_part)):
    train = ds.x_train.astype(np.float64)
    nearest = np.argmax(x.astype(np.float64) @ train.T, axis=1)
    np.testing.assert_array_equal(y, ds.y_train[nearest])
  assert ds.value_range == (-np.inf, np.inf)
  small = load_dataset('toy2d', toy_n=4, n_test_per_class=5,
             n_part_per_class=2, n_per_class=10**6)
  assert small.x_test.shape == (10, 2) and small.x_part.shape == (4, 2)
  mc = load_dataset('toy2d', task='multiclass', toy_n=4)
  np.testing.assert_array_equal(mc.y_train, [0, 0, 1, 1])
  for bad in (3, 0, 2.0):
    with pytest.raises(DataError, match='--toy_n'):
      load_dataset('toy2d', toy_n=bad)


def test_subtract_mean_and_add_mean():
  raw = load_dataset('lfw', n_per_class=5, seed=2)
  ds = load_dataset('lfw', n_per_class=5, seed=2, subtract_mean=True)
  np.testing.assert_array_equal(raw.mean, 0.0)
  assert ds.mean.shape == (25, 25, 1) and ds.mean.dtype == np.float32
  np.testing.assert_allclose(ds.x_train.mean(0), 0.0, atol=1e-6)
  for a, b in ((ds.x_train, raw.x_train), (ds.x_test, raw.x_test),
         (ds.x_part, raw.x_part)):
    assert a.dtype == np.float32
    np.testing.assert_allclose(D.add_mean(a, ds), b, atol=1e-6)
  np.testing.assert_allclose(D.add_mean(ds.x_train[0], ds), raw.x_train[0],
                atol=1e-6)
  toy = load_dataset('toy2d', toy_n=6, subtract_mean=True)
  assert toy.mean.shape == (2,)
  np.testing.assert_allclose(toy.x_train.mean(0), 0.0, atol=1e-6)
