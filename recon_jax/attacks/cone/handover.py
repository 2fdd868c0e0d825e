"""When the cone hands over to the KKT search in the change's span: what counts as read
(a sharp facet's image), and why a reading falls short (:func:`short`), which the job's
hand-over reads (``AttackSpec.hands_over``, ``always_hands_over``).

Imports nothing else of the cone, so every part may say why it falls short in its terms.
"""

from __future__ import annotations

from typing import Optional

# The cone read too little where it read fewer images than this share of the directions the
# first layer's change keeps (or of n): the facets of the rest were not found.  With 0.9 a
# reading one image short of the span's directions is enough at 10 + 10 faces (18-20 read of
# 19-20 directions), and every 50 + 50 face reading hands over (37-57 read of 88-94).
SPAN_READ = 0.9
# A facet is sharp where at least this share of the units its image leaves inactive (at
# theta_0 and theta*) are on it, at 0 in its program, and of the units on it are inactive on
# its image (:func:`recon_jax.attacks.cone.decoding.sharpness`): an image's facet holds every
# unit inactive on it and no other, where a program that landed between facets gives a blend
# whose inactive units the facet holds only in part (or, fixed by the other facets, one
# active on units the facet holds); only sharp facets' images count as read.  Why 0.93, both
# ways: finetune Quickstart victims (draws 0-2, held-image starts): every facet whose image
# is exact (56 of 58) 0.940-1.000, a blend at 0.849; 50 + 50 MNIST draws 0-2 (4,800 held
# starts): 7, 8 and 8 facets, all blends (0.75-0.88 to the nearest training image),
# 0.76-0.91 one way and 0.84-0.90 the other.  One way, on one hidden layer (random and
# held-image starts, default options): 10 + 10 faces, 20 facets all exact (normalised
# cross-correlation 1.000 to a training image), 0.961-1.000 (median 0.998); 50 + 50 MNIST
# digits (784-1024-1), 23 facets all blends (0.82-0.90 to the nearest training image),
# 0.816-0.889 (median 0.850); 25 + 25 faces, 46 facets: the 37 exact ones (above 0.95)
# 0.947-1.000 but one at 0.798, the 9 blends 0.37-0.944, 8 of them below.  The facet's own
# statistics do not tell them apart: its share of the units at 0 (0.44-0.50 in both) and
# its gap (2.2-8.3 decades exact, 2.7-5.6 blends).
SHARP = 0.93

SOFT_FACETS = (
  "off facets that squared error leaves soft (an image's coefficient may change sign in training)"
)
SIGNS_LOST = (
  "through the first of several hidden layers, whose facets lose the signs of the images' "
  "coefficients (a facet that agreed with its seed may still give a blend)"
)


def unsure_of(mixed: bool, hidden_layers: int) -> Optional[str]:
  """Why any reading of a network of ``hidden_layers`` hidden layers falls short (:func:`short`)
  and hands over, whatever it read: :data:`SOFT_FACETS` under squared error (``mixed``),
  :data:`SIGNS_LOST` past one hidden layer; None where a reading can be exact."""
  return SOFT_FACETS if mixed else SIGNS_LOST if hidden_layers > 1 else None


def short(
  summary: dict, read: int, n: Optional[int], unsure: Optional[str] = None, blends: int = 0
) -> Optional[str]:
  """Why ``read`` images fall short of what the change's span holds (``summary``:
  :meth:`Reading.summary`; ``n``: the training images, None where unknown), or None: fewer
  than :data:`SPAN_READ` of min(n, the span's directions) (of the directions where n is
  unknown: a blind audit's blends hand over as a known n's do).  With ``unsure`` (why an image read
  may not be exact: :data:`SOFT_FACETS`, :data:`SIGNS_LOST`) every reading falls short, and
  the search checks it: the report scores the cone's images beside the search's, so that
  costs the search's minutes, never an image the cone read.  ``blends``: the facets found
  beside ``read`` that are not sharp (:data:`SHARP`), whose images are blends."""
  k = summary.get("span_dim")
  if summary.get("cannot") or not k:
    return None
  # without the training-set size (a blind audit) the span's directions are what it holds
  held = min(n, k) if n else k
  images = f"for {n} training images" if n else "for an unknown number of training images"
  if unsure:
    return f"read {read} images {images} {unsure}"
  if read >= SPAN_READ * held:
    return None
  under = summary.get("under_noise_floor")
  floor = f" ({under} of the images under it)" if under else ""
  rest = held - read - blends
  said = [f"{blends} of the facets found are blends" if blends else ""]
  if blends:  # read off what the facet holds at 0 against its image's pattern (SHARP)
    said[0] += (
      f", not sharp (fewer than {SHARP:g} of the units their image leaves inactive are at 0 "
      "on them, or of the units at 0 on them inactive on their image): their images mix "
      "training images"
    )
  if rest > 0:
    said.append(f"the facets of {rest} more were not found (the images training weighted least)")
  return (
    f"read {read} images {images}, where the first layer's change keeps {k} "
    f"directions above its rounding noise{floor}: " + ", and ".join(w for w in said if w)
  )


def always_hands_over(problem: str, hidden_layers: int) -> bool:
  """Whether every reading of a victim of ``problem`` and ``hidden_layers`` hands over
  (:func:`unsure_of`), known before the cone runs (``AttackSpec.always_hands_over``)."""
  return unsure_of(problem == "general", hidden_layers) is not None
