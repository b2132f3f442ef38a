"""
Generate OGBench play datasets locally, in the upstream npz format, for when the official files cannot be downloaded.

Each episode is recorded by :class:`qc_sb3.envs.ogbench.play.PlayCollector` and seeded from ``(seed, episode index)``, so a
dataset depends on its seed only, not on the number of worker processes. Train episodes come first, then the
validation episodes; both files are written to temporary files in the output folder and moved into place only when
complete.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from tqdm import tqdm

from qc_sb3.envs.ogbench.play import UPSTREAM_EPISODE_LENGTH, PlayCollector, PlayEpisode, parse_play_dataset
from qc_sb3.envs.output_folder import check_writable_folder
from qc_sb3.envs.worker_processes import map_in_workers

logger = logging.getLogger(__name__)

# The collector of a worker process, made once by its initializer.
_worker_collector: PlayCollector | None = None


def generate_dataset(
    dataset: str,
    *,
    episodes: int,
    out_dir: str | os.PathLike,
    workers: int = 1,
    seed: int = 0,
    val_episodes: int | None = None,
    episode_length: int = UPSTREAM_EPISODE_LENGTH,
    progress: bool = False,
    overwrite: bool = False,
) -> Path:
    """
    Record an OGBench play dataset with the scripted oracles and write ``<dataset>.npz`` and ``<dataset>-val.npz``.

    The files have OGBench's layout (``ogbench.make_env_and_datasets(name, dataset_path=...)`` loads them): per row
    ``observations`` (float32), ``actions`` (float32), ``terminals`` (bool, True on each episode's last row),
    ``qpos``, ``qvel`` (float32) and, for scene and puzzle, ``button_states`` (int64). A visual dataset
    (``"visual-<family>-play-v0"``) has the same rows, with the frames the visual env rendered as ``observations``
    (uint8, 64 x 64 x 3; 12 KB a row, 12.3 GB for OGBench's 1M rows, held in memory until written).

    :param dataset: ``"[visual-]<family>-play-v0"`` (or without ``-v0``), e.g. ``"cube-double-play-v0"``
    :param episodes: Number of training episodes (OGBench: 1000; cube-triple 3000, cube-quadruple 5000)
    :param out_dir: Folder to write the two files into (created if missing; checked writable before generating)
    :param workers: Number of worker processes (1: record in this process)
    :param seed: The dataset's seed; the same seed gives identical arrays whatever the number of workers
    :param val_episodes: Number of validation episodes, recorded after the training ones; default
        ``max(1, episodes // 10)`` (upstream)
    :param episode_length: Rows per episode (upstream: 1001); smaller values make tiny datasets for tests
    :param progress: Whether to show a progress bar
    :param overwrite: Whether to replace existing files; if False, existing files are an error (checked first)
    :return: The path of the training file
    """
    family, visual = parse_play_dataset(dataset)
    name = f"{'visual-' if visual else ''}{family}-play-v0"
    if not _is_count(episodes, 1):
        raise ValueError(f"episodes must be an int >= 1, got {episodes!r}")
    if val_episodes is None:
        val_episodes = max(1, episodes // 10)
    for argument, value, minimum in (
        ("val_episodes", val_episodes, 1),
        ("workers", workers, 1),
        ("seed", seed, 0),
        ("episode_length", episode_length, 2),
    ):
        if not _is_count(value, minimum):
            raise ValueError(f"{argument} must be an int >= {minimum}, got {value!r}")
    out_dir = Path(out_dir)
    train_path, val_path = out_dir / f"{name}.npz", out_dir / f"{name}-val.npz"
    if not overwrite:
        existing = [str(path) for path in (train_path, val_path) if path.exists()]
        if existing:
            raise FileExistsError(f"{existing} already exist; pass overwrite=True (--overwrite) to replace them")
    check_writable_folder(out_dir)

    n_episodes = episodes + val_episodes
    start = time.perf_counter()
    train = _EpisodeTable(episodes, episode_length)
    val = _EpisodeTable(val_episodes, episode_length)
    plans = plans_succeeded = unhealthy_attempts = 0
    with tqdm(total=n_episodes * episode_length, unit="step", desc=name, disable=not progress) as bar:
        episodes_recorded = _record_episodes(family, visual, episode_length, seed, n_episodes, workers)
        for index, episode in enumerate(episodes_recorded):
            (train if index < episodes else val).add(episode.arrays)
            plans += episode.plans
            plans_succeeded += episode.plans_succeeded
            unhealthy_attempts += episode.unhealthy_attempts
            bar.update(episode_length)
            bar.set_postfix(plans_succeeded=f"{plans_succeeded}/{plans}", refresh=False)
    elapsed = time.perf_counter() - start
    _save_npz_atomically({val_path: val.arrays, train_path: train.arrays})
    logger.info(
        "%s: %d train + %d val episodes of %d rows in %.1f s (%.0f steps/s, %d workers); oracle plans reaching "
        "their target: %d/%d; unhealthy scene attempts dropped: %d",
        name,
        episodes,
        val_episodes,
        episode_length,
        elapsed,
        n_episodes * episode_length / elapsed,
        workers,
        plans_succeeded,
        plans,
        unhealthy_attempts,
    )
    return train_path


def _is_count(value: object, minimum: int) -> bool:
    """Whether ``value`` is an int (not a bool) of at least ``minimum``."""
    return isinstance(value, int | np.integer) and not isinstance(value, bool) and value >= minimum


def _record_episodes(
    family: str, visual: bool, episode_length: int, seed: int, n_episodes: int, workers: int
) -> Iterator[PlayEpisode]:
    """The episodes 0 .. n_episodes - 1 in order, recorded here (one worker) or by a pool of worker processes."""
    if workers == 1:
        collector = PlayCollector(family, episode_length, visual)
        # The oracles draw from numpy's global generator: leave the caller's state as it was.
        global_state = np.random.get_state()
        try:
            for episode in range(n_episodes):
                yield collector.collect(seed, episode)
        finally:
            np.random.set_state(global_state)
            collector.close()
        return
    # Each worker builds its own collector once.
    arguments = [(seed, episode) for episode in range(n_episodes)]
    yield from map_in_workers(_collect_in_worker, arguments, workers, _init_worker, (family, episode_length, visual))


def _init_worker(family: str, episode_length: int, visual: bool) -> None:
    """Worker initializer: make this worker's collector."""
    global _worker_collector
    _worker_collector = PlayCollector(family, episode_length, visual)


def _collect_in_worker(seed_and_episode: tuple[int, int]) -> PlayEpisode:
    """Record one episode with this worker's collector."""
    assert _worker_collector is not None, "worker used before _init_worker ran"
    return _worker_collector.collect(*seed_and_episode)


class _EpisodeTable:
    """
    Rows of a fixed number of equally long episodes, in preallocated arrays (no list-then-concatenate copy).

    :param n_episodes: Number of episodes
    :param episode_length: Rows per episode
    """

    def __init__(self, n_episodes: int, episode_length: int) -> None:
        self.episode_length = episode_length
        self.capacity = n_episodes * episode_length
        self.size = 0
        self.arrays: dict[str, np.ndarray] = {}

    def add(self, episode: dict[str, np.ndarray]) -> None:
        """
        :param episode: One episode's arrays, ``episode_length`` rows each
        """
        if not self.arrays:
            self.arrays = {key: np.empty((self.capacity, *value.shape[1:]), value.dtype) for key, value in episode.items()}
        for key, value in episode.items():
            self.arrays[key][self.size : self.size + self.episode_length] = value
        self.size += self.episode_length


def _save_npz_atomically(arrays_by_path: dict[Path, dict[str, np.ndarray]]) -> None:
    """
    Write each npz (compressed, as upstream) to a temporary file in its folder, then move all into place in order.

    Nothing is moved until every file is written; on failure or interruption the temporary files are removed and
    existing files stay as they were; a failed write (a full disk) is an OSError naming the file.
    """
    temporary: dict[Path, Path] = {}
    try:
        for path, arrays in arrays_by_path.items():
            temporary[path] = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
            # os.open with mode 0o666 keeps the umask's permissions (tempfile.mkstemp would make the file 0600).
            handle = os.open(temporary[path], os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
            try:
                with os.fdopen(handle, "wb") as file:
                    np.savez_compressed(file, **arrays)
                    file.flush()
                    os.fsync(file.fileno())
            except OSError as error:
                # numpy's zip writer names no file: a full disk would say only "[Errno 28] No space left on device".
                raise OSError(
                    error.errno,
                    f"writing {str(path)!r} failed ({error.strerror or error}); existing files were left as they were",
                ) from error
        for path, temporary_path in temporary.items():
            os.replace(temporary_path, path)
    finally:
        for temporary_path in temporary.values():
            with contextlib.suppress(FileNotFoundError):
                temporary_path.unlink()
