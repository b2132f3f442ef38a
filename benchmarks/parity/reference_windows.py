"""
The reference's data path, recorded for ``qc_sb3.benchmarks.parity.window_parity``: its offline loader and its replay buffer.

This script runs in the reference's virtual environment (JAX, its pinned ogbench), never in qc_sb3's, and imports
the reference's code (github.com/ColinQiyangLi/qc) from ``--reference-root`` unmodified. Two commands:

* ``offline NPZ OUT``: the training set ``main.py`` makes of an OGBench npz file (``envs/ogbench_utils.py``,
  ``make_ogbench_env_and_datasets``, which relabels rewards and masks for the single-task env ``--task``).
* ``windows STREAM OUT``: a replay buffer made as ``main.py`` makes it (``ReplayBuffer.create_from_initial_dataset``
  of the offline data, then one ``add_transition`` per online step with ``terminals = terminated or truncated`` and
  ``masks = 1 - terminated``), and its ``sample_sequence`` windows at every start it can sample, in order.
"""

from __future__ import annotations

import argparse
import sys


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("--reference-root", required=True)
    parser.add_argument("command", choices=["offline", "windows"])
    parser.add_argument("source", help="the OGBench npz file (offline) or the recorded stream (windows)")
    parser.add_argument("out")
    parser.add_argument("--task", help="offline: the single-task env that relabels the data")
    parser.add_argument("--horizon", type=int, default=5)
    parser.add_argument("--discount", type=float, default=0.99)
    args = parser.parse_args()
    sys.path.insert(0, args.reference_root)
    import numpy as np

    if args.command == "offline":
        from envs.ogbench_utils import make_ogbench_env_and_datasets

        _, _, train, _ = make_ogbench_env_and_datasets(args.task, dataset_path=args.source, compact_dataset=False)
        np.savez(args.out, **{name: np.asarray(value) for name, value in train.items()})
        return

    from utils.datasets import Dataset, ReplayBuffer

    stream = np.load(args.source)
    offline = Dataset.create(**{name[len("offline_") :]: stream[name] for name in stream.files if name.startswith("offline_")})
    buffer = ReplayBuffer.create_from_initial_dataset(dict(offline), size=offline.size + len(stream["rewards"]) + 1)
    for step in range(len(stream["rewards"])):
        terminated, truncated = bool(stream["terminated"][step]), bool(stream["truncated"][step])
        buffer.add_transition(
            {
                "observations": stream["observations"][step],
                "actions": stream["actions"][step],
                "rewards": stream["rewards"][step],
                "terminals": float(terminated or truncated),
                "masks": 1.0 - terminated,
                "next_observations": stream["next_observations"][step],
            }
        )
    starts = np.arange(buffer.size - args.horizon + 1)
    # sample_sequence draws its starts with np.random.randint(size - h + 1): here, every start once, in order.
    randint = np.random.randint
    np.random.randint = lambda *_, **__: starts
    try:
        windows = buffer.sample_sequence(len(starts), sequence_length=args.horizon, discount=args.discount)
    finally:
        np.random.randint = randint
    np.savez(args.out, starts=starts, **{name: np.asarray(value) for name, value in windows.items()})


if __name__ == "__main__":
    main()
