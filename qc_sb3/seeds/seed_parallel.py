"""SeedParallel: S seeds of QC or QC-FQL trained in one process, stacked or one after another (docs/guides/seeds.md)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from stable_baselines3.common.type_aliases import GymEnv
from stable_baselines3.common.utils import get_device

from qc_sb3.common.flow_q import FlowQAlgorithm
from qc_sb3.seeds.group import SeedGroup, share_offline_segment, stacks_updates
from qc_sb3.seeds.turns import SeedTurns, global_random_state, set_global_random_state

# Constructor arguments SeedParallel sets itself, per seed.
PER_SEED_ARGUMENTS = ("seed", "env")
# Constructor arguments whose values the stacked update does not support.
REFUSED_WHEN_STACKED = {"compile_step": True}


class SeedParallel:
    """
    S independent seeds of one algorithm (QC or QC-FQL, and the BFN / FQL / ``-n`` variants, which are their flags)
    in one process: each seed is an ordinary model, built from its own seed (its own initialisation, random
    streams, env, online replay ring and optimizer states). Stacked, the seeds take turns step by step and their
    gradient steps run as one update (:class:`~qc_sb3.seeds.stacked_update.StackedUpdate`; a seed's results are
    those of its model trained alone, to float32 rounding). Otherwise the seeds train one after another, each its
    model's own ``learn()`` with its own random streams (exactly its results alone). Offline data is read once per
    seed and then held once: the seeds' buffers share one offline segment.

    Refused with stacked updates, which run eagerly and in lockstep: ``compile_step=True``, ``train_freq`` in
    episodes (the seeds' updates would fall at different times), and callbacks that stop one seed early.

    :param algorithm: ``QC`` or ``QCFQL``
    :param env_factory: Makes seed ``s``'s env: ``env_factory(s)``
    :param seeds: The seeds, one model each
    :param policy: The policy, as the algorithm takes it (``"MlpPolicy"``)
    :param stacked: Stack the seeds' updates, else train them one after another; None: stacked on a GPU, one after
        another on a CPU (the measured choice, :func:`~qc_sb3.seeds.group.stacks_updates`)
    :param kwargs: The algorithm's other constructor arguments, the same for every seed
    """

    def __init__(
        self,
        algorithm: type[FlowQAlgorithm],
        env_factory: Callable[[int], GymEnv],
        seeds: Sequence[int],
        policy: Any = "MlpPolicy",
        stacked: bool | None = None,
        **kwargs: Any,
    ):
        if not (isinstance(algorithm, type) and issubclass(algorithm, FlowQAlgorithm)):
            raise TypeError(f"SeedParallel trains QC or QCFQL, got algorithm={algorithm!r}")
        seeds = [int(seed) for seed in seeds]
        if not seeds or len(set(seeds)) != len(seeds):
            raise ValueError(f"seeds must be a non-empty list of distinct integers, got {seeds!r}")
        for name in PER_SEED_ARGUMENTS:
            if name in kwargs:
                raise TypeError(f"SeedParallel sets {name!r} per seed: pass seeds=[...] and env_factory instead")
        if stacked not in (None, True, False):
            raise TypeError(f"stacked must be True, False or None (the device's default), got {stacked!r}")
        if stacked is None:
            stacked = stacks_updates(get_device(kwargs.get("device", "auto")))
        for name, value in REFUSED_WHEN_STACKED.items():
            if stacked and kwargs.get(name) == value:
                raise ValueError(f"SeedParallel with stacked updates does not support {name}={value!r} (pass stacked=False)")
        train_freq = kwargs.get("train_freq", 1)
        if stacked and isinstance(train_freq, tuple) and train_freq[1] != "step":
            raise ValueError(
                f"SeedParallel with stacked updates needs train_freq in steps (the seeds train in lockstep), got "
                f"{train_freq!r} (pass stacked=False)"
            )
        self.seeds = seeds
        self.stacked = stacked
        self.models: list[FlowQAlgorithm] = []
        states = []
        outer_state = global_random_state()
        for seed in seeds:
            self.models.append(algorithm(policy, env_factory(seed), seed=seed, **kwargs))
            states.append(global_random_state())  # where a process of its own would stand after building it
        set_global_random_state(outer_state)
        share_offline_segment(self.models)
        self._turns = SeedTurns(states)

    def learn(
        self, total_timesteps: int, callbacks: Sequence[Any] | None = None, tb_log_name: str = "run", **learn_kwargs: Any
    ) -> SeedParallel:
        """
        Every seed's ``learn()``: what remains of its offline phase, then ``total_timesteps`` online env steps.

        :param total_timesteps: Online env steps per seed
        :param callbacks: One callback (or None) per seed, as its model's ``learn(callback=...)`` takes it
        :param tb_log_name: Name of the tensorboard runs: seed s logs as ``<tb_log_name>_seed<s>``
        :param learn_kwargs: The other arguments of the algorithm's ``learn`` (the same for every seed)
        :return: self
        """
        callbacks = self._per_seed(callbacks, "callbacks")
        tasks = [
            lambda model=model, callback=callback, seed=seed: model.learn(
                total_timesteps, callback=callback, tb_log_name=f"{tb_log_name}_seed{seed}", **learn_kwargs
            )
            for seed, model, callback in zip(self.seeds, self.models, callbacks, strict=True)
        ]
        self._run(tasks)
        return self

    def pretrain(self, gradient_steps: int | None = None, callbacks: Sequence[Any] | None = None) -> SeedParallel:
        """
        Every seed's offline phase alone (``pretrain``).

        :param gradient_steps: Gradient steps per seed (default: what remains of ``offline_gradient_steps``)
        :param callbacks: One callback (or None) per seed
        :return: self
        """
        callbacks = self._per_seed(callbacks, "callbacks")
        self._run(
            [
                lambda model=model, callback=callback: model.pretrain(gradient_steps, callback=callback)
                for model, callback in zip(self.models, callbacks, strict=True)
            ]
        )
        return self

    def save(self, folder: str | Path, prefix: str = "seed") -> list[Path]:
        """
        Save each seed as an ordinary model file, ``<folder>/<prefix><seed>.zip``, that the algorithm's ``load`` reads.

        :param folder: The folder (made if missing)
        :param prefix: The files' name before the seed
        :return: The paths written
        """
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        paths = []
        for seed, model in zip(self.seeds, self.models, strict=True):
            path = folder / f"{prefix}{seed}.zip"
            model.save(path)
            paths.append(path)
        return paths

    def _per_seed(self, values: Sequence[Any] | None, name: str) -> list[Any]:
        if values is None:
            return [None] * len(self.models)
        if len(values) != len(self.models):
            raise ValueError(f"{name} must have one entry per seed ({len(self.models)}), got {len(values)}")
        return list(values)

    def _run(self, tasks: list[Callable[[], Any]]) -> None:
        outer_state = global_random_state()
        if not self.stacked:
            try:
                self._turns.run_one_after_another(tasks)
            finally:
                set_global_random_state(outer_state)
            return
        group = SeedGroup(self._turns)
        for index, model in enumerate(self.models):
            group.join(index, model)
        try:
            self._turns.run(tasks)
        finally:
            group.leave()
            set_global_random_state(outer_state)
