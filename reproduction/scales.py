"""The reproduction's scales: per scale, the data, networks and budgets of each role its runs
play (``experiments/configs/reproduce.py`` builds the runs from them).  Haim et al.'s MNIST
setting is the main rows' and the ablations' base at every scale but quick (a tiny stand-in);
LFW faces and scikit-learn digits are the small-image supplement."""

# Haim et al.'s MNIST setting (their §5.1): odd vs even digits of mnist5k, d-1000-1000-1 from
# a first layer of std 1e-4 (He elsewhere), biases in the first layer only, full-batch GD at lr
# 0.01 for 10^4 epochs (App. C.3.2: "very similar" reconstructions to longer training).
MNIST = dict(dataset="mnist5k", epochs=10_000)
# He's std for the first layer of 784 inputs, the std the kaiming scheme draws the other layers
# from: the first layer set to it is App. C.3.1's "standard Kaiming initialisation in all layers"
# (a flag cannot unset first_layer_std).
HE_FIRST = (2 / 784) ** 0.5
# What 2 cores allow of their sweep (100 restarts x 50,000 steps of their ranges) per draw:
# 8 restarts x 2000 steps (0.3 % of it), the attacker's own scores on.
MNIST_ATTACK = {
  "search": {"num_restarts": 8, "steps": 2000, "chunk_steps": 1000},
  "evaluation": {"identify": True},
}


def scale(name: str) -> dict:
  """The scale ``name``'s data, networks and budgets, by the role each run plays (the
  reproduce config's runs read them)."""
  if name == "quick":
    tiny_mnist = dict(dataset="mnist5k", n_per_class=3)
    # tiny is He-initialised; the stand-in for Haim's setting has their 1e-4 first layer.
    small = dict(tiny_mnist, first_layer_std=1e-4, epochs=400)
    wd = dict(activation="softplus", wd=1e-2, wd_epochs=200, converge_tol=1e-8)
    return dict(
      attack={},
      faces=("tiny", {"dataset": "lfw"}),
      digits=("tiny", {}),
      mnist=("tiny", {}, small),
      mnist_n=(2, 3, 5),
      widths=(16, 16),
      depth=(32, 16, 8),
      long_epochs=800,
      npc_deco=1,
      toy="quick",
      init=("tiny", {}),
      faces_wd=("tiny", dict(dataset="lfw", **wd), {"runtime": {"x64": True}}),
      map=("leakage_map_quick", 2),
    )
  if name == "default":
    return dict(
      attack={"search": {"num_restarts": 8, "steps": 3000, "chunk_steps": 1000}},
      faces=("lfw", {}),
      digits=("digits", {}),
      mnist=("paper_mnist5k", MNIST_ATTACK, MNIST),
      mnist_n=(10, 25, 50),
      widths=(100, 100),  # Haim et al.'s Table 1 architectures
      depth=(1000, 500, 100),
      long_epochs=100_000,
      npc_deco=5,
      toy="small",
      init=("default", {}),
      faces_wd=("lfw_wd", {}, {}),  # the preset is float64 already
      map=("leakage_map_cone", 3),
    )
  wd = dict(activation="softplus", wd=1e-2, wd_epochs=2000, converge_tol=1e-10)
  return dict(
    attack={},
    faces=("paper", {"dataset": "cifar10"}),
    digits=("paper", {"dataset": "mnist"}),
    mnist=("paper_mnist5k", {}, MNIST),  # the whole sweep, without the attacker's own scores
    mnist_n=(10, 25, 50),
    widths=(100, 100),
    depth=(1000, 500, 100),
    long_epochs=100_000,
    npc_deco=50,
    toy="paper",
    init=(
      "default",
      {
        "dataset": "cifar10",
        "n_per_class": 250,
        "bilevel_width": 6144,
        "bilevel_steps": 2000,
        "kkt_width": 1000,
        "kkt_steps": 50_000,
      },
    ),
    faces_wd=("paper", {"dataset": "cifar10", **wd}, {"runtime": {"x64": True}}),
    tune_victim={"dataset": "cifar10", "n_per_class": 50},
    map=("leakage_map_cone", 3),
  )
