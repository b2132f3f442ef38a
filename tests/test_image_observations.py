"""Image observations as SB3 has them: CnnPolicy, images scaled once, and channels-last offline data read channels first."""

from __future__ import annotations

import numpy as np
import pytest
import torch as th
from gymnasium import spaces
from stable_baselines3.common.logger import configure
from stable_baselines3.common.torch_layers import NatureCNN
from stable_baselines3.common.vec_env import DummyVecEnv, VecTransposeImage

from qc_sb3 import QC, QCFQL, RLPD, ImpalaSmallExtractor
from qc_sb3.common.buffers import ChunkReplayBuffer
from qc_sb3.common.datasets import load_offline_transitions
from qc_sb3.common.offline_transitions import add_transitions_to_buffer, with_channels_first_images

from image_tasks import IMAGE_OBSERVATIONS, IMAGE_SIZE, image_offline_arrays, make_image_env

TINY_CNN = {"net_arch": [8], "features_extractor_kwargs": {"features_dim": 8}}
ALGORITHMS = {
    QC: {"actor_num_samples": 2, "flow_steps": 2, "offline_gradient_steps": 0},
    QCFQL: {"flow_steps": 2, "offline_gradient_steps": 0},
    RLPD: {"n_critics": 2},
}


def make_model(cls, **kwargs):
    defaults = {
        "offline_dataset": image_offline_arrays(n_episodes=2),
        "buffer_size": 50,
        "batch_size": 4,
        "learning_starts": 2,
        "chunk_size": 2,
        "policy_kwargs": TINY_CNN,
        "seed": 0,
        **ALGORITHMS[cls],
    }
    model = cls("CnnPolicy", make_image_env(), **{**defaults, **kwargs})
    model.set_logger(configure(None, []))
    return model


@pytest.mark.parametrize("cls", ALGORITHMS)
def test_cnn_policy_is_sb3s_nature_cnn_with_a_critic_encoder_of_its_own(cls):
    policy = make_model(cls).policy
    assert type(policy) is cls.policy_aliases["CnnPolicy"] and type(policy).__name__ == "CnnPolicy"
    # SAC's CnnPolicy: NatureCNN, share_features_extractor=False (the critic trains an encoder of its own).
    assert isinstance(policy.features_extractor, NatureCNN) and isinstance(policy.critic_features_extractor, NatureCNN)
    assert policy.critic_features_extractor is not policy.features_extractor and not policy.share_features_extractor
    assert policy.observation_space.shape == (3, IMAGE_SIZE, IMAGE_SIZE), "read channels first (VecTransposeImage)"
    shared = make_model(cls, policy_kwargs={**TINY_CNN, "share_features_extractor": True}).policy
    assert shared.critic_features_extractor is shared.features_extractor
    impala = make_model(cls, policy_kwargs={**TINY_CNN, "features_extractor_class": ImpalaSmallExtractor}).policy
    assert isinstance(impala.critic_features_extractor, ImpalaSmallExtractor)
    action, _ = make_model(cls).predict(IMAGE_OBSERVATIONS[0], episode_start=np.ones(1, bool))
    assert action.shape == (2,)


class InputRecorder(NatureCNN):
    """NatureCNN that keeps the last input it was given."""

    def forward(self, observations: th.Tensor) -> th.Tensor:
        self.last_input = observations
        return super().forward(observations)


@pytest.mark.parametrize("normalize_images", [True, False])
def test_uint8_images_are_divided_by_255_once_where_normalize_images_says(normalize_images):
    policy_kwargs = {**TINY_CNN, "features_extractor_class": InputRecorder, "normalize_images": normalize_images}
    model = make_model(QC, policy_kwargs=policy_kwargs)
    batch = model.replay_buffer.sample(4)
    assert int(batch.observations.max()) == 255, "pixel values as stored, 0 to 255"
    model.policy.features(batch.observations)
    seen = model.policy.features_extractor.last_input
    scale = 255.0 if normalize_images else 1.0
    th.testing.assert_close(seen, batch.observations.float() / scale, rtol=0, atol=0)


def test_channels_last_offline_images_are_transposed_as_vec_transpose_image_transposes_the_envs():
    arrays = image_offline_arrays(n_episodes=2)
    assert arrays["observations"].shape[1:] == (IMAGE_SIZE, IMAGE_SIZE, 3), "recorded as the env gives them"
    model = make_model(QC, offline_dataset=arrays)
    buffer = model.replay_buffer
    # What SB3's wrapper makes of each recorded image, the env's own way of becoming channels first.
    env = VecTransposeImage(DummyVecEnv([make_image_env]))
    np.testing.assert_array_equal(buffer.offline_observations, env.transpose_image(arrays["observations"]))
    every_step = np.arange(buffer.offline_size)
    next_observations = buffer._offline_next_frames(every_step)  # the image buffer keeps each frame once
    np.testing.assert_array_equal(next_observations, env.transpose_image(arrays["next_observations"]))
    # Channels-first data is taken as it is.
    channels_first = {
        **arrays,
        "observations": arrays["observations"].transpose(0, 3, 1, 2),
        "next_observations": arrays["next_observations"].transpose(0, 3, 1, 2),
    }
    model = make_model(QC, offline_dataset=channels_first)
    np.testing.assert_array_equal(model.replay_buffer.offline_observations, buffer.offline_observations)


def test_a_loaded_model_reads_channels_last_offline_images_without_its_env(tmp_path):
    model = make_model(QCFQL)
    model.save(tmp_path / "model.zip")
    arrays = image_offline_arrays(n_episodes=2, seed=1)
    loaded = QCFQL.load(tmp_path / "model.zip", offline_dataset=arrays)  # no env: the saved space says channels first
    np.testing.assert_array_equal(loaded.replay_buffer.offline_observations, arrays["observations"].transpose(0, 3, 1, 2))


def test_add_transitions_to_buffer_transposes_channels_last_images_too():
    space = VecTransposeImage(DummyVecEnv([make_image_env])).observation_space
    env = make_image_env()
    buffer = ChunkReplayBuffer(10, space, env.action_space, chunk_size=2)
    data = load_offline_transitions(image_offline_arrays(n_episodes=1))
    add_transitions_to_buffer(buffer, data, env.action_space)
    np.testing.assert_array_equal(buffer.offline_observations, data.observations.transpose(0, 3, 1, 2))


@pytest.mark.parametrize(
    "shape",
    [(IMAGE_SIZE, IMAGE_SIZE - 1, 3), (IMAGE_SIZE, IMAGE_SIZE, 4), (3, IMAGE_SIZE, IMAGE_SIZE - 1)],
    ids=["other width", "four channels", "channels first, other width"],
)
def test_images_that_fit_neither_layout_get_the_shape_error(shape):
    arrays = image_offline_arrays(n_episodes=2)
    n = len(arrays["rewards"])
    images = np.zeros((n, *shape), np.uint8)
    with pytest.raises(ValueError, match=rf"observations have shape \({shape[0]}, {shape[1]}, {shape[2]}\) per step but"):
        make_model(QC, offline_dataset={**arrays, "observations": images, "next_observations": images})


def test_only_an_image_space_sb3_would_have_transposed_is_a_reason_to_transpose():
    data = load_offline_transitions(image_offline_arrays(n_episodes=1))
    float_space = spaces.Box(0.0, 1.0, (3, IMAGE_SIZE, IMAGE_SIZE), np.float32)  # not an image space for SB3
    assert with_channels_first_images(data, float_space) is data
    flat_space = spaces.Box(0, 255, (IMAGE_SIZE * IMAGE_SIZE * 3,), np.uint8)
    assert with_channels_first_images(data, flat_space) is data
