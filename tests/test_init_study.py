"""The init-study binary's library runs end to end at a tiny size."""
import json
import os

import jax
import pytest

from experiments import init_study_lib


@pytest.fixture(autouse=True)
def _fast_compile():
  """Tiny, compile-bound programs: skip XLA's optimisation passes."""
  old = jax.config.read("jax_disable_most_optimizations")
  jax.config.update("jax_disable_most_optimizations", True)
  yield
  jax.config.update("jax_disable_most_optimizations", old)


def test_init_study_quick(tmp_path):
  cfg = init_study_lib.quick_config(n_per_class=2, width=8, kkt_width=8, steps=3,
                                    chunk_steps=3, kkt_steps=3, kkt_train_epochs=200,
                                    inner_maxiter=20, run_relu=False)
  init_study_lib.run(cfg, str(tmp_path))
  for f in ("config.json", "metrics.json", "summary.md", "reconstructions.npz",
            "bilevel_affine_random.png", "kkt_mlp_relu_partition.png"):
    assert os.path.exists(tmp_path / f), f
  m = json.loads((tmp_path / "metrics.json").read_text())
  for name in ("bilevel_affine", "bilevel_one_hidden_softplus", "kkt_mlp_relu"):
    assert set(m[name]["settings"]) == {"random", "ground_truth", "partition"}
    assert "ground_truth_recovered" in m[name]["findings"]
  row = m["bilevel_affine"]["settings"]["ground_truth"]
  for k in ("param_dist", "inner_grad_norm", "l2_train", "l2_partition", "l2_noise",
            "ssim_train"):
    assert k in row
  assert "reproduced" in (tmp_path / "summary.md").read_text()
