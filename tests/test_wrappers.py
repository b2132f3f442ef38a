"""ChunkedActionWrapper and ChunkDiscountReplayBuffer against hand-computed chunk rewards, discounts and TD targets."""

from __future__ import annotations

import math
import re
import warnings
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch as th
from gymnasium import spaces
from gymnasium.utils.env_checker import check_env as gym_check_env
from gymnasium.wrappers import TimeLimit
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from sb3_contrib import TQC, CrossQ
from stable_baselines3 import A2C, PPO, SAC, TD3
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.env_checker import check_env as sb3_check_env
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.utils import set_random_seed
from stable_baselines3.common.vec_env import DummyVecEnv

from qc_sb3.common.macro_buffer import ChunkDiscountReplayBuffer
from qc_sb3.common.wrappers import ChunkedActionWrapper


class CounterEnv(gym.Env):
    """
    Deterministic test env: the observation is the step counter ``t``; reward ``(t + 1) + w * (a[0] - 2 a[1])``.

    Each reset starts the counter at the next value of ``starts`` (cycling), so episodes can live in disjoint
    counter ranges; the episode terminates when the counter reaches ``terminate_at``. Every executed action is
    recorded in ``executed``.

    :param terminate_at: Counter value at which the episode terminates (None: never)
    :param starts: Counter values the successive episodes start at, cycled
    :param action_weight: ``w``, the weight of the action term in the reward
    """

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, terminate_at: int | None = None, starts: tuple[int, ...] = (0,), action_weight: float = 1.0):
        self.observation_space = spaces.Box(0.0, 1000.0, (1,), np.float32)
        self.action_space = spaces.Box(np.array([-1.0, -2.0], np.float32), np.array([1.0, 2.0], np.float32), dtype=np.float32)
        self.terminate_at = terminate_at
        self.starts = starts
        self.action_weight = action_weight
        self.t = 0
        self.n_resets = 0
        self.executed: list[np.ndarray] = []
        self.last_info: dict[str, Any] = {}

    def _obs(self) -> np.ndarray:
        return np.array([self.t], dtype=np.float32)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self.t = self.starts[self.n_resets % len(self.starts)]
        self.n_resets += 1
        return self._obs(), {}

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        action = np.asarray(action)
        self.executed.append(action.copy())
        # Test reward: r(t, a) = (t + 1) + w * (a[0] - 2 a[1])
        reward = (self.t + 1) + self.action_weight * (float(action[0]) - 2.0 * float(action[1]))
        self.t += 1
        self.last_info = {"t": self.t}
        return self._obs(), reward, self.t == self.terminate_at, False, self.last_info


# Hand-picked chunk rows (exact binary fractions); a[0] - 2 a[1] = 2.0, -0.5, 0.0.
ROWS = np.array([[1.0, -0.5], [0.5, 0.5], [0.0, 0.0]], dtype=np.float32)


def make_wrapped(
    chunk_size: int = 3, gamma: float = 0.5, max_episode_steps: int = 100, **env_kwargs: Any
) -> tuple[ChunkedActionWrapper, CounterEnv]:
    inner = CounterEnv(**env_kwargs)
    return ChunkedActionWrapper(TimeLimit(inner, max_episode_steps), chunk_size, gamma=gamma), inner


# ---------------------------------------------------------------------------------------------------------------
# Wrapper semantics on the counter env
# ---------------------------------------------------------------------------------------------------------------


def test_action_space_is_tiled_flat_and_time_major():
    env, _ = make_wrapped(chunk_size=3)
    assert env.action_space.shape == (6,)
    assert env.action_space.dtype == np.float32
    np.testing.assert_array_equal(env.action_space.low, [-1.0, -2.0, -1.0, -2.0, -1.0, -2.0])
    np.testing.assert_array_equal(env.action_space.high, [1.0, 2.0, 1.0, 2.0, 1.0, 2.0])
    assert env.primitive_action_space.shape == (2,)
    assert env.chunk_size == 3
    assert env.gamma == 0.5


def test_full_chunk_reward_discount_and_executed_actions():
    env, inner = make_wrapped(chunk_size=3, gamma=0.5)
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(ROWS.reshape(-1))
    # r_0 = 1 + 2 = 3, r_1 = 2 - 0.5 = 1.5, r_2 = 3 + 0 = 3; R = 3 + 0.5 * 1.5 + 0.25 * 3 = 4.5
    assert reward == 4.5
    assert isinstance(reward, float)
    np.testing.assert_array_equal(obs, [3.0])
    assert (terminated, truncated) == (False, False)
    assert info["chunk_steps"] == 3
    assert info["chunk_discount"] == 0.125
    np.testing.assert_array_equal(info["chunk_rewards"], [3.0, 1.5, 3.0])
    assert info["t"] == 3
    np.testing.assert_array_equal(np.stack(inner.executed), ROWS)
    # The last step's info is copied, not extended in place.
    assert info is not inner.last_info
    assert "chunk_steps" not in inner.last_info


def test_termination_stops_the_chunk():
    env, inner = make_wrapped(chunk_size=3, gamma=0.5, terminate_at=2)
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(ROWS)
    # Two steps executed: R = 3 + 0.5 * 1.5 = 3.75; discount 0.5^2
    assert reward == 3.75
    assert (terminated, truncated) == (True, False)
    assert info["chunk_steps"] == 2
    assert info["chunk_discount"] == 0.25
    np.testing.assert_array_equal(info["chunk_rewards"], [3.0, 1.5])
    np.testing.assert_array_equal(obs, [2.0])
    assert inner.t == 2
    np.testing.assert_array_equal(np.stack(inner.executed), ROWS[:2])


def test_truncation_stops_the_chunk():
    env, inner = make_wrapped(chunk_size=3, gamma=0.5, max_episode_steps=4)
    env.reset(seed=0)
    env.step(ROWS)
    obs, reward, terminated, truncated, info = env.step(ROWS)
    # Second chunk starts at t = 3: one step, r = 4 + 2 = 6, then the time limit (4 steps) truncates.
    assert reward == 6.0
    assert (terminated, truncated) == (False, True)
    assert info["chunk_steps"] == 1
    assert info["chunk_discount"] == 0.5
    np.testing.assert_array_equal(info["chunk_rewards"], [6.0])
    np.testing.assert_array_equal(obs, [4.0])
    assert inner.t == 4
    np.testing.assert_array_equal(np.stack(inner.executed), np.concatenate([ROWS, ROWS[:1]]))


def test_chunk_size_one_is_identity_on_rewards():
    env, inner = make_wrapped(chunk_size=1, gamma=0.5)
    env.reset(seed=0)
    rewards, discounts = [], []
    for row in ROWS:
        _, reward, _, _, info = env.step(row)
        rewards.append(reward)
        discounts.append(info["chunk_discount"])
    # Same rewards as the primitive env (3, 1.5, 3); each macro-step bootstraps with gamma^1.
    assert rewards == [3.0, 1.5, 3.0]
    assert discounts == [0.5, 0.5, 0.5]
    np.testing.assert_array_equal(np.stack(inner.executed), ROWS)


@settings(max_examples=40, deadline=None, derandomize=True)
@given(
    chunk=arrays(np.float32, (4, 2), elements=st.floats(-1.0, 1.0, width=32)),
    terminate_at=st.integers(1, 6),
    gamma=st.sampled_from([0.0, 0.5, 0.9, 1.0]),
)
def test_flat_and_2d_chunks_agree(chunk: np.ndarray, terminate_at: int, gamma: float):
    results = []
    for action in (chunk.reshape(-1), chunk):
        env, inner = make_wrapped(chunk_size=4, gamma=gamma, terminate_at=terminate_at)
        env.reset(seed=0)
        obs, reward, terminated, truncated, info = env.step(action)
        results.append((obs.tolist(), reward, terminated, truncated, info["chunk_steps"], info["chunk_rewards"].tolist()))
        steps = min(terminate_at, 4)
        assert info["chunk_steps"] == steps
        assert info["chunk_discount"] == gamma**steps
        np.testing.assert_array_equal(np.stack(inner.executed), chunk[:steps])
    assert results[0] == results[1]


def test_pendulum_time_limit_cuts_the_last_chunk():
    env = ChunkedActionWrapper(gym.make("Pendulum-v1"), 3, gamma=0.9)
    env.reset(seed=0)
    env.action_space.seed(0)
    n_chunks = 0
    truncated = terminated = False
    while not (terminated or truncated):
        _, _, terminated, truncated, info = env.step(env.action_space.sample())
        n_chunks += 1
    # 200 steps = 66 full chunks of 3 + one chunk of 2 cut by the time limit.
    assert (n_chunks, terminated, truncated) == (67, False, True)
    assert info["chunk_steps"] == 2
    assert info["chunk_discount"] == pytest.approx(0.81)


# ---------------------------------------------------------------------------------------------------------------
# Checkers, spec round trip, errors
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make_env",
    [
        lambda: make_wrapped(chunk_size=3, gamma=0.9, terminate_at=7)[0],
        lambda: ChunkedActionWrapper(gym.make("Pendulum-v1"), 4),
    ],
    ids=["counter", "pendulum"],
)
def test_env_checkers_pass(make_env):
    with warnings.catch_warnings():
        # Both checkers only warn about the wrapper stack and non-normalized bounds here.
        warnings.simplefilter("ignore", UserWarning)
        # The render check needs pygame, which has nothing to do with the wrapper.
        gym_check_env(make_env(), skip_render_check=True)
        sb3_check_env(make_env())


def test_spec_round_trip():
    env = ChunkedActionWrapper(gym.make("Pendulum-v1"), 3, gamma=0.9)
    rebuilt = gym.make(env.spec)
    assert isinstance(rebuilt, ChunkedActionWrapper)
    assert (rebuilt.chunk_size, rebuilt.gamma) == (3, 0.9)
    assert rebuilt.action_space == env.action_space
    assert rebuilt.spec == env.spec
    assert rebuilt.spec.max_episode_steps == 200
    assert rebuilt.spec.additional_wrappers[-1].entry_point == "qc_sb3.common.wrappers:ChunkedActionWrapper"
    assert rebuilt.spec.additional_wrappers[-1].kwargs == {"chunk_size": 3, "gamma": 0.9}


@pytest.mark.parametrize("chunk_size", [0, -2, 2.5, "3", True])
def test_bad_chunk_size(chunk_size):
    with pytest.raises(ValueError, match=re.escape(f"chunk_size must be an int >= 1, got {chunk_size!r}")):
        ChunkedActionWrapper(CounterEnv(), chunk_size)


@pytest.mark.parametrize("gamma", [-0.1, 1.5, math.nan, "0.9", None])
def test_bad_gamma(gamma):
    with pytest.raises(ValueError, match=re.escape(f"gamma must be a number in [0, 1], got {gamma!r}")):
        ChunkedActionWrapper(CounterEnv(), 3, gamma=gamma)


def test_non_box_action_space():
    with pytest.raises(ValueError, match=re.escape("needs a Box action space, got Discrete(2)")):
        ChunkedActionWrapper(gym.make("CartPole-v1"), 3)


@pytest.mark.parametrize("shape", [(5,), (2, 3), (3, 2, 1), (1, 6)])
def test_wrong_action_shape(shape):
    env, inner = make_wrapped(chunk_size=3)
    env.reset(seed=0)
    expected = f"Chunk action has shape {shape}, expected (6,) (flat, time-major) or (3, 2)"
    with pytest.raises(ValueError, match=re.escape(expected)):
        env.step(np.zeros(shape, dtype=np.float32))
    assert inner.executed == []


# ---------------------------------------------------------------------------------------------------------------
# ChunkDiscountReplayBuffer
# ---------------------------------------------------------------------------------------------------------------

OBS_SPACE = spaces.Box(0.0, 1000.0, (1,), np.float32)
CHUNK_SPACE = spaces.Box(-1.0, 1.0, (6,), np.float32)


def test_buffer_refuses_optimize_memory_usage():
    with pytest.raises(ValueError, match="optimize_memory_usage=True"):
        ChunkDiscountReplayBuffer(10, OBS_SPACE, CHUNK_SPACE, optimize_memory_usage=True, handle_timeout_termination=False)


def test_buffer_refuses_dict_observations():
    with pytest.raises(ValueError, match="does not support Dict observation spaces"):
        ChunkDiscountReplayBuffer(10, spaces.Dict({"t": OBS_SPACE}), CHUNK_SPACE)


def test_buffer_needs_chunk_discount():
    buffer = ChunkDiscountReplayBuffer(10, OBS_SPACE, CHUNK_SPACE, n_envs=2)
    zeros = np.zeros((2, 1), np.float32)
    with pytest.raises(ValueError, match=re.escape("env(s) [1] has no 'chunk_discount'") + ".*ChunkedActionWrapper"):
        buffer.add(zeros, zeros, np.zeros((2, 6)), np.zeros(2), np.zeros(2), [{"chunk_discount": 0.9}, {}])
    assert buffer.pos == 0


def test_buffer_two_envs_keeps_discounts_aligned():
    set_random_seed(0)
    buffer = ChunkDiscountReplayBuffer(8, OBS_SPACE, CHUNK_SPACE, device="cpu", n_envs=2)
    # Hand table, obs id (10 * pos + env) -> discount; the two envs differ at every position.
    discount_of = {0: 0.729, 1: 0.9, 10: 0.81, 11: 0.729, 20: 0.9, 21: 0.81}
    for pos in range(3):
        ids = np.array([10 * pos, 10 * pos + 1], dtype=np.float32)
        buffer.add(
            ids[:, None],
            ids[:, None] + 3.0,
            np.zeros((2, 6), np.float32),
            ids,
            np.zeros(2, np.float32),
            [{"chunk_discount": discount_of[int(i)]} for i in ids],
        )
    batch = buffer.sample(256)
    ids = batch.observations[:, 0].numpy()
    assert batch.discounts.shape == (256, 1)
    assert batch.discounts.dtype == th.float32
    assert set(ids.astype(int)) == set(discount_of)
    np.testing.assert_allclose(batch.discounts[:, 0].numpy(), [discount_of[int(i)] for i in ids], rtol=1e-6)
    np.testing.assert_array_equal(batch.rewards[:, 0].numpy(), ids)
    np.testing.assert_array_equal(batch.next_observations[:, 0].numpy(), ids + 3.0)


# ---------------------------------------------------------------------------------------------------------------
# SAC / TD3 / TQC / CrossQ bootstrap with the chunk discount: TD targets against a hand table
# ---------------------------------------------------------------------------------------------------------------

GAMMA, H, Q_CONSTANT = 0.9, 3, 10.0
# Env for the TD-target tests: reward r = t + 1 (action_weight 0); episodes alternate between counter ranges:
# starts at 0 and terminates at t = 5 (chunks from 0: full; from 3: cut by termination after 2 steps);
# starts at 10 and is truncated by the 7-step time limit (chunks from 10, 13: full; from 16: cut after 1 step).
# Hand table, start counter -> (discount, done, TD target r + (1 - done) * discount * c) with c = 10:
TD_TABLE = {
    # 1 + 0.9 * 2 + 0.81 * 3 = 5.23; + 0.729 * 10
    0: (0.729, 0.0, 12.52),
    # 4 + 0.9 * 5 = 8.5; terminated: no bootstrap
    3: (0.81, 1.0, 8.5),
    # 11 + 0.9 * 12 + 0.81 * 13 = 32.33; + 7.29
    10: (0.729, 0.0, 39.62),
    # 14 + 0.9 * 15 + 0.81 * 16 = 40.46; + 7.29
    13: (0.729, 0.0, 47.75),
    # 17; truncated after 1 step: still bootstrapped, with 0.9 (not 0.729) * 10
    16: (0.9, 0.0, 26.0),
}
N_TRANSITIONS = 20
BATCH_SIZE = 64


def make_td_model(algo: type[BaseAlgorithm], n_envs: int) -> BaseAlgorithm:
    # The second env starts with the other episode kind, so the two envs are out of phase in the buffer.
    starts = [(0, 10), (10, 0)][:n_envs]
    venv = DummyVecEnv(
        [
            lambda s=s: ChunkedActionWrapper(TimeLimit(CounterEnv(terminate_at=5, starts=s, action_weight=0.0), 7), H, GAMMA)
            for s in starts
        ]
    )
    kwargs: dict[str, Any] = {"ent_coef": 0.0} if algo is not TD3 else {}
    return algo(
        "MlpPolicy",
        venv,
        learning_starts=N_TRANSITIONS,
        buffer_size=100,
        replay_buffer_class=ChunkDiscountReplayBuffer,
        policy_kwargs={"net_arch": [8]},
        gamma=0.99,  # the algorithm's own gamma, deliberately not the chunk discount
        device="cpu",
        seed=0,
        **kwargs,
    )


def set_constant_q(critic: th.nn.Module, value: float) -> None:
    """Make every Q-network (or quantile network) of ``critic`` output ``value``: last Linear with zero weights."""
    for network in critic.modules():
        if isinstance(network, th.nn.Sequential):
            last_linear = [layer for layer in network if isinstance(layer, th.nn.Linear)][-1]
            with th.no_grad():
                last_linear.weight.zero_()
                last_linear.bias.fill_(value)


@pytest.mark.parametrize(("algo", "n_envs"), [(SAC, 1), (TD3, 1), (TQC, 1), (CrossQ, 1), (SAC, 2), (TQC, 2)])
def test_td_targets_use_chunk_discount(algo: type[BaseAlgorithm], n_envs: int, monkeypatch: pytest.MonkeyPatch):
    model = make_td_model(algo, n_envs)
    with pytest.warns(UserWarning, match=f"{algo.__name__}'s gamma is unused"):  # 0.99, deliberately not GAMMA
        model.learn(total_timesteps=N_TRANSITIONS)
    assert model.replay_buffer.size() * n_envs == N_TRANSITIONS
    # CrossQ has no target network: its critic computes the next-state values.
    set_constant_q(model.critic if algo is CrossQ else model.critic_target, Q_CONSTANT)

    targets: list[th.Tensor] = []
    if algo is TQC:
        import sb3_contrib.tqc.tqc as tqc_module

        original_loss = tqc_module.quantile_huber_loss

        def loss_spy(current: th.Tensor, target: th.Tensor, *args: Any, **kwargs: Any) -> th.Tensor:
            targets.append(target.detach().clone())
            return original_loss(current, target, *args, **kwargs)

        monkeypatch.setattr(tqc_module, "quantile_huber_loss", loss_spy)
    else:
        original_mse = th.nn.functional.mse_loss

        def loss_spy(current: th.Tensor, target: th.Tensor, *args: Any, **kwargs: Any) -> th.Tensor:
            targets.append(target.detach().clone())
            return original_mse(current, target, *args, **kwargs)

        monkeypatch.setattr(th.nn.functional, "mse_loss", loss_spy)

    batches = []
    original_sample = model.replay_buffer.sample

    def sample_spy(*args: Any, **kwargs: Any):
        batches.append(original_sample(*args, **kwargs))
        return batches[-1]

    monkeypatch.setattr(model.replay_buffer, "sample", sample_spy)
    model.train(gradient_steps=1, batch_size=BATCH_SIZE)

    assert len(batches) == 1
    assert len(targets) >= 1
    batch = batches[0]
    starts = batch.observations[:, 0].numpy().astype(int)
    # Full chunks, the chunk cut by termination (3) and the one cut by truncation (16) are all in the batch.
    assert set(starts) == set(TD_TABLE)
    expected_targets = np.array([TD_TABLE[s][2] for s in starts])
    for target in targets:
        # One row per sample; TQC has one column per kept quantile, all equal here.
        per_sample = target.reshape(BATCH_SIZE, -1).numpy()
        np.testing.assert_allclose(per_sample, np.repeat(expected_targets[:, None], per_sample.shape[1], axis=1), rtol=1e-5)
    np.testing.assert_allclose(batch.discounts[:, 0].numpy(), [TD_TABLE[s][0] for s in starts], rtol=1e-6)
    np.testing.assert_array_equal(batch.dones[:, 0].numpy(), [TD_TABLE[s][1] for s in starts])


# ---------------------------------------------------------------------------------------------------------------
# Smoke
# ---------------------------------------------------------------------------------------------------------------


def test_sac_learns_on_chunked_pendulum():
    env = ChunkedActionWrapper(Monitor(gym.make("Pendulum-v1")), 5)
    model = SAC(
        "MlpPolicy",
        env,
        replay_buffer_class=ChunkDiscountReplayBuffer,
        learning_starts=100,
        train_freq=2,
        batch_size=32,
        policy_kwargs={"net_arch": [16]},
        device="cpu",
        seed=0,
    )
    model.learn(total_timesteps=300)
    assert model.num_timesteps == 300
    assert model._n_updates > 0
    # 200 = 40 chunks of 5: every macro-transition is a full chunk, discount 0.99^5 = 0.9509900499
    np.testing.assert_allclose(model.replay_buffer.discounts[:300, 0], 0.9509900499, rtol=1e-6)


# ---------------------------------------------------------------------------------------------------------------
# Episode statistics and the setup around the wrapper (issue 15, item 6)
# ---------------------------------------------------------------------------------------------------------------

MONITOR_MESSAGE = "replaced info\\['episode'\\]"


def messages(record: list[warnings.WarningMessage], pattern: str) -> list[str]:
    return [str(warning.message) for warning in record if re.search(pattern, str(warning.message))]


def run_counter_episode(env: gym.Env) -> dict[str, Any]:
    """One episode of chunks of ROWS; returns the info of its last step."""
    env.reset()
    done, info = False, {}
    while not done:
        _, _, terminated, truncated, info = env.step(ROWS)
        done = terminated or truncated
    return info


@pytest.mark.parametrize(("terminate_at", "max_episode_steps"), [(7, 100), (None, 8)])
def test_episode_info_holds_the_primitive_return_and_length(terminate_at, max_episode_steps):
    env, inner = make_wrapped(chunk_size=3, gamma=0.5, max_episode_steps=max_episode_steps, terminate_at=terminate_at)
    info = run_counter_episode(env)
    length = 7 if terminate_at else 8
    # Primitive step t (from 0) gets (t + 1) + (a[0] - 2 a[1]) with the rows cycling 2.0, -0.5, 0.0: undiscounted.
    expected_return = sum((t + 1) + [2.0, -0.5, 0.0][t % 3] for t in range(length))
    assert info["episode"]["l"] == length == len(inner.executed)
    assert info["episode"]["r"] == pytest.approx(expected_return)
    assert info["episode"]["t"] >= 0.0
    # A second episode starts its sums from zero.
    info = run_counter_episode(env)
    assert info["episode"]["l"] == length


def test_monitor_inside_keeps_its_episode_info_and_no_warning():
    inner = TimeLimit(CounterEnv(terminate_at=7), 100)
    env = ChunkedActionWrapper(Monitor(inner), 3, gamma=0.5)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        info = run_counter_episode(env)
        run_counter_episode(env)
    assert info["episode"]["l"] == 7 and env.env.get_episode_lengths() == [7, 7]
    assert not messages(record, MONITOR_MESSAGE)


def test_monitor_outside_is_detected():
    venv = DummyVecEnv([lambda: Monitor(ChunkedActionWrapper(TimeLimit(CounterEnv(terminate_at=7), 100), 3, gamma=0.5))])
    venv.reset()
    with pytest.warns(UserWarning, match=MONITOR_MESSAGE):
        for _ in range(3):  # one episode of 3 chunks, after which the VecEnv resets the env
            venv.step(ROWS.reshape(1, -1))


def test_sb3_adds_its_monitor_outside_a_bare_wrapper_and_the_wrapper_says_so():
    env = ChunkedActionWrapper(TimeLimit(CounterEnv(terminate_at=7), 100), 3, gamma=0.5)
    model = SAC("MlpPolicy", env, replay_buffer_class=ChunkDiscountReplayBuffer, gamma=0.5, policy_kwargs={"net_arch": [8]})
    with pytest.warns(UserWarning, match=MONITOR_MESSAGE):
        model.learn(total_timesteps=4)


def test_make_vec_env_puts_monitor_inside_and_sb3_reports_primitive_statistics():
    venv = make_vec_env(
        lambda: TimeLimit(CounterEnv(terminate_at=7, action_weight=0.0), 100),
        wrapper_class=ChunkedActionWrapper,
        wrapper_kwargs={"chunk_size": 3, "gamma": 0.5},
    )
    model = SAC(
        "MlpPolicy",
        venv,
        replay_buffer_class=ChunkDiscountReplayBuffer,
        gamma=0.5,
        learning_starts=100,
        policy_kwargs={"net_arch": [8]},
        seed=0,
    )
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        model.learn(total_timesteps=6)
        returns, lengths = evaluate_policy(model, venv, n_eval_episodes=2, return_episode_rewards=True)
    assert not messages(record, "ChunkedActionWrapper")
    # With action_weight 0, an episode of 7 primitive steps returns 1 + 2 + ... + 7, undiscounted.
    assert [info["l"] for info in model.ep_info_buffer] == [7, 7]
    assert [info["r"] for info in model.ep_info_buffer] == [28.0, 28.0]
    assert lengths == [7, 7] and returns == [28.0, 28.0]


@pytest.mark.parametrize(
    ("buffer_class", "algorithm_gamma", "pattern"),
    [
        (None, 0.5, "with a ReplayBuffer: it bootstraps every macro-transition with gamma=0.5"),
        (ChunkDiscountReplayBuffer, 0.99, "SAC has gamma=0.99 but its ChunkedActionWrapper has gamma=0.5"),
        (ChunkDiscountReplayBuffer, 0.5, None),
    ],
)
def test_sac_on_the_wrapper_warns_without_the_chunk_buffer_or_with_another_gamma(buffer_class, algorithm_gamma, pattern):
    venv = DummyVecEnv([lambda: ChunkedActionWrapper(Monitor(TimeLimit(CounterEnv(terminate_at=7), 100)), 3, 0.5)] * 2)
    model = SAC(
        "MlpPolicy",
        venv,
        replay_buffer_class=buffer_class,
        gamma=algorithm_gamma,
        learning_starts=100,
        policy_kwargs={"net_arch": [8]},
        seed=0,
    )
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        model.learn(total_timesteps=4)
    found = messages(record, "ChunkedActionWrapper")
    if pattern is None:
        assert not found
    else:
        assert len(found) == 2 and all(pattern in message for message in found), found  # once per wrapper


@pytest.mark.parametrize(
    ("algorithm", "algorithm_gamma", "warned"),
    [(PPO, 0.9, True), (A2C, 0.9, True), (PPO, 0.9**3, False), (A2C, 0.9**3, False)],
)
def test_an_on_policy_algorithm_on_the_wrapper_is_told_to_set_gamma_to_the_power_h(algorithm, algorithm_gamma, warned):
    venv = DummyVecEnv([lambda: ChunkedActionWrapper(Monitor(TimeLimit(CounterEnv(terminate_at=7), 100)), 3, 0.9)])
    kwargs = {"n_steps": 4, "batch_size": 4} if algorithm is PPO else {"n_steps": 4}
    model = algorithm("MlpPolicy", venv, gamma=algorithm_gamma, policy_kwargs={"net_arch": [8]}, seed=0, **kwargs)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        model.learn(total_timesteps=4)
    found = messages(record, "ChunkedActionWrapper")
    if not warned:
        assert not found
    else:
        # 0.9 ** 3 = 0.729: the per-macro-step gamma that discounts at 0.9 per primitive step.
        assert len(found) == 1 and f"set {algorithm.__name__}(gamma=0.9**3=0.729)" in found[0], found
