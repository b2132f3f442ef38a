"""Memory and sampling speed of ChunkReplayBuffer at the paper's scale (2M steps, 40-dim observations).

Run: ``python -m qc_sb3.benchmarks.speed.buffer_speed``. Prints the resident memory the filled buffer holds and the median
time of one ``sample(256)`` with h = 5, for an all-online ring and for 1M offline + 1M online steps. With
``--also-device``, DeviceChunkReplayBuffer holding the same steps (on the CPU) is timed too, its calls interleaved
with the NumPy buffer's so that both see the same load.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time

import numpy as np
import torch as th
from gymnasium import spaces

from qc_sb3 import ChunkReplayBuffer, DeviceChunkReplayBuffer


def resident_gib() -> float:
    """Current resident set size of this process, in GiB (Linux)."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize() / 2**30


def stored_gib(buffer: ChunkReplayBuffer) -> float:
    """Bytes held by the buffer's arrays, online ring and offline segment, in GiB."""
    return sum(value.nbytes for value in vars(buffer).values() if isinstance(value, np.ndarray)) / 2**30


def fill_online(buffer: ChunkReplayBuffer, rng: np.random.Generator) -> None:
    """Write every ring slot, as a full buffer would hold, with episodes of 1000 steps."""
    for name in ("observations", "next_observations", "actions", "rewards"):
        array = getattr(buffer, name)
        for start in range(0, len(array), 100_000):  # in slices, so no full-size temporary inflates the figure
            block = array[start : start + 100_000]
            block[:] = rng.standard_normal(block.shape, dtype=np.float32)
    buffer.dones[999::1000] = 1.0
    buffer.timeouts[999::1000] = 1.0
    buffer.full = True


def offline_data(n_steps: int, obs_dim: int, action_dim: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    episode_end = np.zeros(n_steps, dtype=np.float32)
    episode_end[999::1000] = 1.0
    return {
        "observations": rng.standard_normal((n_steps, obs_dim), dtype=np.float32),
        "actions": rng.uniform(-1, 1, (n_steps, action_dim)).astype(np.float32),
        "rewards": rng.standard_normal(n_steps, dtype=np.float32),
        "next_observations": rng.standard_normal((n_steps, obs_dim), dtype=np.float32),
        "terminated": np.zeros(n_steps, dtype=np.float32),
        "episode_end": episode_end,
    }


def median_sample_ms(buffers: list[ChunkReplayBuffer], batch_size: int, repeats: int) -> list[float]:
    """Median time of ``sample(batch_size)`` of each buffer, the buffers' calls interleaved, in ms."""
    times: list[list[float]] = [[] for _ in buffers]
    for _ in range(repeats):
        for buffer, buffer_times in zip(buffers, times, strict=True):
            start = time.perf_counter()
            buffer.sample(batch_size)
            buffer_times.append(time.perf_counter() - start)
    return [1000 * statistics.median(buffer_times) for buffer_times in times]


def device_copy(buffer: ChunkReplayBuffer, offline: dict[str, np.ndarray] | None) -> DeviceChunkReplayBuffer:
    """A DeviceChunkReplayBuffer (CPU) holding the same online ring and offline data."""
    copy = DeviceChunkReplayBuffer(
        buffer.buffer_size, buffer.observation_space, buffer.action_space, chunk_size=buffer.chunk_size
    )
    for name in ("observations", "next_observations", "actions", "rewards", "dones", "timeouts"):
        getattr(copy, name).copy_(th.from_numpy(getattr(buffer, name)))
    copy.pos, copy.full = buffer.pos, buffer.full
    if offline is not None:
        copy.add_offline(**offline)
    return copy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=2_000_000)
    parser.add_argument("--obs-dim", type=int, default=40)
    parser.add_argument("--action-dim", type=int, default=5)
    parser.add_argument("--chunk-size", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=2000)
    parser.add_argument("--layout", choices=["online", "offline+online"], default="online")
    parser.add_argument("--also-device", action="store_true", help="also time DeviceChunkReplayBuffer, interleaved")
    args = parser.parse_args()

    rng = np.random.default_rng(0)
    observation_space = spaces.Box(-np.inf, np.inf, (args.obs_dim,), np.float32)
    action_space = spaces.Box(-1.0, 1.0, (args.action_dim,), np.float32)
    before = resident_gib()
    offline = None
    if args.layout == "online":
        buffer = ChunkReplayBuffer(args.steps, observation_space, action_space, chunk_size=args.chunk_size)
        fill_online(buffer, rng)
    else:
        half = args.steps // 2
        buffer = ChunkReplayBuffer(half, observation_space, action_space, chunk_size=args.chunk_size)
        offline = offline_data(half, args.obs_dim, args.action_dim, rng)
        buffer.add_offline(**offline)
        fill_online(buffer, rng)
    after = resident_gib()
    buffers = [buffer, device_copy(buffer, offline)] if args.also_device else [buffer]
    np.random.seed(0)
    th.manual_seed(0)
    sample_ms = median_sample_ms(buffers, args.batch_size, args.repeats)
    print(
        f"layout={args.layout} steps={args.steps} obs_dim={args.obs_dim}: arrays {stored_gib(buffer):.2f} GiB, "
        f"resident +{after - before:.2f} GiB after filling; sample({args.batch_size}), h={args.chunk_size}: "
        f"median {sample_ms[0]:.3f} ms over {args.repeats}"
    )
    if args.also_device:
        print(
            f"DeviceChunkReplayBuffer on the CPU, same steps, calls interleaved: median {sample_ms[1]:.3f} ms "
            f"(NumPy buffer / device buffer: {sample_ms[0] / sample_ms[1]:.2f}x)"
        )


if __name__ == "__main__":
    main()
