"""QC and QC-FQL: losses against hand computations, gradient isolation, acting, the offline phase, refusals of bad
input. What every algorithm must do (save/load, VecEnv, predict, evaluate_policy, set_env) is in test_contract.py."""

from __future__ import annotations

import copy
import sys
import zipfile

import gymnasium as gym
import numpy as np
import pytest
import torch as th
from gymnasium import spaces
from stable_baselines3 import SAC
from stable_baselines3.common.logger import configure
from stable_baselines3.common.vec_env import DummyVecEnv

from qc_sb3 import QC, QCFQL, ChunkReplayBuffer

from reference_math import actor_action, best_of_n, critic_values, euler_sample, flow_velocity, numpy_of

OBS_DIM, ACTION_DIM, EPISODE_LENGTH = 3, 2, 12
TINY = {"net_arch": [16, 16]}


class DriftEnv(gym.Env):
    """A small deterministic env with asymmetric action bounds: the state drifts with the action."""

    observation_space = spaces.Box(-np.inf, np.inf, (OBS_DIM,), np.float32)
    action_space = spaces.Box(np.array([-2.0, 0.0], np.float32), np.array([2.0, 4.0], np.float32))

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.state = self.np_random.normal(size=OBS_DIM).astype(np.float32)
        return self.state, {}

    def step(self, action):
        self.state = (0.9 * self.state + 0.1 * np.r_[action, action[0]]).astype(np.float32)
        reward = -float(np.abs(self.state).sum())
        return self.state, reward, bool(self.state[0] > 1.5), False, {"success": bool(self.state[0] > 1.5)}


def make_env() -> gym.Env:
    return gym.wrappers.TimeLimit(DriftEnv(), EPISODE_LENGTH)


def offline_arrays(n_episodes: int = 6, seed: int = 0) -> dict[str, np.ndarray]:
    """Random episodes of DriftEnv-shaped data, one terminated, the rest truncated, actions in env scale."""
    rng = np.random.default_rng(seed)
    n = n_episodes * EPISODE_LENGTH
    observations = rng.normal(size=(n, OBS_DIM)).astype(np.float32)
    episode_end = np.arange(n) % EPISODE_LENGTH == EPISODE_LENGTH - 1
    terminated = np.zeros(n, bool)
    terminated[EPISODE_LENGTH - 1] = True
    return {
        "observations": observations,
        "actions": rng.uniform([-2.0, 0.0], [2.0, 4.0], size=(n, ACTION_DIM)).astype(np.float32),
        "rewards": rng.normal(size=n).astype(np.float32),
        "next_observations": np.roll(observations, -1, axis=0),
        "terminated": terminated,
        "episode_end": episode_end,
    }


def make_model(cls, **kwargs):
    defaults = {
        "offline_dataset": offline_arrays(),
        "offline_gradient_steps": 0,
        "learning_starts": 10,
        "batch_size": 8,
        "chunk_size": 3,
        "gamma": 0.9,
        "policy_kwargs": TINY,
        "seed": 0,
        "flow_steps": 3,
    }
    if cls is QC:
        defaults["actor_num_samples"] = 4
    model = cls("MlpPolicy", make_env(), **{**defaults, **kwargs})
    model.set_logger(configure(None, []))
    return model


def perturb_target(model) -> None:
    """Make the target critic differ from the online one, so a test can tell which one a formula used."""
    with th.no_grad():
        for parameter in model.policy.critic_target.parameters():
            parameter.add_(0.3 * th.randn_like(parameter))


def hand_losses(model, batch, draws: dict[str, np.ndarray]) -> dict[str, float]:
    """docs/algorithms.md §3 for one batch, sample by sample, with the noises the library drew (replayed from the seed)."""
    policy = model.policy
    h, gamma = model.chunk_size, model.gamma
    obs, next_obs = numpy_of(batch.observations), numpy_of(batch.next_observations)
    windows = numpy_of(batch.actions)
    rewards, masks, valid = numpy_of(batch.rewards), numpy_of(batch.masks), numpy_of(batch.valid)
    batch_size = len(obs)
    actions = windows.reshape(batch_size, -1) if model.action_chunking else windows[:, 0, :]

    targets, critic_terms = [], []
    for b in range(batch_size):
        if isinstance(model, QC):
            next_action = best_of_n(
                policy.flow, policy.critic, next_obs[b], draws["target_noise"][b], model.flow_steps, model.q_agg
            )
        else:
            next_action = np.clip(actor_action(policy.actor, next_obs[b], draws["target_noise"][b]), -1, 1)
        target_q = critic_values(policy.critic_target, next_obs[b], next_action)
        target = rewards[b, -1] + gamma**h * masks[b, -1] * (target_q.mean() if model.q_agg == "mean" else target_q.min())
        targets.append(target)
        q = critic_values(policy.critic, obs[b], actions[b])
        critic_terms.extend((q - target) ** 2 * valid[b, -1])

    bc_terms = []
    for b in range(batch_size):
        x0, t = draws["bc_noise"][b], draws["bc_times"][b, 0]
        x_t = (1 - t) * x0 + t * actions[b]
        squared = (flow_velocity(policy.flow, obs[b], x_t, t) - (actions[b] - x0)) ** 2
        weights = np.repeat(valid[b], ACTION_DIM) if model.action_chunking else np.ones_like(squared)
        bc_terms.extend(squared * weights)
    result = {
        "critic_loss": float(np.mean(critic_terms)),
        "target_mean": float(np.mean(targets)),
        "bc_flow_loss": float(np.mean(bc_terms)),
    }
    if isinstance(model, QCFQL):
        distill_terms, q_values = [], []
        for b in range(batch_size):
            z = draws["actor_noise"][b]
            a_mu = actor_action(policy.actor, obs[b], z)
            distill_terms.extend((a_mu - euler_sample(policy.flow, obs[b], z, model.flow_steps)) ** 2)
            q_values.append(critic_values(policy.critic, obs[b], np.clip(a_mu, -1, 1)).mean())
        result["distill_loss"] = float(np.mean(distill_terms))
        result["q_loss"] = -float(np.mean(q_values))
        result["actor_loss"] = result["bc_flow_loss"] + model.alpha * result["distill_loss"] + result["q_loss"]
    else:
        result["actor_loss"] = result["bc_flow_loss"]
    return result


def replayed_draws(model, batch_size: int, seed: int) -> dict[str, np.ndarray]:
    """The random draws of one `_losses` call, in the library's order, from the same torch seed."""
    th.manual_seed(seed)
    act_dim = model.policy.flat_action_dim
    if isinstance(model, QC):
        draws = {"target_noise": th.randn(batch_size, model.actor_num_samples, act_dim)}
    else:
        draws = {"target_noise": th.randn(batch_size, act_dim)}
    draws["bc_noise"] = th.randn(batch_size, act_dim)
    draws["bc_times"] = th.rand(batch_size, 1)
    if isinstance(model, QCFQL):
        draws["actor_noise"] = th.randn(batch_size, act_dim)
    return {name: numpy_of(value) for name, value in draws.items()}


@pytest.mark.parametrize(
    "cls, kwargs",
    [
        (QC, {}),
        (QC, {"q_agg": "min"}),
        (QC, {"action_chunking": False}),
        (QCFQL, {"alpha": 3.0}),
        (QCFQL, {"action_chunking": False, "q_agg": "min"}),
    ],
)
def test_losses_match_hand_computation(cls, kwargs):
    model = make_model(cls, **kwargs)
    perturb_target(model)
    np.random.seed(1)
    batch = model.replay_buffer.sample(8)
    assert (batch.valid[:, -1] == 0).any() and (batch.valid[:, -1] == 1).any(), "the batch should mix valid and invalid"
    th.manual_seed(7)
    losses = {name: value.item() for name, value in model._losses(batch).items()}
    expected = hand_losses(model, batch, replayed_draws(model, 8, seed=7))
    for name, value in expected.items():
        assert losses[name] == pytest.approx(value, rel=1e-4, abs=1e-5), name


def test_best_of_n_acts_with_the_argmax_of_the_online_critic():
    model = make_model(QC, q_agg="mean")
    perturb_target(model)
    observations = th.as_tensor(np.random.default_rng(3).normal(size=(5, OBS_DIM)), dtype=th.float32)
    th.manual_seed(11)
    chosen = model.policy.sample_actions(observations)
    th.manual_seed(11)
    noises = numpy_of(th.randn(5, 4, model.policy.flat_action_dim))
    for b in range(5):
        expected = best_of_n(model.policy.flow, model.policy.critic, numpy_of(observations[b]), noises[b], 3, "mean")
        np.testing.assert_allclose(numpy_of(chosen[b]), expected, atol=1e-5)


def parameter_grads(module: th.nn.Module) -> list[th.Tensor | None]:
    return [parameter.grad for parameter in module.parameters()]


@pytest.mark.parametrize("cls", [QC, QCFQL])
def test_gradient_isolation(cls):
    model = make_model(cls)
    policy = model.policy
    np.random.seed(0)
    batch = model.replay_buffer.sample(8)

    # The critic loss trains only the critic: the target action and target critic carry no gradient.
    losses = model._losses(batch)
    losses["critic_loss"].backward()
    assert all(grad is None for grad in parameter_grads(policy.flow))
    assert all(grad is None for grad in parameter_grads(policy.critic_target))
    assert all(grad is not None for grad in parameter_grads(policy.critic))

    # The actor-side loss gives no gradient to the critic; the flow's gradient is that of its BC loss alone
    # (QC: no Q term at all; QC-FQL: distillation and Q reach only the one-step actor).
    for parameter in policy.parameters():
        parameter.grad = None
    th.manual_seed(5)
    losses = model._losses(batch)
    losses["actor_loss"].backward()
    assert all(grad is None for grad in parameter_grads(policy.critic))
    actor_flow_grads = [grad.clone() for grad in parameter_grads(policy.flow)]
    for parameter in policy.parameters():
        parameter.grad = None
    th.manual_seed(5)
    model._losses(batch)["bc_flow_loss"].backward()
    for from_actor, from_bc in zip(actor_flow_grads, parameter_grads(policy.flow), strict=True):
        th.testing.assert_close(from_actor, from_bc)
    if cls is QCFQL:
        assert all(grad is None for grad in parameter_grads(policy.actor))  # BC alone does not reach the actor


def test_target_critic_moves_only_by_polyak_of_pre_step_weights():
    model = make_model(QC, tau=0.1)
    perturb_target(model)
    critic_before = copy.deepcopy(model.policy.critic.state_dict())
    target_before = copy.deepcopy(model.policy.critic_target.state_dict())
    model.train(gradient_steps=1, batch_size=8)
    for name, target_after in model.policy.critic_target.state_dict().items():
        # docs/algorithms.md §3: theta_target <- tau * theta (before the step) + (1 - tau) * theta_target
        th.testing.assert_close(target_after, 0.1 * critic_before[name] + 0.9 * target_before[name])
    changed = [not th.equal(model.policy.critic.state_dict()[name], critic_before[name]) for name in critic_before]
    assert any(changed), "the online critic should have taken a gradient step"


def test_offline_phase_runs_once_before_the_first_env_step_and_counts_no_env_steps():
    model = make_model(QC, offline_gradient_steps=30, learning_starts=20)
    model.offline_log_interval = 7
    offline_done_at_first_action = []
    predict = model.policy.predict

    def spy(*args, **kwargs):
        offline_done_at_first_action.append(model.offline_steps_done)
        return predict(*args, **kwargs)

    model.policy.predict = spy
    model.learn(total_timesteps=50)
    assert offline_done_at_first_action[0] == 30, "the whole offline phase runs before the first env step"
    assert model.offline_steps_done == 30
    assert model.num_timesteps == 50
    # Updates: 30 offline, then one per env step once num_timesteps > learning_starts (steps 21..50).
    assert model._n_updates == 30 + 30
    model.learn(total_timesteps=10, reset_num_timesteps=False)
    assert model.offline_steps_done == 30, "the offline phase runs only once"
    assert model._n_updates == 60 + 10


def test_policy_acts_from_the_first_online_step():
    model = make_model(QC, learning_starts=1000)
    calls = []
    predict_chunk = model.policy._predict_chunk
    model.policy._predict_chunk = lambda observation, deterministic=False: (
        calls.append(len(observation)) or predict_chunk(observation)
    )
    model.learn(total_timesteps=9)
    assert sum(calls) == 3, "9 env steps with chunks of 3 ask the policy for 3 chunks (no random warm-up)"
    assert model._n_updates == 0


def test_pretrain_alone_and_logging(tmp_path):
    model = make_model(QCFQL, offline_gradient_steps=20, tensorboard_log=str(tmp_path))
    del model._logger
    model.offline_log_interval = 10
    model.pretrain(progress_bar=True)
    assert model.offline_steps_done == 20 and model.num_timesteps == 0
    assert list(tmp_path.glob("run_*/events.out.tfevents.*")), "tensorboard events should be written"
    model.pretrain(5)
    assert model.offline_steps_done == 25


def test_logged_training_keys():
    model = make_model(QCFQL)
    model.train(gradient_steps=2, batch_size=8)
    for key in ("critic_loss", "bc_flow_loss", "distill_loss", "q_loss", "q_mean", "target_mean", "actor_loss"):
        assert np.isfinite(model.logger.name_to_value[f"train/{key}"]), key


def test_predict_pops_open_loop_chunks_per_env_and_clears_at_episode_start():
    model = make_model(QC, chunk_size=3)
    policy = model.policy
    counter = iter(range(100))

    def numbered_chunks(observation, deterministic=False):
        # Each chunk holds one number per row, so popped actions tell which chunk and position they came from.
        rows = [np.full((3, ACTION_DIM), next(counter) / 100.0) for _ in range(len(observation))]
        rows = [row + np.arange(3)[:, None] / 1000.0 for row in rows]
        return th.as_tensor(np.stack(rows).reshape(len(observation), -1), dtype=th.float32)

    policy._predict_chunk = numbered_chunks
    observations = np.zeros((2, OBS_DIM), np.float32)
    state = None
    scaled = []
    for step in range(5):
        episode_start = np.array([step == 0, step == 4])
        actions, state = policy.predict(observations, state=state, episode_start=episode_start)
        scaled.append(policy.scale_action(actions)[:, 0])
    scaled = np.round(np.array(scaled), 4)
    # Env 0: chunk 0 (positions 0,1,2), then chunk 2 (0,1). Env 1: chunk 1 (0,1,2), chunk 3 (0), then the
    # episode restarts at step 4: its queue is cleared and chunk 4 starts.
    np.testing.assert_allclose(scaled[:, 0], [0.0, 0.001, 0.002, 0.02, 0.021], atol=1e-4)
    np.testing.assert_allclose(scaled[:, 1], [0.01, 0.011, 0.012, 0.03, 0.04], atol=1e-4)


def test_predict_chunk_shape_and_env_scale():
    model = make_model(QCFQL, chunk_size=3)
    chunks = model.policy.predict_chunk(np.zeros((4, OBS_DIM), np.float32))
    assert chunks.shape == (4, 3, ACTION_DIM)
    assert (chunks >= DriftEnv.action_space.low).all() and (chunks <= DriftEnv.action_space.high).all()


def test_replay_buffer_round_trip_keeps_the_offline_segment(tmp_path):
    model = make_model(QC)
    model.learn(total_timesteps=15)
    model.save_replay_buffer(tmp_path / "buffer.pkl")
    fresh = QC("MlpPolicy", make_env(), policy_kwargs=TINY, chunk_size=3, actor_num_samples=4)
    assert fresh.replay_buffer.offline_size == 0
    fresh.load_replay_buffer(tmp_path / "buffer.pkl")
    assert fresh.replay_buffer.offline_size == model.replay_buffer.offline_size == 6 * EPISODE_LENGTH
    np.testing.assert_array_equal(fresh.replay_buffer.offline_actions, model.replay_buffer.offline_actions)
    assert fresh.replay_buffer.pos == model.replay_buffer.pos == 15


def test_offline_actions_are_scaled_into_the_buffer():
    data = offline_arrays()
    model = make_model(QC, offline_dataset=data)
    low, high = DriftEnv.action_space.low, DriftEnv.action_space.high
    expected = np.clip(2 * (data["actions"] - low) / (high - low) - 1, -1 + 1e-5, 1 - 1e-5)
    np.testing.assert_allclose(model.replay_buffer.offline_actions, expected, atol=1e-6)


@pytest.mark.parametrize("cls", [QC, QCFQL])
def test_same_seed_same_run(cls):
    def run():
        model = make_model(cls, offline_gradient_steps=10, seed=123)
        model.learn(total_timesteps=25)
        return model.policy.state_dict(), model.replay_buffer.actions[:25].copy()

    (first_params, first_actions), (second_params, second_actions) = run(), run()
    np.testing.assert_array_equal(first_actions, second_actions)
    for name, value in first_params.items():
        th.testing.assert_close(second_params[name], value, rtol=0, atol=0)


def test_dataset_that_does_not_fit_the_env_is_refused_before_training():
    data = offline_arrays()
    data["observations"] = np.zeros((len(data["rewards"]), OBS_DIM + 2), np.float32)
    data["next_observations"] = data["observations"]
    with pytest.raises(ValueError, match=r"\(5,\).*\(3,\)"):
        QC("MlpPolicy", make_env(), offline_dataset=data, policy_kwargs=TINY)


def test_episodes_shorter_than_a_chunk_are_refused_before_anything_is_built(monkeypatch):
    built = []
    build_buffer = ChunkReplayBuffer.__init__

    def recording_init(buffer, *args, **kwargs):
        built.append(buffer)
        build_buffer(buffer, *args, **kwargs)

    monkeypatch.setattr(ChunkReplayBuffer, "__init__", recording_init)
    with pytest.raises(ValueError, match=rf"every episode is shorter than chunk_size=13 \(longest: {EPISODE_LENGTH} steps\)"):
        QC("MlpPolicy", make_env(), offline_dataset=offline_arrays(), chunk_size=13, policy_kwargs=TINY)
    assert built == [], "the check runs where the data enters, before the replay buffer and the networks exist"


def test_offline_data_is_checked_against_the_env_once(monkeypatch):
    calls = []

    def counted(check):
        def counted_check(*args):
            calls.append(args)
            return check(*args)

        return counted_check

    # Wherever a qc_sb3 module holds the check (its own, or imported), so that every call is counted once.
    for name, module in list(sys.modules.items()):
        if name.startswith("qc_sb3.") and hasattr(module, "check_transitions_match_spaces"):
            monkeypatch.setattr(module, "check_transitions_match_spaces", counted(module.check_transitions_match_spaces))
    make_model(QC)
    assert len(calls) == 1


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"q_agg": "median"}, "q_agg must be one of"),
        ({"chunk_size": 0}, "chunk_size must be an integer >= 1"),
        ({"flow_steps": 0}, "flow_steps must be >= 1"),
        ({"actor_num_samples": 0}, "actor_num_samples must be >= 1"),
    ],
)
def test_bad_hyperparameters_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        QC("MlpPolicy", make_env(), policy_kwargs=TINY, **kwargs)


def test_online_queue_is_cleared_when_an_episode_ends():
    # Episodes of 12 steps with chunks of 5: 5 + 5 + 2, and the 3 actions left at the episode's end are dropped.
    model = make_model(QC, chunk_size=5, learning_starts=1000)
    calls = []
    predict_chunk = model.policy._predict_chunk
    model.policy._predict_chunk = lambda observation, deterministic=False: (
        calls.append(len(observation)) or predict_chunk(observation)
    )
    model.learn(total_timesteps=2 * EPISODE_LENGTH)
    assert sum(calls) == 6, "two episodes of three chunks each"


class CorruptedEnv(DriftEnv):
    """DriftEnv whose step ``bad_step`` (1-based) returns ``bad_value`` as its reward or first observation entry."""

    def __init__(self, field: str, bad_step: int, bad_value: float):
        self.field, self.bad_step, self.bad_value, self.steps = field, bad_step, bad_value, 0

    def step(self, action):
        observation, reward, terminated, truncated, info = super().step(action)
        self.steps += 1
        if self.steps == self.bad_step:
            if self.field == "reward":
                reward = self.bad_value
            else:
                observation = observation.astype(np.float64)
                observation[0] = self.bad_value
        return observation, reward, terminated, truncated, info


@pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")  # DummyVecEnv's float32 buffers
@pytest.mark.parametrize("field", ["reward", "observation"])
@pytest.mark.parametrize("bad_value", [np.nan, 1e39])
def test_non_finite_env_output_is_refused_naming_the_env_step(field, bad_value):
    # Two envs; env 1 goes bad at its 4th step, which is env step 2 * 4 = 8 (num_timesteps counts both envs).
    env = DummyVecEnv([make_env, lambda: gym.wrappers.TimeLimit(CorruptedEnv(field, 4, bad_value), EPISODE_LENGTH)])
    model = QC(
        "MlpPolicy",
        env,
        offline_dataset=offline_arrays(),
        offline_gradient_steps=0,
        learning_starts=1000,
        batch_size=8,
        chunk_size=3,
        actor_num_samples=2,
        flow_steps=2,
        policy_kwargs=TINY,
        seed=0,
    )
    message = rf"env 1 returned a {field} holding NaN or inf .* at env step 8 \(num_timesteps\)"
    with pytest.raises(ValueError, match=message):
        model.learn(total_timesteps=20)
    assert model.replay_buffer.pos == 3, "the three clean steps of each env are stored, not the bad one"
    assert np.isfinite(model.replay_buffer.rewards).all() and np.isfinite(model.replay_buffer.next_observations).all()


def test_values_beyond_float32_in_the_offline_data_are_refused_at_construction():
    data = offline_arrays()
    data["rewards"] = data["rewards"].astype(np.float64)
    data["rewards"][7] = 1e39  # finite in float64, inf in the float32 buffer
    with pytest.raises(ValueError, match=r"rewards hold NaN or inf \(first at step 7\) as float32"):
        make_model(QC, offline_dataset=data)


@pytest.mark.parametrize("cls", [QC, QCFQL])
def test_nan_loss_stops_training_naming_the_update_and_the_loss(cls, tmp_path):
    model = make_model(cls, offline_gradient_steps=0)
    model.train(gradient_steps=2, batch_size=8)
    # From now on every offline reward is NaN: the critic's TD loss of the next update (update 3) is NaN.
    model.replay_buffer.offline_rewards[:] = np.nan
    with pytest.raises(RuntimeError, match=r"critic_loss.* became NaN or inf at update 3 \(n_updates\).*do not save"):
        model.train(gradient_steps=4, batch_size=8)


def test_nan_parameters_after_finite_losses_stop_training():
    model = make_model(QC, offline_gradient_steps=0)
    model.train(gradient_steps=1, batch_size=8)
    losses = model._losses

    def losses_then_nan_weights(batch):
        # The losses of this update are finite; its optimizer step then sees a NaN gradient-free weight.
        result = losses(batch)
        with th.no_grad():
            next(model.policy.flow.parameters()).fill_(np.nan)
        return result

    model._losses = losses_then_nan_weights
    with pytest.raises(RuntimeError, match=r"parameters became NaN or inf in updates 2\.\.2 \(the losses were finite\)"):
        model.train(gradient_steps=1, batch_size=8)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"buffer_size": 0}, "buffer_size must be an integer >= 1, got 0"),
        ({"buffer_size": -5}, "buffer_size must be an integer >= 1, got -5"),
        ({"batch_size": 0}, "batch_size must be an integer >= 1, got 0"),
        ({"batch_size": -16}, "batch_size must be an integer >= 1, got -16"),
        ({"tau": 0.0}, r"tau must be a number in \(0, 1\], got 0.0"),
        ({"tau": 1.5}, r"tau must be a number in \(0, 1\], got 1.5"),
        ({"tau": -0.1}, r"tau must be a number in \(0, 1\], got -0.1"),
    ],
)
@pytest.mark.parametrize("cls", [QC, QCFQL])
def test_bad_buffer_batch_and_tau_are_refused_at_construction(cls, kwargs, message):
    with pytest.raises(ValueError, match=message):
        cls("MlpPolicy", make_env(), policy_kwargs=TINY, **kwargs)


def test_tau_of_one_is_accepted():
    assert make_model(QC, tau=1.0).tau == 1.0


@pytest.mark.parametrize("cls", [QC, QCFQL])
def test_batch_larger_than_the_offline_data_warns(cls):
    # offline_arrays() holds 6 episodes of 12 steps: 72 steps.
    with pytest.warns(UserWarning, match=r"batch_size=100 is larger than the offline dataset \(72 steps\)") as record:
        make_model(cls, batch_size=100)
    assert record[0].filename == __file__, "the warning points at the user's code"


def test_load_of_a_truncated_zip_says_so(tmp_path):
    make_model(QC).save(tmp_path / "model.zip")
    content = (tmp_path / "model.zip").read_bytes()
    (tmp_path / "cut.zip").write_bytes(content[: len(content) // 2])
    with pytest.raises(ValueError, match="is not a complete qc_sb3 model file"):
        QC.load(tmp_path / "cut.zip")


def test_load_of_a_zip_with_a_damaged_member_says_so(tmp_path):
    make_model(QC).save(tmp_path / "model.zip")
    with zipfile.ZipFile(tmp_path / "model.zip") as source, zipfile.ZipFile(tmp_path / "damaged.zip", "w") as target:
        for item in source.infolist():
            target.writestr(item, source.read(item))
    content = bytearray((tmp_path / "damaged.zip").read_bytes())
    # Flip one byte inside the stored policy.pth member: its CRC no longer matches.
    with zipfile.ZipFile(tmp_path / "damaged.zip") as archive:
        member = archive.getinfo("policy.pth")
    offset = member.header_offset + 30 + len(member.filename) + len(member.extra) + member.compress_size // 2
    content[offset] ^= 0xFF
    (tmp_path / "damaged.zip").write_bytes(bytes(content))
    with pytest.raises(ValueError, match=r"not a complete qc_sb3 model file.*policy.pth"):
        QC.load(tmp_path / "damaged.zip")


@pytest.mark.parametrize(
    "save, loader, found",
    [
        (
            lambda path: make_model(QCFQL).save(path),
            QC,
            r"a model of QCFQL \(policy class qc_sb3.qc_fql.policies.QCFQLPolicy\)",
        ),
        (lambda path: make_model(QC).save(path), QCFQL, r"a model of QC \(policy class qc_sb3.qc.policies.QCPolicy\)"),
        (
            lambda path: SAC("MlpPolicy", make_env(), policy_kwargs=dict(TINY), buffer_size=10).save(path),
            QC,
            r"a model of SAC \(policy class stable_baselines3.sac.policies.SACPolicy\)",
        ),
    ],
)
def test_load_of_another_algorithms_zip_names_it(tmp_path, save, loader, found):
    save(tmp_path / "model.zip")
    with pytest.raises(ValueError, match=rf"{found}, not of {loader.__name__}"):
        loader.load(tmp_path / "model.zip")


def test_load_from_a_file_object_checks_it_and_reads_it_from_the_start(tmp_path):
    model = make_model(QC)
    model.save(tmp_path / "model.zip")
    with open(tmp_path / "model.zip", "rb") as file:
        loaded = QC.load(file)
    assert loaded.chunk_size == model.chunk_size


class NaNResetEnv(DriftEnv):
    """DriftEnv whose reset observation holds a NaN."""

    def reset(self, *, seed=None, options=None):
        state, info = super().reset(seed=seed, options=options)
        state[1] = np.nan
        return state, info


def test_non_finite_reset_observation_is_refused_before_the_first_step():
    model = make_model(QC)
    model.set_env(DummyVecEnv([lambda: gym.wrappers.TimeLimit(NaNResetEnv(), EPISODE_LENGTH)]))
    with pytest.raises(ValueError, match=r"env 0 returned a reset observation holding NaN or inf .* at env step 1"):
        model.learn(total_timesteps=5)
    assert model.replay_buffer.pos == 0


def spy_on_train_reads(model) -> tuple[list[float], list[tuple[int, float]]]:
    """Record each update's critic loss (read at once, here) and each read of the online losses into the logger."""
    critic_losses: list[float] = []
    reads: list[tuple[int, float]] = []
    gradient_step, record = model._gradient_step, model._record_checked_means

    def gradient_step_spy(batch_size):
        losses = gradient_step(batch_size)
        critic_losses.append(float(losses["critic_loss"]))
        return losses

    def record_spy(prefix, step_losses):
        record(prefix, step_losses)
        if prefix == "train":
            reads.append((model._n_updates, model.logger.name_to_value["train/critic_loss"]))

    model._gradient_step, model._record_checked_means = gradient_step_spy, record_spy
    return critic_losses, reads


def test_losses_left_on_an_accelerator_are_read_at_log_dumps_averaged_over_every_update():
    # On an accelerator train() does not read its losses (a host synchronisation per env step): set as it is there.
    model = make_model(QC, learning_starts=5)
    model._read_losses_every_train = False
    critic_losses, reads = spy_on_train_reads(model)
    model.learn(total_timesteps=3 * EPISODE_LENGTH + 4, log_interval=1)
    # Updates 1..N, one per env step after learning_starts; N = 3 * EPISODE_LENGTH + 4 - 5.
    assert model._n_updates == len(critic_losses) == 3 * EPISODE_LENGTH - 1
    # One read per episode end (log_interval=1 dumps there) and one before learn() returns, not one per update. SB3
    # dumps inside collect_rollouts, before the update of the episode's last env step: at env step 12, the updates
    # of env steps 6..11 (6 updates) have run.
    episode_ends = [k * EPISODE_LENGTH - 6 for k in (1, 2, 3)]
    assert [n_updates for n_updates, _ in reads] == [*episode_ends, 3 * EPISODE_LENGTH - 1]
    previous = 0
    for n_updates, logged_mean in reads:
        assert logged_mean == pytest.approx(np.mean(critic_losses[previous:n_updates]), rel=1e-5)
        previous = n_updates


def test_losses_are_read_after_every_train_call_on_the_cpu():
    model = make_model(QC, learning_starts=5)
    assert model._read_losses_every_train, "on the CPU a read costs nothing: SB3's behaviour, a record per train()"
    critic_losses, reads = spy_on_train_reads(model)
    model.learn(total_timesteps=12)
    assert [n_updates for n_updates, _ in reads] == list(range(1, 8))
    assert [logged for _, logged in reads] == pytest.approx(critic_losses, rel=1e-6)


def test_a_nan_loss_left_on_an_accelerator_stops_learn_before_it_returns():
    model = make_model(QC, learning_starts=5)
    model._read_losses_every_train = False
    losses = model._losses
    calls = iter(range(1, 10**6))

    def nan_from_update_4(batch):
        result = losses(batch)
        if next(calls) >= 4:
            result["critic_loss"] = result["critic_loss"] * np.nan
        return result

    model._losses = nan_from_update_4
    with pytest.raises(RuntimeError, match=r"critic_loss.* became NaN or inf at update 4 \(n_updates\)"):
        model.learn(total_timesteps=10)
