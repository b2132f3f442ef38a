"""The methods a config may name, and the paper's hyperparameters for each method and domain (docs/algorithms.md §4, §5).

Everything the paper keeps fixed across methods (batch 256, 4 x 512 networks, Adam 3e-4, K, T, tau, gamma, updates
from 5000 online steps on, ...) is the algorithms' constructor defaults, so a method only states how it differs:
its algorithm, its flags (chunk length, ``action_chunking``, ``bc_alpha``) and which of its arguments take a
per-domain value (alpha or N). Those values are declared by each suite (:mod:`qc_sb3.benchmarks.runner.suites`), for
each of its domains; a domain without one is an error naming the missing key, never a silent fallback to the defaults.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor, FlattenExtractor, NatureCNN

from qc_sb3 import QC, QCFQL, RLPD
from qc_sb3.benchmarks.runner.specs import SuiteSpec
from qc_sb3.common.chunked import ChunkedOffPolicyAlgorithm
from qc_sb3.common.encoders import ImpalaSmallExtractor

# docs/algorithms.md §4: BFN and BFN-n sample N = 4 in every domain.
BFN_NUM_SAMPLES = 4

# Constructor arguments the runner sets itself; a config may not override them.
RUNNER_ARGUMENTS: dict[str, str] = {
    "policy": "set by the task ('MlpPolicy'; 'CnnPolicy' for image observations)",
    "env": "made from the task",
    "offline_dataset": "set by the config's datasets: section",
    "offline_gradient_steps": "set by protocol.offline_steps",
    "seed": "set by seeds: or --seeds",
    "device": "set by execution.device",
    "tensorboard_log": "written into each run's folder",
    "verbose": "the runner reports progress itself",
    "replay_buffer_class": "always ChunkReplayBuffer, whose steps the runner's checkpoints save",
    "_init_setup_model": "internal",
}


VARIADIC = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)

# The largest buffer an argument check builds on image observations.
IMAGE_CHECK_BUFFER = 1000

# The features extractors a config or a task may name in ``policy_kwargs.features_extractor_class`` (a config, and
# the results' records, hold names, not classes).
FEATURES_EXTRACTORS: dict[str, type[BaseFeaturesExtractor]] = {
    extractor.__name__: extractor for extractor in (FlattenExtractor, NatureCNN, ImpalaSmallExtractor)
}


@dataclass(frozen=True)
class MethodSpec:
    """
    A method of the paper as one of the library's algorithms with fixed flags.

    :param name: The name configs use (the paper's)
    :param algorithm: The algorithm class
    :param flags: Constructor arguments that define the method (chunk length, ``action_chunking``, ``bc_alpha``)
    :param per_domain: Constructor arguments whose value depends on the domain; every suite declares them for each
        of its domains (``SuiteSpec.domain_settings``)
    :param offline_phase: Whether the method pre-trains offline (False for the RLPD family: the offline data only
        seeds the buffer)
    """

    name: str
    algorithm: type[ChunkedOffPolicyAlgorithm]
    flags: Mapping[str, Any] = field(default_factory=dict)
    per_domain: tuple[str, ...] = ()
    offline_phase: bool = True

    @property
    def algorithm_path(self) -> str:
        """``module:ClassName`` of the algorithm, as a run process imports it."""
        return f"{self.algorithm.__module__}:{self.algorithm.__qualname__}"

    def constructor_defaults(self) -> dict[str, Any]:
        """The algorithm's constructor arguments that a config may set, with their defaults."""
        # A constructor that passes **kwargs on (QC's, QC-FQL's) takes its base class's parameters too.
        signatures = []
        for cls in self.algorithm.__mro__:
            if "__init__" in vars(cls):
                signatures.append(inspect.signature(cls.__init__).parameters.values())
                if all(parameter.kind != inspect.Parameter.VAR_KEYWORD for parameter in signatures[-1]):
                    break
        defaults: dict[str, Any] = {}
        for parameters in reversed(signatures):
            for parameter in parameters:
                if parameter.name not in ("self", *RUNNER_ARGUMENTS) and parameter.kind not in VARIADIC:
                    defaults[parameter.name] = parameter.default
        return defaults

    def check_arguments(self, hyperparameters: Mapping[str, Any], policy: str = "MlpPolicy") -> None:
        """
        Build the algorithm once with these constructor arguments on a dummy env (CPU, no data), so that every argument
        check of the algorithm, its policy and its buffer runs before any run does.

        :param hyperparameters: Constructor arguments (a config's resolved ones)
        :param policy: The task's policy; ``"CnnPolicy"`` is built on a dummy env of small images
        :raises Exception: The algorithm's own error for a bad argument
        """
        env: gym.Env = _DummyEnv()
        if policy == "CnnPolicy":
            env = _DummyImageEnv()
            if type(hyperparameters.get("buffer_size")) is int:
                # An image buffer's memory grows with its size (4 GB at 1M dummy frames), its checks do not.
                hyperparameters = {**hyperparameters, "buffer_size": min(hyperparameters["buffer_size"], IMAGE_CHECK_BUFFER)}
        self.algorithm(policy, env, device="cpu", verbose=0, **hyperparameters)

    def paper_settings(self, suite: SuiteSpec, domain: str) -> dict[str, Any]:
        """
        The method's settings in a domain, on top of the constructor defaults.

        :param suite: The suite of the task
        :param domain: The task's domain
        :return: The method's flags and its per-domain values, as the suite declares them
        :raises LookupError: Naming the key, if the suite does not declare one of the per-domain values
        """
        settings = dict(self.flags)
        for argument in self.per_domain:
            settings[argument] = suite.domain_setting(domain, self.name, argument)
        return settings


class _DummyEnv(gym.Env):
    """The smallest env the algorithms take, for :meth:`MethodSpec.check_arguments`; it is never stepped."""

    observation_space = spaces.Box(-1.0, 1.0, (1,), np.float32)
    action_space = spaces.Box(-1.0, 1.0, (1,), np.float32)


class _DummyImageEnv(gym.Env):
    """The smallest image env NatureCNN takes (36 x 36), channels last as image envs are; never stepped."""

    observation_space = spaces.Box(0, 255, (36, 36, 3), np.uint8)
    action_space = spaces.Box(-1.0, 1.0, (1,), np.float32)


METHODS: dict[str, MethodSpec] = {
    method.name: method
    for method in (
        MethodSpec("QC", QC, {"chunk_size": 5}, ("actor_num_samples",)),
        MethodSpec("QC-FQL", QCFQL, {"chunk_size": 5}, ("alpha",)),
        MethodSpec("BFN", QC, {"chunk_size": 1, "actor_num_samples": BFN_NUM_SAMPLES}),
        MethodSpec("BFN-n", QC, {"chunk_size": 5, "action_chunking": False, "actor_num_samples": BFN_NUM_SAMPLES}),
        MethodSpec("FQL", QCFQL, {"chunk_size": 1}, ("alpha",)),
        MethodSpec("FQL-n", QCFQL, {"chunk_size": 5, "action_chunking": False}, ("alpha",)),
        MethodSpec("RLPD", RLPD, {"chunk_size": 1}, offline_phase=False),
        MethodSpec("RLPD-AC", RLPD, {"chunk_size": 5}, offline_phase=False),
        MethodSpec("QC-RLPD", RLPD, {"chunk_size": 5, "bc_alpha": 0.01}, offline_phase=False),
    )
}


def paper_domain_settings(
    qc_num_samples: int, qc_fql_alpha: float, fql_alpha: float, fql_n_alpha: float
) -> dict[str, dict[str, Any]]:
    """
    One domain's entry of ``SuiteSpec.domain_settings`` for the paper's methods: every ``per_domain`` argument of
    :data:`METHODS`, named as the paper's tables name them.

    :param qc_num_samples: N of QC's best-of-N
    :param qc_fql_alpha: Alpha of QC-FQL
    :param fql_alpha: Alpha of FQL
    :param fql_n_alpha: Alpha of FQL-n
    :return: Method name -> its per-domain constructor arguments
    """
    return {
        "QC": {"actor_num_samples": qc_num_samples},
        "QC-FQL": {"alpha": qc_fql_alpha},
        "FQL": {"alpha": fql_alpha},
        "FQL-n": {"alpha": fql_n_alpha},
    }


# A variant of a method: ``<method>@<label>`` (``QC@k1``), the method with the config's own overrides, reported and
# stored under its own name (``<out>/<task>/QC@k1/seed0``), so that one config compares settings of one method.
VARIANT_LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._=-]*")


def get_method(name: str) -> MethodSpec:
    """
    The method of that name, or the method of a variant ``<method>@<label>``.

    :param name: The method name, or a variant's
    :return: The method
    """
    base, variant, label = name.partition("@")
    if base not in METHODS or (variant and VARIANT_LABEL.fullmatch(label) is None):
        raise KeyError(
            f"unknown method {name!r}; valid methods: {', '.join(METHODS)}, or a variant <method>@<label> "
            "(label of letters, digits and ._=-)"
        )
    return METHODS[base]


def constructor_arguments(hyperparameters: Mapping[str, Any], offline_steps: int | None) -> dict[str, Any]:
    """
    A run's constructor arguments from its resolved hyperparameters.

    :param hyperparameters: The resolved hyperparameters (as a config writes them; a features extractor by its name
        in :data:`FEATURES_EXTRACTORS`)
    :param offline_steps: The offline gradient steps of a method with an offline phase, else None
    :return: The keyword arguments of the algorithm
    """
    arguments = dict(hyperparameters)
    policy_kwargs = arguments.get("policy_kwargs")
    if isinstance(policy_kwargs, Mapping) and isinstance(policy_kwargs.get("features_extractor_class"), str):
        name = policy_kwargs["features_extractor_class"]
        if name not in FEATURES_EXTRACTORS:
            raise ValueError(
                f"policy_kwargs.features_extractor_class {name!r} is not a known features extractor; expected one of "
                f"{', '.join(FEATURES_EXTRACTORS)}"
            )
        arguments["policy_kwargs"] = {**policy_kwargs, "features_extractor_class": FEATURES_EXTRACTORS[name]}
    if isinstance(arguments.get("train_freq"), list):
        arguments["train_freq"] = tuple(arguments["train_freq"])  # YAML has no tuples; SB3 wants (n, unit)
    if offline_steps is not None:
        arguments["offline_gradient_steps"] = offline_steps
    return arguments


def merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """
    ``base`` updated by ``override``, merging nested mappings key by key (``policy_kwargs``, ...).

    :param base: The defaults
    :param override: The values that win
    :return: A new dict
    """
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = merge(merged[key], value)
        else:
            merged[key] = value
    return merged
