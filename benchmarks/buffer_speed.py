"""Memory and sampling speed of ChunkReplayBuffer at the paper's scale (2M steps, 40-dim observations).

Run: ``python -m benchmarks.buffer_speed``. Prints the resident memory the filled buffer holds and the median
time of one ``sample(256)`` with h = 5, for an all-online ring and for 1M offline + 1M online steps.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time

import numpy as np
from gymnasium import spaces

from qc_sb3 import ChunkReplayBuffer


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


def median_sample_ms(buffer: ChunkReplayBuffer, batch_size: int, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        buffer.sample(batch_size)
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=2_000_000)
    parser.add_argument("--obs-dim", type=int, default=40)
    parser.add_argument("--action-dim", type=int, default=5)
    parser.add_argument("--chunk-size", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=2000)
    parser.add_argument("--layout", choices=["online", "offline+online"], default="online")
    args = parser.parse_args()

    rng = np.random.default_rng(0)
    observation_space = spaces.Box(-np.inf, np.inf, (args.obs_dim,), np.float32)
    action_space = spaces.Box(-1.0, 1.0, (args.action_dim,), np.float32)
    before = resident_gib()
    if args.layout == "online":
        buffer = ChunkReplayBuffer(args.steps, observation_space, action_space, chunk_size=args.chunk_size)
        fill_online(buffer, rng)
    else:
        half = args.steps // 2
        buffer = ChunkReplayBuffer(half, observation_space, action_space, chunk_size=args.chunk_size)
        buffer.add_offline(**offline_data(half, args.obs_dim, args.action_dim, rng))
        fill_online(buffer, rng)
    after = resident_gib()
    np.random.seed(0)
    sample_ms = median_sample_ms(buffer, args.batch_size, args.repeats)
    print(
        f"layout={args.layout} steps={args.steps} obs_dim={args.obs_dim}: arrays {stored_gib(buffer):.2f} GiB, "
        f"resident +{after - before:.2f} GiB after filling; sample({args.batch_size}), h={args.chunk_size}: "
        f"median {sample_ms:.3f} ms over {args.repeats}"
    )


if __name__ == "__main__":
    main()
