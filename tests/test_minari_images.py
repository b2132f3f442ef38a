"""Minari datasets of uint8 images: a JPEG-encoded (lossy) one is warned about when read, a lossless one is not."""

from __future__ import annotations

import warnings

import minari
import numpy as np
import pytest
from gymnasium import spaces
from minari.data_collector import EpisodeBuffer

from qc_sb3.common.datasets import load_offline_transitions

IMAGE_SPACE = spaces.Box(0, 255, (32, 32, 3), np.uint8)
ACTION_SPACE = spaces.Box(-1.0, 1.0, (2,), np.float32)


@pytest.fixture(autouse=True)
def minari_root(tmp_path, monkeypatch):
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))


def write_image_dataset(dataset_id: str, jpeg_encoding: bool) -> np.ndarray:
    """Two episodes of 3 steps of random frames; returns the 8 frames written, episode by episode."""
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 256, (2, 4, *IMAGE_SPACE.shape), dtype=np.uint8)
    buffers = [
        EpisodeBuffer(
            id=index,
            observations=frames[index],
            actions=rng.uniform(-1, 1, (3, 2)).astype(np.float32),
            rewards=np.zeros(3),
            terminations=np.zeros(3, dtype=bool),
            truncations=np.array([False, False, True]),
        )
        for index in range(2)
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # Minari warns about every metadata field left unset
        minari.create_dataset_from_buffers(
            dataset_id, buffers, observation_space=IMAGE_SPACE, action_space=ACTION_SPACE, jpeg_encoding=jpeg_encoding
        )
    return frames


def test_a_jpeg_encoded_image_dataset_is_warned_about_naming_it():
    frames = write_image_dataset("qctest/jpeg-v0", jpeg_encoding=True)
    with pytest.warns(UserWarning, match=r"'qctest/jpeg-v0'.*JPEG-encoded \(lossy\).*exact pixels the env shows online"):
        transitions = load_offline_transitions("qctest/jpeg-v0")
    # The warning is about real damage: random pixels do not survive JPEG.
    assert not np.array_equal(transitions.observations[:3], frames[0, :3])


def test_a_lossless_image_dataset_reads_back_exactly_without_a_warning():
    frames = write_image_dataset("qctest/raw-v0", jpeg_encoding=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        transitions = load_offline_transitions("qctest/raw-v0")
    assert transitions.observations.dtype == np.uint8
    np.testing.assert_array_equal(transitions.observations, frames[:, :3].reshape(6, *IMAGE_SPACE.shape))
    np.testing.assert_array_equal(transitions.next_observations, frames[:, 1:].reshape(6, *IMAGE_SPACE.shape))
