"""Victims: the models attacked, from their recipe to what the attacker sees of them.

* :mod:`.recipe`: a victim's recipe (:class:`~recon_jax.victims.recipe.VictimConfig`), what
  each setting means, and which recipes can be built or trained;
* :mod:`.models`: the networks, as flax modules;
* :mod:`.descent`: the gradient-descent training loop;
* :mod:`.trained`: a recipe trained into a victim (build, fit, converge) and its checkpoint
  with provenance (:mod:`recon_jax.io.checkpoint` is the file format);
* :mod:`.training_run`: a victim trained in its own workdir (the ``train_victim`` binary's
  job: settings checked, resumable training, its files);
* :mod:`.cache`: trained victims kept on disk under a key of their recipe and data;
* :mod:`.state_dicts`: a foreign (PyTorch or safetensors) file read into a state dict;
* :mod:`.foreign`: a foreign state dict mapped onto a flax network;
* :mod:`.sources`: a job's victim files read once into a ``Source``, then a ``Victim``;
* :mod:`.targets`: what the attacker sees of a victim (the attack's ``Target``).
"""
