"""Training images read off the cone of a first layer's change, by linear programs: no search.

A network with one hidden layer of ReLU units, ``f(x) = sum_j w_j relu(x . k_j + b_j)``,
trained by gradient descent from a theta_0 the attacker knows.  Every step adds to unit j's
kernel and bias ``eta |l'| y_i w_j [x_i, 1]`` for each training image i the unit is active
on (``l'`` the loss derivative, ``y_i`` the label).  So for a unit whose output weight ``w_j``
kept its sign through training, ``sign(w_j) (k*_j - k0_j, b*_j - b0_j)`` is a nonnegative
combination of the labelled images ``y_i [x_i, 1]``, with a coefficient exactly 0 for every
image the unit was never active on.  The units' changes lie in a cone with one generator per
training image, and each image's facet of that cone holds every unit inactive on it
throughout training, about half of them.

:func:`~.facets.find_facets` finds facets one linear program at a time: from the activation
pattern of a random image of the span, a reweighted L1 program finds the normal ``h`` whose
coefficients ``rows @ h`` (one per unit, >= 0) vanish on as many units as it can;
:func:`~.facets.peel` then looks for the facets the random starts missed in the complement of
the images found, where only their normals can be. :func:`~.decoding.decode` turns the facets
into images: the generator of facet q is orthogonal to the other facets' normals (an affine
system in the image's span coefficients, the bias column fixing the scale), and the units on
facet q were inactive on the image at theta_0 and at theta*, which picks the point along what
the system leaves free. Where every facet is found the images come back to rounding (on the
LFW fine-tuning victims, normalised cross-correlation 0.98-1.0); the images training weighted
least have the noisiest facets and are the ones missed (docs/leakage.md).

Exact for full-batch or mini-batch gradient descent, with or without momentum, and a loss
whose derivative keeps its sign (logistic; squared error while no output overshoots its
label: where one did, its image's coefficients mix both signs, and ``mixed`` programs price
a negative coefficient softly).

Deeper networks (:func:`~.deep.read_deep`): only the last hidden layer's change has signs the
output weights give, and it is a cone of the images' representations (the activations feeding
that layer), which move while training; its top n directions hold their average, the same
programs read it, and each representation inverted to an image (:func:`~.deep.invert`) seeds
the first layer's facet of that image, found by consensus (:func:`~.programs.consensus_facet`)
and polished by an unsigned program (:func:`~.programs.seeded_facet`): below the last hidden
layer the units mix the images with either sign, but an image's facet still holds every unit
inactive on it. Coupled weight decay keeps a multiple ``c`` of theta_0 in every step, so the
cone is that of ``theta* - c theta_0``: :func:`recon_jax.victims.targets.decay_factor` finds
``c`` from theta* and theta_0 alone (the one multiple that leaves a change of rank n). Before
any program :func:`~.reading.read` checks what the change shows: a change that spans more
input directions than there are training images (Adam's per-weight scaling, a theta_0 the
model was not trained from) has no cone of the images, and the attack says so in one sentence
instead of searching it.

The parts, each importing only those above it: :mod:`~.handover` (what
counts as read, and why a reading hands over to the KKT search), :mod:`~.reading` (theta* -
theta_0: layers, decay, span, noise floor), :mod:`~.programs` (the facet programs),
:mod:`~.facets` (the facet search), :mod:`~.decoding` (images from facets), :mod:`~.signed`
(one hidden layer end to end), :mod:`~.deep` (more hidden layers) and :mod:`~.attack` (the
options, :func:`cone_images` and the registered spec).
"""

from recon_jax.attacks.cone.attack import SPEC, ConeOptions, cone_images
from recon_jax.attacks.cone.facets import FIRST_PATIENCE_S, PATIENCE_S
from recon_jax.attacks.cone.handover import short

__all__ = ["SPEC", "ConeOptions", "cone_images", "FIRST_PATIENCE_S", "PATIENCE_S", "short"]
