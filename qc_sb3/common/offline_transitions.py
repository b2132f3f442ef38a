"""The one in-memory form of offline data, validated once, where it enters the library, and its way into the buffer."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

import gymnasium as gym
import numpy as np
from stable_baselines3.common.preprocessing import is_image_space, is_image_space_channels_first

from qc_sb3.common.buffers import ChunkReplayBuffer

# Actions may exceed the action space bounds by this much (float rounding in converters) and still count as inside.
ACTION_BOUNDS_TOLERANCE = 1e-6


@dataclass(frozen=True)
class OfflineTransitions:
    """
    Per-step arrays of an offline dataset, episodes one after another, actions in the env's scale: the one form
    offline data takes inside qc_sb3, whatever it was read from (:func:`~qc_sb3.common.datasets.load_offline_transitions`).

    The arrays are checked at construction, the only place their values are: equal lengths, at least one step,
    values finite as float32 (the replay buffer's dtype), boolean flags and the last step an episode end. What
    depends on the env and the algorithm (spaces, action bounds, episodes as long as a chunk) is checked by
    :func:`check_transitions_fit`; the replay buffer then checks shapes only.

    ``terminated`` (the reference's ``1 - mask``) and ``episode_end`` (the reference's ``terminals``) are
    independent: in OGBench's single-task relabelling of play data a step that reaches the goal is terminated
    but its trajectory goes on (docs/algorithms.md §6), so windows past it keep ``valid = 1`` and stop bootstrapping there.

    :param observations: ``(N, *obs_shape)``, s_t
    :param actions: ``(N, *action_shape)``, a_t in the env's scale (not yet scaled to [-1, 1])
    :param rewards: ``(N,)``, r_t
    :param next_observations: ``(N, *obs_shape)``, s_{t+1}
    :param terminated: ``(N,)`` bool, true terminations (mask 0), also in the middle of an episode
    :param episode_end: ``(N,)`` bool, the last step of each episode (terminated, truncated or the episode's last
        recorded step)
    """

    observations: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    next_observations: np.ndarray
    terminated: np.ndarray
    episode_end: np.ndarray

    def __post_init__(self) -> None:
        arrays = {field.name: getattr(self, field.name) for field in fields(self)}
        for name, array in arrays.items():
            if not isinstance(array, np.ndarray):
                raise TypeError(f"OfflineTransitions.{name} must be a numpy array, got {type(array).__name__}")
        for name in ("observations", "actions", "rewards", "next_observations"):
            if not np.issubdtype(arrays[name].dtype, np.number):
                raise TypeError(f"OfflineTransitions.{name} must hold numbers, got dtype {arrays[name].dtype}")
        for name in ("terminated", "episode_end"):
            if arrays[name].dtype != np.bool_:
                raise TypeError(f"OfflineTransitions.{name} must have dtype bool, got {arrays[name].dtype}")
        for name in ("rewards", "terminated", "episode_end"):
            if arrays[name].ndim != 1:
                raise ValueError(f"OfflineTransitions.{name} must have shape (N,), got {arrays[name].shape}")
        for name in ("observations", "actions", "next_observations"):
            if arrays[name].ndim < 1:
                raise ValueError(f"OfflineTransitions.{name} must have shape (N, ...), got a scalar")
        lengths = {name: len(array) for name, array in arrays.items()}
        if len(set(lengths.values())) != 1:
            raise ValueError(f"offline dataset arrays must all have the same number of steps, got lengths {lengths}")
        if lengths["rewards"] == 0:
            raise ValueError("offline dataset must hold at least one step, got 0")
        if self.observations.shape != self.next_observations.shape:
            raise ValueError(
                f"offline dataset observations have shape {self.observations.shape} but next_observations have "
                f"shape {self.next_observations.shape}; expected the same"
            )
        for name in ("observations", "actions", "rewards", "next_observations"):
            check_finite_as_float32(f"offline dataset {name}", arrays[name])
        if not self.episode_end[-1]:
            raise ValueError(
                "offline dataset's last step must be an episode end (episode_end[-1] = True), got False; "
                "the last recorded step always ends its episode"
            )

    def __len__(self) -> int:
        """Number of steps N."""
        return len(self.rewards)


def check_finite_as_float32(what: str, array: np.ndarray) -> None:
    """
    Raise a ValueError naming ``what`` and the first step where ``array`` holds NaN or inf once cast to float32,
    the replay buffer's dtype (a finite 1e39 becomes inf there).

    :param what: What the values are, for the message (e.g. ``offline dataset rewards``)
    :param array: ``(N, ...)`` values, one row per step
    """
    with np.errstate(over="ignore", invalid="ignore"):
        finite = np.isfinite(array.astype(np.float32))
    finite_steps = finite.all(axis=tuple(range(1, finite.ndim)))
    if not finite_steps.all():
        raise ValueError(
            f"{what} hold NaN or inf (first at step {int(np.argmin(finite_steps))}) as float32, the "
            "replay buffer's dtype; expected finite values within float32's range (|x| < 3.4e38)"
        )


def sparse_rewards(rewards: np.ndarray) -> np.ndarray:
    """
    The sparse reward of docs/algorithms.md §6 (scene and puzzle in the paper): r <- -1 * [r != 0].

    :param rewards: Rewards of any shape
    :return: -1.0 where a reward is non-zero, 0.0 elsewhere (float64)
    """
    return -(np.asarray(rewards) != 0).astype(np.float64)


def with_sparse_rewards(data: OfflineTransitions) -> OfflineTransitions:
    """
    The same transitions with :func:`sparse_rewards` applied to their rewards (docs/algorithms.md §6).

    :param data: The offline dataset
    :return: A copy whose rewards are sparse (the other arrays are shared, not copied)
    """
    return replace(data, rewards=sparse_rewards(data.rewards))


def check_transitions_match_spaces(
    data: OfflineTransitions, observation_space: gym.spaces.Box, action_space: gym.spaces.Box
) -> None:
    """
    Check that an offline dataset fits the env: per-step observation and action shapes, actions within bounds.

    :param data: The offline dataset
    :param observation_space: The env's observation space
    :param action_space: The env's action space; actions may exceed its bounds by at most ``1e-6``
    """
    for name, space in (("observation_space", observation_space), ("action_space", action_space)):
        if not isinstance(space, gym.spaces.Box):
            raise TypeError(f"{name} must be a gymnasium.spaces.Box, got {type(space).__name__}")
    for name, array, space_name, space in (
        ("observations", data.observations, "observation", observation_space),
        ("actions", data.actions, "action", action_space),
    ):
        if array.shape[1:] != space.shape:
            raise ValueError(
                f"offline dataset {name} have shape {array.shape[1:]} per step but the env's {space_name} space has "
                f"shape {space.shape}"
            )
    found_low, found_high = data.actions.min(axis=0), data.actions.max(axis=0)
    if (found_low < action_space.low - ACTION_BOUNDS_TOLERANCE).any() or (
        found_high > action_space.high + ACTION_BOUNDS_TOLERANCE
    ).any():
        raise ValueError(
            f"offline dataset actions range from min {found_low.tolist()} to max {found_high.tolist()} but the env's "
            f"action space bounds are low {action_space.low.tolist()}, high {action_space.high.tolist()} "
            f"(tolerance {ACTION_BOUNDS_TOLERANCE})"
        )


def check_episodes_fit_chunks(data: OfflineTransitions, chunk_size: int) -> None:
    """
    Check that at least one episode is as long as a chunk: a shorter one gives no window that trains the critic.

    :param data: The offline dataset
    :param chunk_size: The chunk length h
    """
    end_steps = np.flatnonzero(data.episode_end)
    longest_episode = int(np.diff(np.concatenate([[-1], end_steps])).max())
    if longest_episode < chunk_size:
        raise ValueError(
            f"offline dataset: every episode is shorter than chunk_size={chunk_size} "
            f"(longest: {longest_episode} steps), so no window would train the critic"
        )


def check_transitions_fit(
    data: OfflineTransitions, observation_space: gym.spaces.Box, action_space: gym.spaces.Box, chunk_size: int
) -> None:
    """
    Everything an offline dataset must satisfy beyond its own consistency (checked at construction) to train a
    chunked model: :func:`check_transitions_match_spaces` and :func:`check_episodes_fit_chunks`.

    :param data: The offline dataset
    :param observation_space: The env's observation space
    :param action_space: The env's action space
    :param chunk_size: The chunk length h
    """
    check_transitions_match_spaces(data, observation_space, action_space)
    check_episodes_fit_chunks(data, chunk_size)


def with_channels_first_images(data: OfflineTransitions, observation_space: gym.spaces.Space) -> OfflineTransitions:
    """
    The transitions with channels-last image observations ``(H, W, C)`` transposed to channels first, where the env's
    observation space is what SB3's ``VecTransposeImage`` makes of a channels-last image space of that shape (SB3
    wraps such an env itself): the offline images are then read as the env's are. Other data is returned as it is,
    for :func:`check_transitions_fit` to check.

    :param data: The offline dataset
    :param observation_space: The observation space of the algorithm's env (after SB3's wrappers)
    :return: The same transitions, their observations transposed (views, not copies) where they are channels last
    """
    shape = data.observations.shape[1:]
    if not isinstance(observation_space, gym.spaces.Box) or len(shape) != 3 or shape == observation_space.shape:
        return data
    height, width, channels = shape
    if observation_space.shape != (channels, height, width):
        return data
    channels_last = gym.spaces.Box(
        np.transpose(observation_space.low, (1, 2, 0)),
        np.transpose(observation_space.high, (1, 2, 0)),
        dtype=observation_space.dtype,  # type: ignore[arg-type]
    )
    if not is_image_space(channels_last) or is_image_space_channels_first(channels_last):
        return data  # SB3 would not have transposed an env of this space
    return replace(
        data,
        observations=np.transpose(data.observations, (0, 3, 1, 2)),
        next_observations=np.transpose(data.next_observations, (0, 3, 1, 2)),
    )


def scale_actions(actions: np.ndarray, action_space: gym.spaces.Box) -> np.ndarray:
    """
    Rescale env-scale actions to the replay buffer's [-1, 1], as SB3's ``policy.scale_action`` does.

    :param actions: ``(..., *action_shape)`` actions in the env's scale
    :param action_space: The env's action space, with finite bounds
    :return: The actions in [-1, 1] for in-bounds input, as float32
    """
    if not isinstance(action_space, gym.spaces.Box):
        raise TypeError(f"action_space must be a gymnasium.spaces.Box, got {type(action_space).__name__}")
    if not (np.isfinite(action_space.low).all() and np.isfinite(action_space.high).all()):
        raise ValueError(
            f"scale_actions needs finite action space bounds, got low {action_space.low.tolist()}, "
            f"high {action_space.high.tolist()}"
        )
    actions = np.asarray(actions)
    shape = action_space.shape
    if actions.shape[actions.ndim - len(shape) :] != shape:
        raise ValueError(f"actions have shape {actions.shape}; expected (..., *{shape}) for the action space")
    low, high = action_space.low, action_space.high
    # The formula of stable_baselines3.common.policies.BasePolicy.scale_action.
    return (2.0 * ((actions - low) / (high - low)) - 1.0).astype(np.float32)


def add_transitions_to_buffer(buffer: ChunkReplayBuffer, data: OfflineTransitions, action_space: gym.spaces.Box) -> None:
    """
    Check an offline dataset against the buffer's spaces and chunk size (:func:`check_transitions_fit`, after
    :func:`with_channels_first_images`) and append it to the buffer's offline segment, actions scaled to [-1, 1].

    :param buffer: The replay buffer to seed
    :param data: The offline dataset, actions in the env's scale
    :param action_space: The env's action space (the bounds the actions are scaled from)
    """
    if not isinstance(buffer, ChunkReplayBuffer):
        raise TypeError(f"buffer must be a qc_sb3 ChunkReplayBuffer, got {type(buffer).__name__}")
    if not isinstance(data, OfflineTransitions):
        raise TypeError(f"data must be OfflineTransitions (see load_offline_transitions), got {type(data).__name__}")
    data = with_channels_first_images(data, buffer.observation_space)
    check_transitions_fit(data, buffer.observation_space, action_space, buffer.chunk_size)  # type: ignore[arg-type]
    append_checked_transitions(buffer, data, action_space)


def append_checked_transitions(buffer: ChunkReplayBuffer, data: OfflineTransitions, action_space: gym.spaces.Box) -> None:
    """
    Append an offline dataset already checked with :func:`check_transitions_fit` to the buffer's offline segment,
    actions scaled to [-1, 1] (the algorithms check their data once, before building anything, then call this).

    :param buffer: The replay buffer to seed
    :param data: The offline dataset, actions in the env's scale
    :param action_space: The env's action space (the bounds the actions are scaled from)
    """
    buffer.add_offline(
        data.observations,
        scale_actions(data.actions, action_space),
        data.rewards,
        data.next_observations,
        data.terminated,
        data.episode_end,
    )
