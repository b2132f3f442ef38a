"""
Acceleration of the plain modules of :mod:`qc_sb3.common`: the same computations, faster, each tested against the
plain version.

* :mod:`~qc_sb3.accel.fast_networks`: fast versions of the networks (CPU fast paths without autograd, and with
  autograd GELU(tanh) with its own backward, ensembles member by member and oneDNN Linear layers), swapped into a
  policy by :func:`~qc_sb3.accel.fast_networks.accelerate` when it is built with ``fast_paths=True`` (the default;
  ``policy_kwargs=dict(fast_paths=False)`` keeps the plain modules);
* :mod:`~qc_sb3.accel.compiled_step`, :mod:`~qc_sb3.accel.compiled_decision`, :mod:`~qc_sb3.accel.graphed_update`:
  the gradient step and the decision compiled with ``torch.compile``, and the update captured as a CUDA graph on a
  GPU, switched on by an algorithm's ``compile_step=True``.
"""
