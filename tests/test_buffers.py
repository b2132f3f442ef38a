"""ChunkReplayBuffer and its variants against a brute-force, per-sample computation of docs/algorithms.md §1."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
import torch as th
from gymnasium import spaces
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from qc_sb3 import ChunkReplayBuffer, DeviceChunkReplayBuffer, ImageChunkReplayBuffer

OBS_DIM = 3
ACTION_DIM = 2
# An image observation: uint8 frames whose first two bytes are the step id (base 256), the third 0 for an
# observation and 1 for a next observation that is no step's observation.
FRAME_SHAPE = (4, 4, 3)
OBSERVATION_SPACES = {
    "state": spaces.Box(-np.inf, np.inf, (OBS_DIM,), np.float32),
    "image": spaces.Box(0, 255, FRAME_SHAPE, np.uint8),
}
# The plain NumPy buffer, its device-resident fast path and the one storing each frame once: all must give the
# windows of the brute force.
BUFFER_CLASSES = [ChunkReplayBuffer, DeviceChunkReplayBuffer, ImageChunkReplayBuffer]


@dataclass
class Step:
    """One stored primitive transition; ``obs[0]`` is a unique id that tells which step a sample started at."""

    obs: np.ndarray
    action: np.ndarray
    reward: float
    next_obs: np.ndarray
    terminated: bool
    episode_end: bool


def make_frame(rng: np.random.Generator, step_id: int, marker: int) -> np.ndarray:
    frame = rng.integers(0, 256, size=FRAME_SHAPE, dtype=np.uint8)
    frame.reshape(-1)[:3] = (step_id // 256, step_id % 256, marker)
    return frame


def step_ids(observations: np.ndarray | th.Tensor) -> np.ndarray:
    """The step id that each observation (a state's first number, or a frame's first two bytes) carries."""
    flat = np.asarray(observations).reshape(len(observations), -1)
    if flat.shape[1] == OBS_DIM:
        return flat[:, 0].astype(np.int64)
    return flat[:, 0].astype(np.int64) * 256 + flat[:, 1].astype(np.int64)


def make_step(rng: np.random.Generator, step_id: int, terminated: bool, episode_end: bool, kind: str = "state") -> Step:
    if kind == "image":
        obs, next_obs = make_frame(rng, step_id, 0), make_frame(rng, step_id, 1)
    else:
        obs = np.array([step_id, *rng.normal(size=OBS_DIM - 1)], dtype=np.float32)
        next_obs = np.array([-step_id - 1, *rng.normal(size=OBS_DIM - 1)], dtype=np.float32)
    action = rng.uniform(-0.9, 0.9, size=ACTION_DIM).astype(np.float32)
    return Step(obs, action, float(rng.normal()), next_obs, terminated, episode_end)


def make_buffer(
    size: int,
    n_envs: int = 1,
    buffer_class: type[ChunkReplayBuffer] = ChunkReplayBuffer,
    kind: str = "state",
    **kwargs,
) -> ChunkReplayBuffer:
    action_space = spaces.Box(-1.0, 1.0, (ACTION_DIM,), np.float32)
    return buffer_class(size, OBSERVATION_SPACES[kind], action_space, n_envs=n_envs, **kwargs)


def brute_force_window(stream: list[Step], t: int, h: int, gamma: float) -> dict[str, np.ndarray]:
    """Spec §1 for one window, one position at a time; positions past the newest step repeat it with no reward."""
    actions, rewards, masks, valid = [], [], [], []
    cumulative, mask, still_valid = 0.0, 1.0, 1.0
    for i in range(h):
        position = min(t + i, len(stream) - 1)
        step = stream[position]
        if t + i < len(stream):
            cumulative += gamma**i * step.reward
        mask = min(mask, 1.0 - step.terminated)
        actions.append(step.action)
        rewards.append(cumulative)
        masks.append(mask)
        valid.append(still_valid)
        # The newest stored step ends the stream like an episode end: nothing after it is readable.
        if step.episode_end or position == len(stream) - 1:
            still_valid = 0.0
    return {
        "observations": stream[t].obs,
        "actions": np.array(actions),
        "next_observations": stream[min(t + h - 1, len(stream) - 1)].next_obs,
        "rewards": np.array(rewards),
        "masks": np.array(masks),
        "valid": np.array(valid),
    }


def episode_layouts(max_episodes: int, last_may_continue: bool):
    """Lists of (length, ending) where ending is 'terminated', 'truncated' or (last episode only) 'ongoing'."""
    ending = st.sampled_from(["terminated", "truncated"])
    episodes = st.lists(st.tuples(st.integers(1, 7), ending), min_size=1, max_size=max_episodes)
    if not last_may_continue:
        return episodes
    return st.tuples(episodes, st.booleans()).map(
        lambda layout: [*layout[0][:-1], (layout[0][-1][0], "ongoing")] if layout[1] else layout[0]
    )


def steps_of(layout, rng: np.random.Generator, first_id: int, kind: str = "state") -> list[Step]:
    """
    Steps of the given episodes. Image steps are those of an env: inside an episode the next observation is the
    following step's observation (the same frame), and an episode's last step has a frame of its own.
    """
    steps = []
    for length, ending in layout:
        for k in range(length):
            last = k == length - 1
            step_id = first_id + len(steps)
            steps.append(make_step(rng, step_id, last and ending == "terminated", last and ending != "ongoing", kind))
            if kind == "image" and k > 0:
                steps[-2].next_obs = steps[-1].obs
    return steps


def add_online(buffer: ChunkReplayBuffer, streams: list[list[Step]]) -> None:
    """Feed equally long per-env streams through SB3's `add`, one vectorised step at a time."""
    for steps in zip(*streams, strict=True):
        buffer.add(
            np.stack([s.obs for s in steps]),
            np.stack([s.next_obs for s in steps]),
            np.stack([s.action for s in steps]),
            np.array([s.reward for s in steps], dtype=np.float32),
            np.array([s.episode_end for s in steps]),
            [{"TimeLimit.truncated": s.episode_end and not s.terminated} for s in steps],
        )


def add_offline(buffer: ChunkReplayBuffer, steps: list[Step]) -> None:
    buffer.add_offline(
        np.stack([s.obs for s in steps]),
        np.stack([s.action for s in steps]),
        np.array([s.reward for s in steps]),
        np.stack([s.next_obs for s in steps]),
        np.array([s.terminated for s in steps]),
        np.array([s.episode_end for s in steps]),
    )


def check_batch_against_brute_force(batch, streams_by_id: dict[int, tuple[list[Step], int]], h: int, gamma: float):
    for row, step_id in enumerate(step_ids(batch.observations)):
        assert step_id in streams_by_id, f"sampled step {step_id} is not stored (evicted or never added)"
        stream, t = streams_by_id[step_id]
        expected = brute_force_window(stream, t, h, gamma)
        for name, value in expected.items():
            np.testing.assert_allclose(
                getattr(batch, name)[row].cpu().numpy(),
                np.asarray(value, dtype=np.float32),
                rtol=1e-5,
                atol=1e-5,
                err_msg=f"{name} of window at {step_id}",
            )


@pytest.mark.parametrize("kind", ["state", "image"])
@pytest.mark.parametrize("buffer_class", BUFFER_CLASSES)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    offline_layout=st.one_of(st.none(), episode_layouts(6, last_may_continue=False)),
    online_layouts=st.lists(episode_layouts(6, last_may_continue=True), min_size=1, max_size=2),
    ring_per_env=st.integers(1, 30),
    h=st.integers(1, 5),
    gamma=st.sampled_from([0.5, 0.9, 0.99, 1.0]),
    seed=st.integers(0, 2**16),
)
def test_windows_match_brute_force(buffer_class, kind, offline_layout, online_layouts, ring_per_env, h, gamma, seed):
    rng = np.random.default_rng(seed)
    np.random.seed(seed)
    th.manual_seed(seed)
    n_envs = len(online_layouts)
    buffer = make_buffer(ring_per_env * n_envs, n_envs, buffer_class, kind, chunk_size=h, gamma=gamma)
    streams_by_id: dict[int, tuple[list[Step], int]] = {}

    if offline_layout is not None:
        offline_layout = [*offline_layout, (h, "truncated")]  # at least one episode as long as a chunk
        offline = steps_of(offline_layout, rng, first_id=0, kind=kind)
        add_offline(buffer, offline)
        streams_by_id.update({int(i): (offline, t) for t, i in enumerate(step_ids(np.stack([s.obs for s in offline])))})

    # Online streams: each env gets its own layout, cut or padded with ongoing steps to a common length.
    first_ids = [10_000 * (env + 1) for env in range(n_envs)]
    streams = [steps_of(layout, rng, first, kind) for layout, first in zip(online_layouts, first_ids, strict=True)]
    length = min(len(stream) for stream in streams)
    streams = [stream[:length] for stream in streams]
    add_online(buffer, streams)
    for stream in streams:
        kept = stream[-ring_per_env:]  # the ring keeps each env's newest steps; older ones are overwritten
        streams_by_id.update({int(i): (kept, t) for t, i in enumerate(step_ids(np.stack([s.obs for s in kept])))})

    batch = buffer.sample(256)
    assert batch.actions.shape == (256, h, ACTION_DIM)
    assert batch.rewards.shape == batch.masks.shape == batch.valid.shape == (256, h)
    check_batch_against_brute_force(batch, streams_by_id, h, gamma)


@pytest.mark.parametrize("buffer_class", BUFFER_CLASSES)
def test_hand_worked_window(buffer_class):
    """h = 3, gamma = 0.5 over one offline episode that terminates at its third step, then a truncated one."""
    buffer = make_buffer(10, buffer_class=buffer_class, chunk_size=3, gamma=0.5)
    obs = np.arange(5, dtype=np.float32)[:, None].repeat(OBS_DIM, axis=1)
    actions = np.linspace(-0.5, 0.5, 10, dtype=np.float32).reshape(5, 2)
    rewards = np.array([1.0, 2.0, 4.0, 8.0, 16.0])
    terminated = np.array([0, 0, 1, 0, 0])
    episode_end = np.array([0, 0, 1, 0, 1])
    buffer.add_offline(obs, actions, rewards, obs + 100, terminated, episode_end)
    np.random.seed(0)
    th.manual_seed(0)
    batch = buffer.sample(64)
    starts = batch.observations[:, 0].long().numpy()
    by_start = {int(s): i for i, s in enumerate(starts)}
    assert set(by_start) == {0, 1, 2, 3, 4}

    row = by_start[0]  # 1 + 0.5*2 + 0.25*4, terminated at the last position: still valid
    np.testing.assert_allclose(batch.rewards[row], [1.0, 2.0, 3.0])
    np.testing.assert_allclose(batch.masks[row], [1.0, 1.0, 0.0])
    np.testing.assert_allclose(batch.valid[row], [1.0, 1.0, 1.0])
    np.testing.assert_allclose(batch.next_observations[row], [102.0] * OBS_DIM)
    np.testing.assert_allclose(batch.actions[row], actions[0:3])

    row = by_start[1]  # crosses the termination at position 1: reads the next episode's step, weighted out
    np.testing.assert_allclose(batch.rewards[row], [2.0, 4.0, 6.0])
    np.testing.assert_allclose(batch.masks[row], [1.0, 0.0, 0.0])
    np.testing.assert_allclose(batch.valid[row], [1.0, 1.0, 0.0])

    row = by_start[3]  # the last step of the data: padded with no reward
    np.testing.assert_allclose(batch.rewards[row], [8.0, 16.0 * 0.5 + 8.0, 16.0 * 0.5 + 8.0])
    np.testing.assert_allclose(batch.masks[row], [1.0, 1.0, 1.0])
    np.testing.assert_allclose(batch.valid[row], [1.0, 1.0, 0.0])
    np.testing.assert_allclose(batch.next_observations[row], [104.0] * OBS_DIM)
    np.testing.assert_allclose(batch.actions[row], actions[[3, 4, 4]])


@pytest.mark.parametrize("buffer_class", BUFFER_CLASSES)
def test_termination_inside_an_episode_cuts_masks_but_not_valid(buffer_class):
    """OGBench's relabelled play data: the goal is reached at step 1 but the trajectory goes on (h = 3, gamma = 0.5)."""
    buffer = make_buffer(10, buffer_class=buffer_class, chunk_size=3, gamma=0.5)
    obs = np.arange(4, dtype=np.float32)[:, None].repeat(OBS_DIM, axis=1)
    actions = np.zeros((4, 2), dtype=np.float32)
    rewards = np.array([-1.0, 0.0, -1.0, 0.0])
    terminated = np.array([0, 1, 0, 1])
    episode_end = np.array([0, 0, 0, 1])
    buffer.add_offline(obs, actions, rewards, obs + 100, terminated, episode_end)
    np.random.seed(0)
    th.manual_seed(0)
    batch = buffer.sample(64)
    row = {int(s): i for i, s in enumerate(batch.observations[:, 0].long().numpy())}[0]
    np.testing.assert_allclose(batch.rewards[row], [-1.0, -1.0, -1.25])  # -1 + 0.5 * 0 + 0.25 * -1
    np.testing.assert_allclose(batch.masks[row], [1.0, 0.0, 0.0])
    np.testing.assert_allclose(batch.valid[row], [1.0, 1.0, 1.0])


def fill_online(buffer: ChunkReplayBuffer, n_steps: int, first_id: int, episode_length: int = 10) -> None:
    rng = np.random.default_rng(1)
    layout = [(episode_length, "truncated")] * (n_steps // episode_length)
    add_online(buffer, [steps_of(layout, rng, first_id)])


@pytest.mark.parametrize("buffer_class", BUFFER_CLASSES)
def test_uniform_over_offline_and_online(buffer_class):
    """Default sampling: every stored step equally likely, whichever segment holds it."""
    buffer = make_buffer(300, buffer_class=buffer_class, chunk_size=2)
    rng = np.random.default_rng(0)
    add_offline(buffer, steps_of([(10, "truncated")] * 10, rng, first_id=0))
    fill_online(buffer, 300, first_id=1000)
    np.random.seed(0)
    th.manual_seed(0)
    ids = np.concatenate([buffer.sample(1000).observations[:, 0].numpy() for _ in range(40)])
    offline_share = (ids < 1000).mean()
    assert abs(offline_share - 100 / 400) < 0.01  # 40k draws: std of the share is 0.002
    counts = np.unique(ids, return_counts=True)[1]
    assert len(counts) == 400
    # Each step is drawn 100 times in expectation: a chi-square over 400 cells stays near its 399 dof.
    chi_square = ((counts - 100.0) ** 2 / 100.0).sum()
    assert chi_square < 399 + 6 * np.sqrt(2 * 399)


@pytest.mark.parametrize("buffer_class", BUFFER_CLASSES)
@pytest.mark.parametrize("fraction", [0.0, 0.25, 0.5, 1.0])
def test_offline_fraction_fixes_batch_composition(buffer_class, fraction):
    buffer = make_buffer(300, buffer_class=buffer_class, chunk_size=2, offline_fraction=fraction)
    add_offline(buffer, steps_of([(10, "truncated")] * 3, np.random.default_rng(0), first_id=0))
    fill_online(buffer, 300, first_id=1000)
    np.random.seed(0)
    for _ in range(5):
        ids = buffer.sample(256).observations[:, 0].numpy()
        assert (ids < 1000).sum() == round(256 * fraction)


@pytest.mark.parametrize("buffer_class", BUFFER_CLASSES)
def test_offline_segment_survives_wrap_around_and_reset(buffer_class):
    buffer = make_buffer(20, buffer_class=buffer_class, chunk_size=3)
    add_offline(buffer, steps_of([(5, "terminated")] * 2, np.random.default_rng(0), first_id=0))
    fill_online(buffer, 100, first_id=1000)
    np.random.seed(0)
    th.manual_seed(0)
    ids = buffer.sample(2000).observations[:, 0].numpy()
    assert set(ids[ids < 1000]) == set(range(10))
    assert set(ids[ids >= 1000]) == set(range(1080, 1100))  # the newest 20 online steps only
    buffer.reset()
    ids = buffer.sample(100).observations[:, 0].numpy()
    assert (ids < 1000).all()


def test_float64_observations_are_stored_as_float32():
    observation_space = spaces.Box(-np.inf, np.inf, (OBS_DIM,), np.float64)
    action_space = spaces.Box(-1.0, 1.0, (ACTION_DIM,), np.float32)
    buffer = ChunkReplayBuffer(100, observation_space, action_space)
    assert buffer.observations.dtype == np.float32
    assert buffer.next_observations.dtype == np.float32


def test_offline_actions_are_clipped_as_the_reference_does():
    buffer = make_buffer(10, chunk_size=1)
    actions = np.array([[1.0, -1.0], [0.5, -0.25]])
    buffer.add_offline(np.zeros((2, OBS_DIM)), actions, np.zeros(2), np.zeros((2, OBS_DIM)), [0, 0], [0, 1])
    np.testing.assert_array_equal(buffer.offline_actions, np.float32([[1 - 1e-5, -1 + 1e-5], [0.5, -0.25]]))


@pytest.mark.parametrize("buffer_class", BUFFER_CLASSES)
def test_sampled_tensors_on_device_and_float32(buffer_class):
    buffer = make_buffer(10, buffer_class=buffer_class, chunk_size=2)
    add_offline(buffer, steps_of([(4, "terminated")], np.random.default_rng(0), first_id=0))
    batch = buffer.sample(8)
    for tensor in batch:
        assert tensor.dtype == th.float32
        assert tensor.device == th.device("cpu")


def offline_arrays(n: int = 6) -> dict[str, np.ndarray]:
    return {
        "observations": np.zeros((n, OBS_DIM)),
        "actions": np.zeros((n, ACTION_DIM)),
        "rewards": np.zeros(n),
        "next_observations": np.zeros((n, OBS_DIM)),
        "terminated": np.zeros(n),
        "episode_end": np.eye(n)[-1],
    }


@pytest.mark.parametrize(
    "change, message",
    [
        ({"observations": np.zeros((6, OBS_DIM + 1))}, r"observations has shape \(6, 4\), expected \(6, 3\)"),
        ({"actions": np.zeros((6, 3))}, r"actions has shape \(6, 3\), expected \(6, 2\)"),
        ({"rewards": np.zeros(0)}, "at least one step"),
        ({"terminated": np.zeros(5)}, r"terminated has shape \(5,\)"),
    ],
)
def test_add_offline_refuses_bad_shapes(change, message):
    # The values are checked where offline data enters qc_sb3 (test_datasets.py::test_add_transitions_refuses_bad_data).
    buffer = make_buffer(10, chunk_size=2)
    with pytest.raises(ValueError, match=message):
        buffer.add_offline(**{**offline_arrays(), **change})
    assert buffer.offline_size == 0


def test_offline_last_step_ends_its_windows_even_unflagged():
    # add_offline checks shapes only; with no data after it, the last step is stored as an episode end, as an online
    # stream's newest step counts as one. By hand, h = 3, reward 1 per step, gamma 0.5, steps 0..3, none flagged:
    # from step 2: positions 2, 3, padding -> valid [1, 1, 0], R [1, 1.5, 1.5]; from step 3: valid [1, 0, 0], R [1, 1, 1].
    buffer = make_buffer(10, chunk_size=3, gamma=0.5)
    observations = np.repeat(np.arange(4.0)[:, None], OBS_DIM, axis=1)
    buffer.add_offline(observations, np.zeros((4, ACTION_DIM)), np.ones(4), observations + 100, np.zeros(4), np.zeros(4))
    np.testing.assert_array_equal(buffer.offline_episode_end, [0, 0, 0, 1])
    np.random.seed(0)
    batch = buffer.sample(200)
    starts = batch.observations[:, 0].numpy()
    for start, valid, rewards in ((2, [1, 1, 0], [1, 1.5, 1.5]), (3, [1, 0, 0], [1, 1, 1])):
        rows = starts == start
        assert rows.any()
        np.testing.assert_array_equal(batch.valid[rows].numpy(), np.tile(np.float32(valid), (rows.sum(), 1)))
        np.testing.assert_array_equal(batch.rewards[rows].numpy(), np.tile(np.float32(rewards), (rows.sum(), 1)))


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"optimize_memory_usage": True}, "optimize_memory_usage"),
        ({"handle_timeout_termination": False}, "handle_timeout_termination"),
        ({"chunk_size": 0}, "chunk_size must be an integer >= 1, got 0"),
        ({"gamma": 1.5}, "gamma must be in"),
        ({"offline_fraction": -0.1}, "offline_fraction"),
    ],
)
def test_constructor_refuses_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        make_buffer(10, **kwargs)


def test_sampling_an_empty_buffer_is_an_error():
    with pytest.raises(ValueError, match="empty"):
        make_buffer(10).sample(4)


def test_add_offline_refuses_env_scale_actions():
    buffer = ChunkReplayBuffer(8, spaces.Box(-1, 1, (2,)), spaces.Box(-2, 2, (1,)), chunk_size=2)
    n = 4
    with pytest.raises(ValueError, match=r"\[-1, 1\] scale \(use policy.scale_action\)"):
        buffer.add_offline(
            observations=np.zeros((n, 2)),
            actions=np.full((n, 1), 1.5),
            rewards=np.zeros(n),
            next_observations=np.zeros((n, 2)),
            terminated=np.zeros(n),
            episode_end=np.arange(n) == n - 1,
        )
