"""ActorCriticChunkPolicy: the base of every chunk policy with a critic ensemble; it owns the optimizers and targets."""

from __future__ import annotations

import copy
import itertools
from abc import abstractmethod
from typing import Any, ClassVar

import torch as th
from gymnasium import spaces
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor, FlattenExtractor, get_actor_critic_arch
from stable_baselines3.common.type_aliases import Schedule
from stable_baselines3.common.utils import get_parameters_by_name
from torch import nn

from qc_sb3.accel.fast_networks import accelerate
from qc_sb3.common.policies import ChunkPolicy

DEFAULT_HIDDEN_DIMS = [512, 512, 512, 512]


def default_optimizer_kwargs(
    optimizer_class: type[th.optim.Optimizer], optimizer_kwargs: dict[str, Any] | None
) -> dict[str, Any]:
    """
    The optimizer keyword arguments to use: the given ones, else Adam's fused implementation (the same update as
    one kernel over all parameters) or nothing for other optimizers.

    :param optimizer_class: The optimizer class
    :param optimizer_kwargs: The user's keyword arguments, or None
    :return: Keyword arguments for ``optimizer_class``
    """
    if optimizer_kwargs is not None:
        return optimizer_kwargs
    return {"fused": True} if optimizer_class is th.optim.Adam else {}


def hidden_dims_of(net_arch: list[int] | dict[str, list[int]] | None) -> tuple[list[int], list[int]]:
    """
    The actor-side and critic hidden layer sizes, by SB3's ``get_actor_critic_arch``.

    :param net_arch: One list for all networks, or ``dict(pi=[...], qf=[...])`` as in SB3 (both keys needed);
        None: 4 x 512 (the reference)
    :return: (actor hidden dims, critic hidden dims)
    """
    if net_arch is None:
        net_arch = DEFAULT_HIDDEN_DIMS
    if isinstance(net_arch, dict):
        unknown = set(net_arch) - {"pi", "qf"}
        if unknown:
            raise ValueError(f"net_arch keys must be 'pi' and 'qf', got unknown {sorted(unknown)}")
        missing = [key for key in ("pi", "qf") if key not in net_arch]
        if missing:
            raise ValueError(
                f"net_arch={net_arch!r} has no {' and no '.join(repr(key) for key in missing)} key: a dict needs "
                "both, dict(pi=[...], qf=[...]), as SB3 requires (or give one list for every network)"
            )
    actor_dims, critic_dims = get_actor_critic_arch(net_arch)
    return list(actor_dims), list(critic_dims)


class ActorCriticChunkPolicy(ChunkPolicy):
    """
    Base of the chunk policies with a critic ensemble (QC, QC-FQL, the RLPD family). It owns what their updates
    share: the hidden layer sizes, the features extractor, the target networks and one optimizer per trained
    network (SB3's ``module.optimizer``); the algorithms step :attr:`optimizers` together after one backward pass
    of the summed losses (the reference's single Adam over all parameters, since Adam is per parameter) and save
    :attr:`optimizer_names`.

    Subclasses name their trained networks in ``optimized_modules`` and build them in :meth:`_build_networks`,
    ``critic`` and a freshly initialised ``critic_target`` among them; :meth:`_build` then copies the critic into
    its target and freezes it (it moves only by Polyak averaging, docs/algorithms.md §3) and makes the optimizers.

    Features extractors, as SB3's SAC has them (docs/design.md): ``features_extractor`` is the actor side's (QC's
    flow, QC-FQL's flow and one-step actor, RLPD's actor), trained by the actor-side loss only and held by the
    optimizer of the network named by ``features_extractor_owner``. With ``share_features_extractor=False`` (the
    default, SAC's) the critic reads its own ``critic_features_extractor``, trained by the critic loss only (the
    critic's optimizer holds it); with True it reads ``features_extractor`` itself, its features detached, so that
    only the actor side trains it. Either way the critic's input in the actor's Q term is detached, and the target
    critic reads ``features_extractor_target``, a copy of the critic's extractor moved by Polyak averaging with the
    critic. An extractor without parameters or buffers (the flattening default) is one module in both modes.

    :param observation_space: Observation space
    :param action_space: Primitive action space
    :param lr_schedule: Learning rate schedule
    :param net_arch: Hidden layers, one list for all networks or ``dict(pi=[...], qf=[...])`` (default 4 x 512)
    :param chunk_size: Chunk length h
    :param action_chunking: False for the ``-n`` variants (single actions over h-step windows)
    :param n_critics: Ensemble size K
    :param features_extractor_class: Features extractor (flattening by default)
    :param features_extractor_kwargs: Keyword arguments of the features extractor
    :param normalize_images: Whether to divide image observations by 255
    :param share_features_extractor: Whether the critic reads the actor side's features extractor (detached) instead
        of one of its own (False, SB3's SAC default)
    :param optimizer_class: Optimizer class (Adam)
    :param optimizer_kwargs: Optimizer keyword arguments (None: Adam's defaults, beta 0.9/0.999, eps 1e-8, no weight
        decay, with its fused implementation)
    :param fast_paths: Swap the fast implementations of :mod:`qc_sb3.accel` into the networks (the same parameters
        and values to float32 rounding); False keeps the plain modules of :mod:`qc_sb3.common.networks`

    :param replan_interval: Actions of each chunk executed before the next decision (None: all of them;
        :class:`~qc_sb3.common.chunk_execution.ChunkExecution`)
    :param temporal_ensemble_rate: Rate of temporal ensembling's weights (None: no ensembling)
    """

    optimized_modules: ClassVar[tuple[str, ...]]
    features_extractor_owner: ClassVar[str]
    critic: nn.Module
    critic_target: nn.Module
    features_extractor_target: BaseFeaturesExtractor
    critic_features_extractor: BaseFeaturesExtractor

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Box,
        lr_schedule: Schedule,
        net_arch: list[int] | dict[str, list[int]] | None = None,
        chunk_size: int = 5,
        action_chunking: bool = True,
        n_critics: int = 2,
        features_extractor_class: type[BaseFeaturesExtractor] = FlattenExtractor,
        features_extractor_kwargs: dict[str, Any] | None = None,
        normalize_images: bool = True,
        share_features_extractor: bool = False,
        optimizer_class: type[th.optim.Optimizer] = th.optim.Adam,
        optimizer_kwargs: dict[str, Any] | None = None,
        fast_paths: bool = True,
        replan_interval: int | None = None,
        temporal_ensemble_rate: float | None = None,
    ):
        super().__init__(
            observation_space,
            action_space,
            chunk_size=chunk_size,
            action_chunking=action_chunking,
            features_extractor_class=features_extractor_class,
            features_extractor_kwargs=features_extractor_kwargs,
            normalize_images=normalize_images,
            replan_interval=replan_interval,
            temporal_ensemble_rate=temporal_ensemble_rate,
        )
        self.net_arch = net_arch
        self.n_critics = n_critics
        self.optimizer_class = optimizer_class
        self.optimizer_kwargs = default_optimizer_kwargs(optimizer_class, optimizer_kwargs)
        self.fast_paths = fast_paths
        self.actor_hidden_dims, self.critic_hidden_dims = hidden_dims_of(net_arch)
        if not isinstance(share_features_extractor, bool):
            raise TypeError(f"share_features_extractor must be True or False, got {share_features_extractor!r}")
        self.share_features_extractor = share_features_extractor
        self.features_extractor = self.make_features_extractor()
        self.features_dim = self.features_extractor.features_dim
        trainable = any(True for _ in itertools.chain(self.features_extractor.parameters(), self.features_extractor.buffers()))
        separate = trainable and not share_features_extractor
        self.critic_features_extractor = self.make_features_extractor() if separate else self.features_extractor

    def _build(self, lr_schedule: Schedule) -> None:
        """Build the networks, the frozen target copies and the optimizers; each subclass's ``__init__`` ends with it."""
        self._build_networks()
        if self.fast_paths:
            accelerate(self)
        self.critic_target.load_state_dict(self.critic.state_dict())
        # Targets never train: frozen, and in eval mode for good (normalisation statistics, dropout), as in SB3's SAC.
        self.critic_target.requires_grad_(False).train(False)
        self.features_extractor_target = copy.deepcopy(self.critic_features_extractor).requires_grad_(False).train(False)
        extractors = {self.features_extractor_owner: self.features_extractor}
        if self.separate_critic_extractor:
            extractors["critic"] = self.critic_features_extractor
        for name in self.optimized_modules:
            module = getattr(self, name)
            parameters = list(module.parameters())
            if name in extractors:
                owned = {id(parameter) for parameter in parameters}
                parameters += [parameter for parameter in extractors[name].parameters() if id(parameter) not in owned]
            module.optimizer = self.optimizer_class(parameters, lr=lr_schedule(1), **self.optimizer_kwargs)  # type: ignore[call-arg]

    @abstractmethod
    def _build_networks(self) -> None:
        """Create every network of the policy, in a fixed order (it fixes their initialisation from the seed)."""

    @property
    def optimizers(self) -> list[th.optim.Optimizer]:
        """Every optimizer of the policy, in ``optimized_modules`` order, stepped together after one backward pass."""
        return [getattr(self, name).optimizer for name in self.optimized_modules]

    @classmethod
    def optimizer_names(cls) -> list[str]:
        """The optimizers as attribute paths from the policy (``"critic.optimizer"``, ...), for saving."""
        return [f"{name}.optimizer" for name in cls.optimized_modules]

    def target_parameters(self) -> tuple[list[th.Tensor], list[th.Tensor]]:
        """The target networks' parameters and, in the same order, the online ones they follow."""
        targets = [*self.critic_target.parameters(), *self.features_extractor_target.parameters()]
        return targets, [*self.critic.parameters(), *self.critic_features_extractor.parameters()]

    def target_running_statistics(self) -> tuple[list[th.Tensor], list[th.Tensor]]:
        """
        The target networks' normalisation statistics (BatchNorm's ``running_*`` buffers) and, in the same order, the
        online ones they copy after every update, as SB3's SAC and TQC copy them. Empty for the reference networks.
        """
        targets, online = [], []
        for target_module, online_module in (
            (self.critic_target, self.critic),
            (self.features_extractor_target, self.critic_features_extractor),
        ):
            targets += get_parameters_by_name(target_module, ["running_"])
            online += get_parameters_by_name(online_module, ["running_"])
        return targets, online

    @property
    def separate_critic_extractor(self) -> bool:
        """Whether the critic reads a features extractor of its own (``critic_features_extractor``), trained by its loss."""
        return self.critic_features_extractor is not self.features_extractor

    def critic_features(self, observations: th.Tensor, features: th.Tensor | None = None) -> th.Tensor:
        """
        The critic's state input for its own loss: the observations through the critic's features extractor, or,
        where the critic shares the actor side's, ``features`` detached (computed here when None), which only the
        actor side trains. Detach it for the critic's input in an actor loss.

        :param observations: Preprocessed observations, shape (B, *obs_shape)
        :param features: Their features by :meth:`features`, if already computed
        :return: Features of shape (B, features_dim)
        """
        if self.separate_critic_extractor:
            return self.extract_features(observations, self.critic_features_extractor)  # type: ignore[return-value]
        return (self.features(observations) if features is None else features).detach()

    def target_features(self, observations: th.Tensor) -> th.Tensor:
        """The target critic's state input: the observations through the target copy of the features extractor."""
        return self.extract_features(observations, self.features_extractor_target)  # type: ignore[return-value]

    def set_training_mode(self, mode: bool) -> None:
        modules = [
            self.features_extractor,
            self.critic_features_extractor,
            *(getattr(self, name) for name in self.optimized_modules),
        ]
        # Reading every submodule's flag costs a fifth of setting it (nn.Module.__setattr__), and each decision
        # calls this: set the flags only when one differs.
        if _any_training_flag_differs(modules, mode):
            for module in modules:
                module.train(mode)
        self.training = mode

    def _get_constructor_parameters(self) -> dict[str, Any]:
        data = super()._get_constructor_parameters()
        data.update(
            lr_schedule=self._dummy_schedule,  # only used at construction; optimizer states load separately
            net_arch=self.net_arch,
            n_critics=self.n_critics,
            share_features_extractor=self.share_features_extractor,
            optimizer_class=self.optimizer_class,
            optimizer_kwargs=self.optimizer_kwargs,
            fast_paths=self.fast_paths,
        )
        return data


def _any_training_flag_differs(modules: list[nn.Module], mode: bool) -> bool:
    """
    Whether any of ``modules`` or of their submodules, at any depth, has a ``training`` flag other than ``mode``.
    A walk over ``_modules`` (the submodules ``Module.modules()`` yields, without building their names): at a
    decision, where this runs each time, it takes a quarter of ``modules()``'s time.
    """
    stack = list(modules)
    while stack:
        module = stack.pop()
        if module.training != mode:
            return True
        stack.extend(child for child in module._modules.values() if child is not None)
    return False
