"""QC-FQL: Q-chunking with a one-step actor distilled from the flow (docs/algorithms.md §3, §4); FQL and FQL-n by flags."""

from __future__ import annotations

from typing import Any, ClassVar

import torch as th
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.type_aliases import GymEnv

from qc_sb3.common.flow_q import FlowQAlgorithm
from qc_sb3.common.losses import distillation_loss, q_loss
from qc_sb3.qc_fql.policies import CnnPolicy, MlpPolicy, QCFQLPolicy


class QCFQL(FlowQAlgorithm):
    """
    Q-chunking with flow Q-learning (Li, Zhou, Levine 2025; Park et al. 2025): the flow BC policy and chunked critic
    of QC, plus a one-step actor trained by distillation from the flow and by maximizing Q (distill-DDPG):
    ``L_actor = L_bc + alpha * L_distill + L_q``. The one-step actor acts and gives the TD-target action.

    Variants: ``chunk_size=1`` is FQL; ``action_chunking=False`` is FQL-n.

    :param policy: The policy model to use ("MlpPolicy", or "CnnPolicy" for image observations)
    :param env: The primitive environment to learn from (if registered in Gym, can be str)
    :param learning_rate: Adam learning rate, constant or a schedule of the remaining online progress (the offline
        phase runs at its start value)
    :param buffer_size: Number of online steps the replay buffer keeps (offline data comes on top)
    :param learning_starts: Online env steps collected before the first update (the policy acts from step 0)
    :param batch_size: Minibatch size of each gradient step
    :param tau: Target network update coefficient (Polyak)
    :param gamma: Discount factor
    :param train_freq: Update the model every ``train_freq`` env steps (or ``(n, "episode")``)
    :param gradient_steps: Gradient steps per update (the update-to-data ratio)
    :param chunk_size: Chunk length h (the reference's ``horizon_length``)
    :param action_chunking: False gives FQL-n: h-step windows, single actions
    :param replan_interval: Actions k of each chunk executed before a new decision from the current observation, in
        [1, h] (None: whole chunks, the paper's open loop); settable later. The decision is unchanged; fewer of its
        actions run (docs/algorithms.md §5)
    :param temporal_ensemble_rate: Temporal ensembling's rate m (None: off): decide at every step and execute the
        weighted average of what the overlapping chunks planned for the step (ACT's weights), a sequence the critic
        never scored; settable later
    :param alpha: Weight of the distillation loss (reference default 100; paper per domain: scene, puzzle-3x3,
        cube-double 300; cube-triple, cube-quadruple 100; robomimic 10000)
    :param flow_steps: Euler steps T of the flow sampler
    :param n_critics: Critic ensemble size K
    :param q_agg: Ensemble aggregation of the TD target, "mean" (reference) or "min"
    :param offline_dataset: Offline data: a Minari dataset id or folder, a ``MinariDataset``, a mapping of arrays,
        ``OfflineTransitions``, or :class:`~qc_sb3.OfflineShards`;
        the model saves where it came from (a Minari id or folder), not the data, and ``load()`` reads it again
    :param offline_gradient_steps: Gradient steps of the offline phase, run by ``learn()`` before its first env step
        (callbacks are called after each; see ``ChunkedOffPolicyAlgorithm.learn``)
    :param offline_log_interval: Offline gradient steps between two dumps of the ``offline/*`` logs
    :param offline_sparse_rewards: Replace the offline rewards r by -1 * [r != 0] (docs/algorithms.md §6, the reference's
        ``--sparse``; for envs whose online reward is made sparse the same way)
    :param replay_buffer_class: ChunkReplayBuffer (the default) or a subclass, e.g. ``DeviceChunkReplayBuffer``
        (storage and window sampling on ``device``, for accelerators)
    :param replay_buffer_kwargs: Keyword arguments of the replay buffer
    :param policy_kwargs: Additional arguments of the policy (``net_arch``, ``activation_fn``, layer norms, optimizer)
    :param stats_window_size: Window size for the rollout logging
    :param tensorboard_log: The log location for tensorboard (if None, no logging)
    :param verbose: Verbosity level: 0 no output, 1 info messages, 2 debug messages
    :param device: Device (cpu, cuda, ...) on which the code should be run
    :param seed: Seed for the pseudo random generators
    :param compile_step: Compile the losses of the gradient step, and the policy's decision, with ``torch.compile``
        (off by default; see ``ChunkedOffPolicyAlgorithm``: the same updates and chunks to float32 rounding, eager
        with a warning where compiling is impossible)
    :param _init_setup_model: Whether or not to build the network at the creation of the instance
    """

    policy_aliases: ClassVar[dict[str, type[BasePolicy]]] = {"MlpPolicy": MlpPolicy, "CnnPolicy": CnnPolicy}
    policy: QCFQLPolicy

    def __init__(self, policy: str | type[QCFQLPolicy], env: GymEnv | str, *args: Any, alpha: float = 100.0, **kwargs: Any):
        # Set before the base constructor, which builds the model (and checked before any work starts).
        if alpha < 0:
            raise ValueError(f"alpha must be >= 0, got {alpha}")
        self.alpha = alpha
        super().__init__(policy, env, *args, **kwargs)

    def _actor_noise(self, batch_size: int) -> dict[str, th.Tensor]:
        return {"actor": th.randn(batch_size, self.policy.flat_action_dim, device=self.device)}

    def _actor_losses(
        self,
        policy: QCFQLPolicy,
        observations: th.Tensor,
        bc_flow_loss: th.Tensor,
        noise: dict[str, th.Tensor],
        critic_observations: th.Tensor,
    ) -> dict[str, th.Tensor]:
        with th.no_grad():
            flow_actions = policy.flow.integrate(observations, noise["actor"], self.flow_steps)
        actor_actions = policy.actor(observations, noise["actor"])
        # docs/algorithms.md §3: L_actor = L_bc + alpha * L_distill + L_q, no Q normalisation
        distill = distillation_loss(actor_actions, flow_actions)
        q_term = q_loss(policy.critic, critic_observations, actor_actions)  # extractors learn through the actor only
        return {"actor_loss": bc_flow_loss + self.alpha * distill + q_term, "distill_loss": distill, "q_loss": q_term}
