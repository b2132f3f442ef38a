"""RLPD, RLPD-AC and QC-RLPD: losses against hand computations, gradient isolation, 50/50 batches, random warm-up,
seeding and a short learning run. What every algorithm must do (save/load, VecEnv, predict, evaluate_policy,
set_env) is in test_contract.py."""

from __future__ import annotations

import copy
import itertools

import numpy as np
import pytest
import torch as th
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.logger import configure
from stable_baselines3.common.monitor import Monitor

from qc_sb3 import RLPD
from qc_sb3.accel import onednn_matmul
from qc_sb3.common.evaluation import evaluate_success

from reference_math import critic_values, numpy_of, sac_actor_mean_log_std, squashed_log_prob
from test_qc import ACTION_DIM, EPISODE_LENGTH, OBS_DIM, make_env, offline_arrays
from toy_tasks import PointReachEnv, scripted_demonstrations

TINY = {"net_arch": [16, 16]}
DATA_ACTION_CLIP = float(np.float32(1 - 1e-5))  # the clip bound as the library's float32 tensors hold it


def make_model(**kwargs) -> RLPD:
    defaults = {
        "offline_dataset": offline_arrays(),
        "learning_starts": 10,
        "batch_size": 8,
        "chunk_size": 3,
        "n_critics": 3,
        "gamma": 0.9,
        "policy_kwargs": TINY,
        "seed": 0,
    }
    model = RLPD("MlpPolicy", make_env(), **{**defaults, **kwargs})
    model.set_logger(configure(None, []))
    return model


def hand_losses(model: RLPD, batch, target_noise: np.ndarray, actor_noise: np.ndarray) -> dict[str, float]:
    """docs/algorithms.md §4 for one batch, sample by sample, with the noises the library drew (replayed from the seed)."""
    policy = model.policy
    h, gamma, alpha = model.chunk_size, model.gamma, float(policy.temperature().item())
    obs, next_obs = numpy_of(batch.observations), numpy_of(batch.next_observations)
    rewards, masks, valid = numpy_of(batch.rewards), numpy_of(batch.masks), numpy_of(batch.valid)
    batch_size = len(obs)
    actions = numpy_of(batch.actions).reshape(batch_size, -1)
    targets, critic_terms, log_probs, actor_terms, data_log_probs = [], [], [], [], []
    for b in range(batch_size):
        next_mean, next_log_std = sac_actor_mean_log_std(policy.actor, next_obs[b])
        next_action = np.tanh(next_mean + np.exp(next_log_std) * target_noise[b])
        # y = R[-1] + gamma^h M[-1] mean over all K of Q_target, no entropy term
        target = (
            rewards[b, -1] + gamma**h * masks[b, -1] * critic_values(policy.critic_target, next_obs[b], next_action).mean()
        )
        targets.append(target)
        critic_terms.extend((critic_values(policy.critic, obs[b], actions[b]) - target) ** 2 * valid[b, -1])

        mean, log_std = sac_actor_mean_log_std(policy.actor, obs[b])
        u = mean + np.exp(log_std) * actor_noise[b]
        log_prob = squashed_log_prob(mean, log_std, u)
        log_probs.append(log_prob)
        actor_terms.append(alpha * log_prob - critic_values(policy.critic, obs[b], np.tanh(u)).mean())

        data_action = np.clip(actions[b], -DATA_ACTION_CLIP, DATA_ACTION_CLIP)
        data_log_probs.append(squashed_log_prob(mean, log_std, np.arctanh(data_action)))
    entropy = -float(np.mean(log_probs))
    return {
        "critic_loss": float(np.mean(critic_terms)),
        "target_mean": float(np.mean(targets)),
        "actor_loss": float(np.mean(actor_terms)),
        "alpha_loss": alpha * (entropy - model.target_entropy),
        "bc_loss": -float(np.mean(data_log_probs)),
        "entropy": entropy,
        "ent_coef": alpha,
    }


@pytest.mark.parametrize(
    "kwargs",
    [{"chunk_size": 1, "n_critics": 10}, {"chunk_size": 3, "bc_alpha": 0.01}],
    ids=["RLPD-K10", "QC-RLPD-h3"],
)
def test_losses_match_hand_computation(kwargs):
    model = make_model(**kwargs)
    policy = model.policy
    with th.no_grad():
        for parameter in policy.critic_target.parameters():  # the target differs from the online critic
            parameter.add_(0.3 * th.randn_like(parameter))
        for parameter in policy.critic.norm_weights:  # LayerNorm scales away from their initial ones
            parameter.add_(0.2 * th.randn_like(parameter))
        policy.temperature.log_ent_coef.fill_(np.log(0.37))
    assert model.target_entropy == -0.5 * model.chunk_size * ACTION_DIM
    np.random.seed(1)
    batch = model.replay_buffer.sample(8)
    # Saturated actions (a tanh policy's can round to ±1 in float32) exercise the BC term's clip.
    batch = batch._replace(
        actions=batch.actions.clone().index_fill_(0, th.tensor([1]), 1.0).index_fill_(0, th.tensor([2]), -1.0)
    )
    if model.chunk_size > 1:
        assert (batch.valid[:, -1] == 0).any() and (batch.valid[:, -1] == 1).any(), "the batch should mix both"
    th.manual_seed(7)
    losses = {name: value.item() for name, value in model._losses(batch).items()}
    th.manual_seed(7)
    flat_dim = model.chunk_size * ACTION_DIM
    target_noise, actor_noise = numpy_of(th.randn(8, flat_dim)), numpy_of(th.randn(8, flat_dim))
    for name, value in hand_losses(model, batch, target_noise, actor_noise).items():
        assert losses[name] == pytest.approx(value, rel=1e-4, abs=1e-5), name


def test_critic_init_and_default_configuration():
    model = RLPD("MlpPolicy", make_env(), offline_dataset=offline_arrays())
    policy = model.policy
    assert model.chunk_size == 1 and model.n_critics == 10 and model.learning_starts == 5000
    assert model.offline_gradient_steps == 0 and model.replay_buffer.offline_fraction == 0.5
    assert model.target_entropy == -0.5 * ACTION_DIM and policy.temperature().item() == 1.0
    assert model.tau == 0.005 and model.gradient_steps == 1 and model.train_freq.frequency == 1
    dims = [OBS_DIM + ACTION_DIM, 512, 512, 512, 512, 1]
    assert [tuple(weight.shape) for weight in policy.critic.weights] == [(10, i, o) for i, o in itertools.pairwise(dims)]
    for weight, bias in zip(policy.critic.weights, policy.critic.biases, strict=True):
        bound = np.sqrt(6 / (weight.shape[1] + weight.shape[2]))  # Xavier-uniform per member
        assert weight.abs().max() <= bound and weight.abs().max() > 0.9 * bound and (bias == 0).all()
    for name, value in policy.critic.state_dict().items():
        assert th.equal(policy.critic_target.state_dict()[name], value), name
    assert policy.actor.action_space.shape == (ACTION_DIM,)
    assert make_model(chunk_size=5).policy.actor.action_space.shape == (5 * ACTION_DIM,)


def test_actor_is_the_reference_mlp_with_xavier_uniform_weights_and_zero_biases():
    # The reference's actor: MLP(4 x 512, ReLU after every hidden layer, no LayerNorm), then Dense mean and Dense
    # log-std heads, every layer Xavier-uniform with zero biases.
    actor = RLPD("MlpPolicy", make_env(), offline_dataset=offline_arrays(), chunk_size=5).policy.actor
    # (Linear layers whose matmuls run on oneDNN on CPU: nn.Linear with the same parameters, qc_sb3.accel.onednn_matmul)
    assert [type(layer) for layer in actor.latent_pi] == [onednn_matmul.Linear, th.nn.ReLU] * 4
    layers = [layer for layer in actor.latent_pi if isinstance(layer, th.nn.Linear)] + [actor.mu, actor.log_std]
    flat_chunk = 5 * ACTION_DIM
    assert [(layer.in_features, layer.out_features) for layer in layers] == [
        (OBS_DIM, 512),
        (512, 512),
        (512, 512),
        (512, 512),
        (512, flat_chunk),
        (512, flat_chunk),
    ]
    for layer in layers:
        weight = numpy_of(layer.weight)
        bound = np.sqrt(6 / (layer.in_features + layer.out_features))
        assert np.abs(weight).max() <= bound and np.abs(weight).max() > 0.95 * bound
        # U(-bound, bound) has standard deviation bound / sqrt(3); PyTorch's default init has bound 1 / sqrt(fan_in).
        assert weight.std() == pytest.approx(bound / np.sqrt(3), rel=0.1)
        assert (numpy_of(layer.bias) == 0).all()


@pytest.mark.parametrize("rows", [3, onednn_matmul.MIN_ROWS + 5])
def test_a_stochastic_decision_is_tanh_of_mean_plus_std_times_the_next_standard_normal_draw(rows):
    # docs/algorithms.md §4: a = tanh(mu(s) + std(s) * eps), eps ~ N(0, I), eps the generator's next draw; the SAC
    # actor's mean and clipped log-std computed by hand (on the BLAS below MIN_ROWS rows, on oneDNN from it).
    policy = make_model(chunk_size=2).policy
    generator = th.Generator().manual_seed(4)
    observations = 2.0 * th.randn(rows, OBS_DIM, generator=generator)
    with th.no_grad():
        for parameter in policy.actor.parameters():
            parameter.normal_(0.0, 0.3, generator=generator)
        th.manual_seed(11)
        chunks = policy._predict_chunk(observations)
    th.manual_seed(11)
    eps = numpy_of(th.randn(rows, 2 * ACTION_DIM)).astype(np.float64)
    for row, observation in enumerate(numpy_of(observations).astype(np.float64)):
        mean, log_std = sac_actor_mean_log_std(policy.actor, observation)
        np.testing.assert_allclose(numpy_of(chunks[row]), np.tanh(mean + np.exp(log_std) * eps[row]), atol=2e-5)


def test_log_prob_is_the_exact_tanh_change_of_variables_even_when_saturated():
    model = make_model(chunk_size=2)
    distribution = model.policy.action_distribution(th.zeros(1, OBS_DIM))
    mean = np.array([0.3, -0.2, 1.0, 0.0, -1.5, 2.0])
    log_std = np.array([-0.5, 0.0, 0.7, -2.0, 1.0, 0.2])
    distribution = distribution.proba_distribution(
        th.tensor(mean[None], dtype=th.float32), th.tensor(log_std[None], dtype=th.float32)
    )
    for u in ([0.1, -0.4, 2.0, 0.0, -1.0, 3.0], [12.0, -11.0, 15.0, -20.0, 10.5, 0.3]):
        u = np.array(u)
        # Saturated u: tanh(u) rounds to +-1 in float32, where SB3's log(1 - a^2 + 1e-6) is floored at log(1e-6).
        gaussian_actions = th.tensor(u[None], dtype=th.float32)
        log_prob = distribution.log_prob(th.tanh(gaussian_actions), gaussian_actions)
        assert log_prob.item() == pytest.approx(squashed_log_prob(mean, log_std, u), rel=1e-5)
    # Data actions (no pre-squash value): u = atanh(a), as for QC-RLPD's clipped batch actions.
    actions = np.array([DATA_ACTION_CLIP, -DATA_ACTION_CLIP, 0.5, -0.9, 0.0, 0.99])
    log_prob = distribution.log_prob(th.tensor(actions[None], dtype=th.float32))
    assert log_prob.item() == pytest.approx(squashed_log_prob(mean, log_std, np.arctanh(actions)), rel=1e-5)


def parameter_grads(module: th.nn.Module) -> list[th.Tensor | None]:
    return [parameter.grad for parameter in module.parameters()]


@pytest.mark.parametrize(
    "loss_name, trained",
    [("critic_loss", "critic"), ("actor_loss", "actor"), ("alpha_loss", "temperature"), ("bc_loss", "actor")],
)
def test_gradient_isolation(loss_name, trained):
    model = make_model(bc_alpha=0.01)
    policy = model.policy
    np.random.seed(0)
    model._losses(model.replay_buffer.sample(8))[loss_name].backward()
    for module in ("actor", "critic", "critic_target", "temperature"):
        grads = parameter_grads(getattr(policy, module))
        if module == trained:
            assert all(grad is not None for grad in grads), module
        else:
            assert all(grad is None for grad in grads), f"{loss_name} gives no gradient to the {module}"


def test_one_update_steps_every_optimizer_and_the_target_moves_only_by_polyak_of_pre_step_weights():
    model = make_model(tau=0.1)
    policy = model.policy
    with th.no_grad():
        for parameter in policy.critic_target.parameters():
            parameter.add_(0.3 * th.randn_like(parameter))
    before = {name: copy.deepcopy(getattr(policy, name).state_dict()) for name in ("critic", "critic_target", "actor")}
    log_alpha_before = policy.temperature.log_ent_coef.item()
    model.train(gradient_steps=1, batch_size=8)
    for name, target_after in policy.critic_target.state_dict().items():
        expected = 0.1 * before["critic"][name] + 0.9 * before["critic_target"][name]
        th.testing.assert_close(target_after, expected)
    for module in ("critic", "actor"):
        state = getattr(policy, module).state_dict()
        assert any(not th.equal(state[name], before[module][name]) for name in state), module
    assert policy.temperature.log_ent_coef.item() != log_alpha_before
    for key in ("critic_loss", "actor_loss", "alpha_loss", "bc_loss", "ent_coef", "entropy", "q_mean", "target_mean"):
        assert np.isfinite(model.logger.name_to_value[f"train/{key}"]), key


@pytest.mark.parametrize("offline_fraction, expected_offline", [(None, 4), (0.25, 2)])
def test_batches_are_split_between_offline_and_online_windows(offline_fraction, expected_offline):
    data = offline_arrays()
    data["observations"][:, 0] = 1000.0  # a marker no online observation of DriftEnv reaches
    kwargs = {} if offline_fraction is None else {"replay_buffer_kwargs": {"offline_fraction": offline_fraction}}
    model = make_model(offline_dataset=data, **kwargs)
    offline_rows = []
    sample = model.replay_buffer.sample

    def spy(*args, **kwargs):
        batch = sample(*args, **kwargs)
        offline_rows.append(int((batch.observations[:, 0] == 1000.0).sum()))
        return batch

    model.replay_buffer.sample = spy
    model.learn(total_timesteps=30)
    assert offline_rows == [expected_offline] * 20, "every update's batch has the fixed offline share"


def test_warm_up_takes_uniform_random_primitive_actions_then_the_policy_executes_chunks():
    model = make_model(chunk_size=3, learning_starts=300)
    chunks, called_at = [], []
    predict_chunk = model.policy._predict_chunk

    def spy(observation, deterministic=False):
        called_at.append(model.num_timesteps)
        chunks.append(predict_chunk(observation))
        return chunks[-1]

    model.policy._predict_chunk = spy
    model.learn(total_timesteps=309)
    # The policy is first asked at step 300, with an empty queue; it then runs whole chunks open-loop, asking again
    # after 3 steps or when an episode has ended (DriftEnv may terminate).
    episode_ended = model.replay_buffer.dones[:309, 0].astype(bool)
    expected_calls, next_call = [], 300
    for step in range(300, 309):
        if step == next_call or episode_ended[step - 1]:
            expected_calls.append(step)
            next_call = step + 3
    assert called_at == expected_calls
    buffer_actions = model.replay_buffer.actions[:309, 0]
    for step in range(300, 309):
        call = max(i for i, start in enumerate(expected_calls) if start <= step)
        position = step - expected_calls[call]
        chunk = chunks[call].reshape(3, ACTION_DIM).numpy()
        np.testing.assert_allclose(buffer_actions[step], chunk[position], atol=1e-6)
    # One fresh uniform action per step over the whole (asymmetric) action box, in the buffer's [-1, 1] scale.
    warm_up = buffer_actions[:300]
    assert len(np.unique(warm_up[:, 0])) == 300
    for dim in range(ACTION_DIM):
        counts = np.histogram(warm_up[:, dim], bins=4, range=(-1, 1))[0]
        assert (counts >= 50).all() and (counts <= 100).all(), counts
    assert model._n_updates == 9, "updates start after learning_starts"


def test_replay_buffer_round_trip_keeps_the_offline_segment(tmp_path):
    model = make_model()
    model.learn(total_timesteps=15)
    model.save_replay_buffer(tmp_path / "buffer.pkl")
    fresh = RLPD("MlpPolicy", make_env(), policy_kwargs=TINY, chunk_size=3, n_critics=2)
    fresh.load_replay_buffer(tmp_path / "buffer.pkl")
    assert fresh.replay_buffer.offline_size == 6 * EPISODE_LENGTH and fresh.replay_buffer.pos == 15
    assert fresh.replay_buffer.offline_fraction == 0.5
    np.testing.assert_array_equal(fresh.replay_buffer.actions[:15], model.replay_buffer.actions[:15])


def test_two_envs_warm_up_with_their_own_random_actions_and_one_update_per_vec_env_step():
    env = make_vec_env(make_env, n_envs=2, seed=0)
    model = RLPD(
        "MlpPolicy",
        env,
        offline_dataset=offline_arrays(),
        learning_starts=10,
        batch_size=8,
        chunk_size=3,
        n_critics=2,
        policy_kwargs=TINY,
        seed=0,
    )
    model.learn(total_timesteps=40)
    # Updates follow the vec env steps past learning_starts = 10: num_timesteps 12, 14, ..., 40.
    assert model._n_updates == 15
    warm_up = model.replay_buffer.actions[:5]
    assert not np.allclose(warm_up[:, 0], warm_up[:, 1]), "each env gets its own random actions"


def test_same_seed_same_run():
    def run():
        model = make_model(seed=123, bc_alpha=0.01)
        model.learn(total_timesteps=25)
        return model.policy.state_dict(), model.replay_buffer.actions[:25].copy()

    (first_params, first_actions), (second_params, second_actions) = run(), run()
    np.testing.assert_array_equal(first_actions, second_actions)
    for name, value in first_params.items():
        th.testing.assert_close(second_params[name], value, rtol=0, atol=0)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"n_critics": 0}, "n_critics must be >= 1, got 0"),
        ({"bc_alpha": -0.1}, "bc_alpha must be >= 0, got -0.1"),
        ({"initial_ent_coef": 0.0}, "initial_ent_coef must be > 0, got 0.0"),
        ({"target_entropy": "max"}, "target_entropy must be a number or 'auto', got 'max'"),
        ({"chunk_size": 0}, "chunk_size must be an integer >= 1"),
    ],
)
def test_bad_hyperparameters_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        RLPD("MlpPolicy", make_env(), policy_kwargs=TINY, **kwargs)


@pytest.fixture
def one_torch_thread():
    """Train on one thread: with networks this small, more threads only contend for the cores."""
    n_threads = th.get_num_threads()
    th.set_num_threads(1)
    yield
    th.set_num_threads(n_threads)


@pytest.mark.usefixtures("one_torch_thread")
def test_rlpd_ac_learns_the_reaching_task_from_demonstrations_and_online_data():
    # A uniformly random policy practically never reaches the goal (test_learning.test_random_policy_fails).
    seed = 0
    env = Monitor(PointReachEnv())
    env.reset(seed=seed)
    model = RLPD(
        "MlpPolicy",
        env,
        offline_dataset=scripted_demonstrations(40, noise=0.5, seed=seed, goal_fraction=1.0),
        chunk_size=5,
        learning_rate=1e-3,
        batch_size=64,
        learning_starts=200,
        policy_kwargs={"net_arch": [64, 64]},
        seed=seed,
        device="cpu",
    )
    model.learn(total_timesteps=2000)
    assert model.num_timesteps == 2000 and model._n_updates == 1800 and model.offline_steps_done == 0
    eval_env = Monitor(PointReachEnv())
    eval_env.reset(seed=seed + 1000)
    assert evaluate_success(model, eval_env, 30)["success"] >= 0.5


def test_tensorboard_events_are_written(tmp_path):
    model = RLPD(
        "MlpPolicy",
        make_env(),
        offline_dataset=offline_arrays(),
        learning_starts=5,
        batch_size=8,
        n_critics=2,
        policy_kwargs=TINY,
        seed=0,
        tensorboard_log=str(tmp_path),
    )
    model.learn(total_timesteps=20)
    assert list(tmp_path.glob("run_*/events.out.tfevents.*")), "tensorboard events should be written"


def test_nan_loss_stops_training_naming_the_update():
    model = make_model()
    model.train(gradient_steps=1, batch_size=model.batch_size)
    # Every offline reward NaN from now on: the critic's TD loss of update 2 is NaN.
    model.replay_buffer.offline_rewards[:] = np.nan
    # One update per call: with NaN weights, the actor's Normal of a following update would refuse its NaN mean first.
    with pytest.raises(RuntimeError, match=r"critic_loss.* became NaN or inf at update 2 \(n_updates\)"):
        model.train(gradient_steps=1, batch_size=model.batch_size)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"buffer_size": 0}, "buffer_size must be an integer >= 1, got 0"),
        ({"batch_size": -16}, "batch_size must be an integer >= 1, got -16"),
        ({"tau": 2.0}, r"tau must be a number in \(0, 1\], got 2.0"),
    ],
)
def test_bad_buffer_batch_and_tau_are_refused_at_construction(kwargs, message):
    with pytest.raises(ValueError, match=message):
        make_model(**kwargs)
