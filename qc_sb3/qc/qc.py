"""QC: Q-chunking with a best-of-N flow policy (docs/algorithms.md §3, §4); BFN and BFN-n by flags."""

from __future__ import annotations

from typing import Any, ClassVar

import torch as th
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.type_aliases import GymEnv

from qc_sb3.common.flow_q import FlowQAlgorithm
from qc_sb3.qc.policies import CnnPolicy, MlpPolicy, QCPolicy


class QC(FlowQAlgorithm):
    """
    Q-chunking with a best-of-N policy (Li, Zhou, Levine 2025): a flow-matching behavior policy over action chunks
    trained by BC, a critic ensemble over chunks trained by chunked TD, and a policy that returns the best of N flow
    samples under the critic. Offline pre-training on ``offline_dataset``, then online fine-tuning in ``learn()``.

    Variants: ``chunk_size=1, actor_num_samples=4`` is BFN; ``action_chunking=False, actor_num_samples=4`` is BFN-n.

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
    :param action_noise: Exploration noise (SB3's ``ActionNoise``): one draw added to each executed primitive action in
        the [-1, 1] scale, then clipped, as SB3 adds it; the env executes and the buffer stores the noisy action.
        None by default (the policies are stochastic)
    :param chunk_size: Chunk length h (the reference's ``horizon_length``)
    :param action_chunking: False gives BFN-n: h-step windows, single actions
    :param replan_interval: Actions k of each chunk executed before a new decision from the current observation, in
        [1, h] (None: whole chunks, the paper's open loop); settable later. The decision is unchanged; fewer of its
        actions run (docs/algorithms.md §5)
    :param temporal_ensemble_rate: Temporal ensembling's rate m (None: off): decide at every step and execute the
        weighted average of what the overlapping chunks planned for the step (ACT's weights), a sequence the critic
        never scored; settable later
    :param actor_num_samples: Number N of flow samples of best-of-N (paper: 32; puzzle 64, robomimic 16; BFN 4)
    :param flow_steps: Euler steps T of the flow sampler
    :param n_critics: Critic ensemble size K
    :param q_agg: Ensemble aggregation of the TD target and of best-of-N scoring, "mean" (reference) or "min"
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
    policy: QCPolicy

    def __init__(
        self, policy: str | type[QCPolicy], env: GymEnv | str, *args: Any, actor_num_samples: int = 32, **kwargs: Any
    ):
        # Set before the base constructor, which builds the model (and checked before any work starts).
        if actor_num_samples < 1:
            raise ValueError(f"actor_num_samples must be >= 1, got {actor_num_samples}")
        self.actor_num_samples = actor_num_samples
        super().__init__(policy, env, *args, **kwargs)

    def _policy_hyperparameters(self) -> dict[str, Any]:
        return {**super()._policy_hyperparameters(), "actor_num_samples": self.actor_num_samples}

    def _actor_losses(
        self,
        policy: QCPolicy,
        observations: th.Tensor,
        bc_flow_loss: th.Tensor,
        noise: dict[str, th.Tensor],
        critic_observations: th.Tensor,
    ) -> dict[str, th.Tensor]:
        # docs/algorithms.md §3: in best-of-N mode only the flow-matching loss trains the flow; there is no actor.
        return {"actor_loss": bc_flow_loss}
