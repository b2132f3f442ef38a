"""The gradient update of every chunked method: one backward, Polyak, the optimizers (docs/algorithms.md §3)."""

from __future__ import annotations

from abc import abstractmethod
from typing import Any, Protocol

import torch as th
from stable_baselines3.common.off_policy_algorithm import OffPolicyAlgorithm

from qc_sb3.accel.compiled_step import CompiledLosses
from qc_sb3.accel.graphed_update import GraphedUpdate
from qc_sb3.common.actor_critic import ActorCriticChunkPolicy
from qc_sb3.common.buffers import ChunkReplayBuffer, ChunkReplayBufferSamples
from qc_sb3.common.input_checks import check_training_finite


class SeedGroupMember(Protocol):
    """A model's place in a group of seeds trained together (:mod:`qc_sb3.seeds`)."""

    def gradient_step(self, batch: ChunkReplayBufferSamples) -> dict[str, th.Tensor]:
        """The model's update on its batch, run stacked with the other seeds'; returns its detached losses."""

    def parameters(self) -> dict[str, Any] | None:
        """The model's own policy and optimizer states while the group holds them (None otherwise)."""


class GradientUpdateMixin(OffPolicyAlgorithm):
    """
    The update shared by the offline phase and the online ``train()``: one gradient step computes every loss of
    :meth:`_losses` with the same pre-step parameters, backpropagates :meth:`_optimized_loss` once, moves the target
    critic by Polyak averaging of the critic's pre-step weights (the reference's order), then steps every optimizer.
    The losses stay on the device until they are logged, averaged, and checked for NaN or inf.
    """

    policy: ActorCriticChunkPolicy
    replay_buffer: ChunkReplayBuffer
    _step_losses: CompiledLosses | None
    _update_graph: GraphedUpdate | None
    _seed_group_member: SeedGroupMember | None
    _has_running_statistics: bool
    _unread_losses: list[dict[str, th.Tensor]]
    _read_losses_every_train: bool

    def train(self, gradient_steps: int, batch_size: int = 256) -> None:
        policy = self.policy
        policy.set_training_mode(True)
        self._update_learning_rate(policy.optimizers)
        self._unread_losses.extend(self._gradient_step(batch_size) for _ in range(gradient_steps))
        self._n_updates += gradient_steps
        # Reading the losses is a host synchronisation: on an accelerator it waits for the update to finish, which
        # could otherwise overlap the next env steps. There they are read once per log dump (dump_logs), averaged
        # over the updates since the previous one; on the CPU, where a read costs nothing, after every call, as SB3
        # records its losses.
        if self._read_losses_every_train:
            self._read_train_losses()

    def _read_train_losses(self) -> None:
        """Record ``train/<name>``, averaged over the online updates not yet read, and check them (if any)."""
        if not self._unread_losses:
            return
        self.logger.record("train/n_updates", self._n_updates, exclude="tensorboard")
        step_losses, self._unread_losses = self._unread_losses, []
        self._record_checked_means("train", step_losses)

    def dump_logs(self) -> None:
        """Write the online log data, as SB3 does, with the losses of the updates since the last dump."""
        self._read_train_losses()
        super().dump_logs()

    def _gradient_step(self, batch_size: int) -> dict[str, th.Tensor]:
        """
        One update (docs/algorithms.md §3) on a fresh batch.

        :param batch_size: Minibatch size
        :return: The losses of :meth:`_losses`, detached
        """
        batch = self.replay_buffer.sample(batch_size, env=self._vec_normalize_env)
        if self._seed_group_member is not None:  # seeds in one process: one stacked update for all of them
            return self._seed_group_member.gradient_step(batch)
        return self._update(batch) if self._update_graph is None else self._update_graph(batch)

    def get_parameters(self) -> dict[str, dict]:
        # In a group of seeds (qc_sb3.seeds) the optimizers' states are the group's: this seed's slices, copied.
        group_parameters = None if self._seed_group_member is None else self._seed_group_member.parameters()
        return super().get_parameters() if group_parameters is None else group_parameters

    def _update(self, batch: ChunkReplayBufferSamples) -> dict[str, th.Tensor]:
        """
        The update of one gradient step on a sampled batch: the losses, one backward pass, the Polyak update and
        every optimizer's step (captured as one CUDA graph with ``compile_step=True`` on a GPU).

        :param batch: A batch of chunk windows
        :return: The losses of :meth:`_losses`, detached
        """
        policy = self.policy
        optimizers = policy.optimizers
        losses = self._losses(batch) if self._step_losses is None else self._step_losses(batch)
        for optimizer in optimizers:
            optimizer.zero_grad(set_to_none=True)
        self._optimized_loss(losses).backward()
        # docs/algorithms.md §3: target update from the critic's weights before this step, as the reference does.
        # target <- (1 - tau) target + tau online, every tensor in one call (SB3's polyak_update takes two per tensor);
        # without autograd, or each update would chain the target onto the critic's graph (as SB3's polyak_update does)
        with th.no_grad():
            th._foreach_lerp_(*policy.target_parameters(), self.tau)
            if self._has_running_statistics:
                th._foreach_copy_(*policy.target_running_statistics())
        for optimizer in optimizers:
            optimizer.step()
        return {name: value.detach() for name, value in losses.items()}

    def _record_checked_means(self, prefix: str, step_losses: list[dict[str, th.Tensor]]) -> None:
        """
        Record ``<prefix>/<name>``, each loss averaged over the last ``len(step_losses)`` updates, and stop training
        with an error if a loss or the parameters became NaN or inf in them. The losses stay on the device until
        here: this is one host read for all of them (a read per loss and step would stall a GPU).

        :param prefix: The logger's prefix ("train" online, "offline" in the offline phase)
        :param step_losses: The detached losses of each update, the last one being update ``n_updates``
        """
        names = list(step_losses[0])
        losses_per_step = th.stack([th.stack(list(losses.values())) for losses in step_losses])
        first_non_finite_step = (~th.isfinite(losses_per_step).all(dim=1)).int().argmax()
        parameters_norm = th.nn.utils.get_total_norm(list(self.policy.parameters()))
        *means, non_finite_step, norm = th.cat(
            [
                losses_per_step.mean(dim=0),
                first_non_finite_step[None].to(losses_per_step),
                parameters_norm[None].to(losses_per_step),
            ]
        ).tolist()
        first_update = self._n_updates - len(step_losses) + 1
        check_training_finite(names, means, first_update + int(non_finite_step), norm, first_update, self._n_updates)
        for name, mean in zip(names, means, strict=True):
            self.logger.record(f"{prefix}/{name}", mean)

    @abstractmethod
    def _losses(self, batch: ChunkReplayBufferSamples) -> dict[str, th.Tensor]:
        """
        Every loss and statistic of one gradient step (all logged as ``train/<name>``, averaged over the call).

        :param batch: A batch of chunk windows
        :return: Named scalar tensors
        """

    @abstractmethod
    def _optimized_loss(self, losses: dict[str, th.Tensor]) -> th.Tensor:
        """
        The scalar to backpropagate, from the losses of :meth:`_losses`.

        :param losses: The output of :meth:`_losses`
        :return: A scalar tensor
        """
