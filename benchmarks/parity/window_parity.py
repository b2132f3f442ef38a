"""
qc_sb3's data path against the reference's, array for array: the offline training set and the replay windows.

``qc_sb3.benchmarks.parity.update_parity`` shows that an update is the reference's on the same batch. This shows that
the batches
are the same, in two parts, each run through the reference's own code (``benchmarks/parity/reference_windows.py`` in the
reference's virtual environment):

* **Offline data** (with ``--ogbench-npz`` and ``--minari``): the training set the reference's ``main.py`` makes of an
  OGBench npz file (its loader, and ogbench's relabelling for the single-task env) against what qc_sb3 reads from the
  Minari dataset converted from the same file: observations, actions, rewards, masks (``1 - terminated``) and episode
  ends (the reference's ``terminals``).
* **Online windows**: qc_sb3's ``learn()`` collects ``--online-steps`` steps of a small env with terminations and
  time limits (no updates, so the policy stays fixed), on top of offline data; every step the env makes is recorded
  where the env is, inside SB3's wrappers. The reference's replay buffer is built from the same offline data and the
  recorded steps as ``main.py`` builds it, and its windows at every start it can sample are compared with those of
  qc_sb3's buffer at the same starts (docs/algorithms.md §1): the valid flags everywhere, the actions, cumulative
  rewards and masks where valid, the observation and the next observation of valid windows.

Run: ``python -m qc_sb3.benchmarks.parity.window_parity --reference-python PY --reference-root DIR [--ogbench-npz NPZ --minari
DATASET --task TASK]``. The exit status is 1 if any array differs by more than ``--tolerance``.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from qc_sb3 import QCFQL
from qc_sb3.common.buffers import ChunkReplayBuffer, _Windows
from qc_sb3.common.datasets import load_offline_transitions

REFERENCE_SCRIPT = Path(__file__).with_name("reference_windows.py")


class EndingEnv(gym.Env):
    """A drifting point that terminates at random (reward 0 there, else -1, plus a little of the action)."""

    observation_space = spaces.Box(-np.inf, np.inf, (4,), np.float32)
    action_space = spaces.Box(-1.0, 1.0, (2,), np.float32)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.state = self.np_random.normal(size=4).astype(np.float32)
        return self.state.copy(), {}

    def step(self, action):
        self.state = (self.state + 0.1 * np.concatenate([action, action])).astype(np.float32)
        terminated = bool(self.np_random.random() < 0.03)
        reward = (0.0 if terminated else -1.0) + 0.1 * float(action[0])
        return self.state.copy(), reward, terminated, False, {}


class StepRecorder(gym.Wrapper):
    """Records every step as the env makes it: (s, a, r, terminated, truncated, s')."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self.steps: list[tuple] = []

    def reset(self, **kwargs):
        self.observation, info = self.env.reset(**kwargs)
        return self.observation, info

    def step(self, action):
        next_observation, reward, terminated, truncated, info = self.env.step(action)
        self.steps.append((self.observation, np.asarray(action, np.float32), reward, terminated, truncated, next_observation))
        self.observation = next_observation
        return next_observation, reward, terminated, truncated, info


def run_reference(args: argparse.Namespace, *command: str) -> dict[str, np.ndarray]:
    """One command of benchmarks/parity/reference_windows.py in the reference's python; its npz output."""
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "out.npz"
        *options, source = command
        subprocess.run(
            [
                args.reference_python,
                str(REFERENCE_SCRIPT),
                "--reference-root",
                args.reference_root,
                *options,
                source,
                str(out),
            ],
            check=True,
        )
        return dict(np.load(out))


def largest_difference(ours: np.ndarray, reference: np.ndarray, where: np.ndarray | None = None) -> float:
    """Largest absolute difference, over the entries where ``where`` is true (broadcast) if given."""
    difference = np.abs(np.asarray(ours, np.float64) - np.asarray(reference, np.float64))
    if where is not None:
        difference = difference * np.broadcast_to(where, difference.shape)
    return float(difference.max(initial=0.0))


def offline_rows(args: argparse.Namespace) -> list[tuple[str, float]]:
    """The offline training sets of both sides, field by field."""
    reference = run_reference(args, "offline", "--task", args.task, args.ogbench_npz)
    ours = load_offline_transitions(args.minari)
    if len(ours) != len(reference["rewards"]):
        raise ValueError(f"qc_sb3 reads {len(ours)} steps from {args.minari}, the reference {len(reference['rewards'])}")
    return [
        ("offline observations", largest_difference(ours.observations, reference["observations"])),
        ("offline next observations", largest_difference(ours.next_observations, reference["next_observations"])),
        ("offline actions", largest_difference(ours.actions, reference["actions"])),
        ("offline rewards", largest_difference(ours.rewards, reference["rewards"])),
        ("offline masks (1 - terminated)", largest_difference(1.0 - ours.terminated, reference["masks"])),
        ("offline episode ends", largest_difference(ours.episode_end, reference["terminals"])),
    ]


def random_offline_data(n_steps: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Offline steps of EndingEnv's shapes in episodes of 50, with random terminations (mapping keys of qc_sb3)."""
    terminated = rng.random(n_steps) < 0.02
    time_limit = np.zeros(n_steps, bool)
    time_limit[49::50] = True
    return {
        "observations": rng.normal(size=(n_steps, 4)).astype(np.float32),
        "actions": rng.uniform(-0.9, 0.9, (n_steps, 2)).astype(np.float32),
        "rewards": -(rng.random(n_steps) < 0.9).astype(np.float32),
        "next_observations": rng.normal(size=(n_steps, 4)).astype(np.float32),
        "terminations": terminated,
        "truncations": time_limit & ~terminated,
    }


def online_rows(args: argparse.Namespace) -> list[tuple[str, float]]:
    """qc_sb3's buffer windows after an online rollout against the reference buffer's on the recorded steps."""
    offline = random_offline_data(args.offline_steps, np.random.default_rng(args.seed))
    env = StepRecorder(gym.wrappers.TimeLimit(EndingEnv(), max_episode_steps=50))
    model = QCFQL(
        "MlpPolicy",
        env,
        offline_dataset=offline,
        offline_gradient_steps=0,
        learning_starts=args.online_steps + 1,
        chunk_size=args.horizon,
        gamma=args.gamma,
        buffer_size=args.online_steps,
        policy_kwargs={"net_arch": [16, 16]},
        seed=args.seed,
        device="cpu",
    )
    model.learn(args.online_steps)
    observations, actions, rewards, terminated, truncated, next_observations = map(np.array, zip(*env.steps, strict=True))
    # The reference's dataset fields (main.py): terminals mark episode ends, masks are 1 - terminated.
    offline_end = offline["terminations"] | offline["truncations"]
    offline_end[-1] = True
    stream = {
        "observations": observations,
        "actions": actions,
        "rewards": rewards.astype(np.float32),
        "terminated": terminated.astype(np.float32),
        "truncated": truncated.astype(np.float32),
        "next_observations": next_observations,
        "offline_observations": offline["observations"],
        "offline_actions": offline["actions"],
        "offline_rewards": offline["rewards"],
        "offline_next_observations": offline["next_observations"],
        "offline_terminals": offline_end.astype(np.float32),
        "offline_masks": 1.0 - offline["terminations"].astype(np.float32),
    }
    with tempfile.TemporaryDirectory() as folder:
        np.savez(Path(folder) / "stream.npz", **stream)
        options = ("--horizon", str(args.horizon), "--discount", str(args.gamma))
        reference = run_reference(args, "windows", *options, str(Path(folder) / "stream.npz"))
    ours = windows_at(model.replay_buffer, reference["starts"])
    valid = reference["valid"] > 0
    last_valid = valid[:, -1]
    print(
        f"{len(reference['starts'])} windows compared: {args.offline_steps} offline steps, {len(rewards)} online steps "
        f"with {int(terminated.sum())} terminations and {int(truncated.sum())} time limits"
    )
    return [
        ("valid flags", largest_difference(ours.valid, reference["valid"])),
        ("observations", largest_difference(ours.observations, reference["observations"])),
        ("actions where valid", largest_difference(ours.actions, reference["actions"], valid[..., None])),
        ("cumulative rewards where valid", largest_difference(ours.rewards, reference["rewards"], valid)),
        ("masks where valid", largest_difference(ours.masks, reference["masks"], valid)),
        (
            "next observations of valid windows",
            largest_difference(ours.next_observations, reference["next_observations"][:, -1], last_valid[:, None]),
        ),
    ]


def windows_at(buffer: ChunkReplayBuffer, starts: np.ndarray):
    """qc_sb3's windows at starts numbered as in the reference's buffer: offline steps first, then online ones."""
    offline = starts < buffer.offline_size
    parts = [buffer._offline_windows(starts[offline]), buffer._online_windows(starts[~offline] - buffer.offline_size)]
    windows = _Windows(*(np.concatenate(field) for field in zip(*parts, strict=True)))
    # The parts come offline first: put every window back at its start's place.
    order = np.concatenate([np.flatnonzero(offline), np.flatnonzero(~offline)])
    place = np.empty_like(order)
    place[order] = np.arange(len(order))
    samples = buffer._chunk_samples(windows, None)
    return type(samples)(*(field[place] for field in samples))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("--reference-python", required=True, help="python of the reference's own virtual environment")
    parser.add_argument("--reference-root", required=True, help="the reference's code (github ColinQiyangLi/qc)")
    parser.add_argument("--ogbench-npz", help="an OGBench npz file, to compare the offline training sets")
    parser.add_argument("--minari", help="the Minari dataset qc_sb3 converted from --ogbench-npz")
    parser.add_argument("--task", help="the single-task env of the offline data, e.g. cube-single-play-singletask-task1-v0")
    parser.add_argument("--online-steps", type=int, default=3000)
    parser.add_argument("--offline-steps", type=int, default=600)
    parser.add_argument("--horizon", type=int, default=5)
    parser.add_argument("--gamma", type=float, default=0.99)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tolerance", type=float, default=1e-5, help="largest absolute difference accepted")
    args = parser.parse_args()
    offline_options = (args.ogbench_npz, args.minari, args.task)
    if any(offline_options) and not all(offline_options):
        parser.error("--ogbench-npz, --minari and --task go together")

    rows = (offline_rows(args) if args.ogbench_npz else []) + online_rows(args)
    print("| compared | largest absolute difference |\n| --- | --- |")
    for name, value in rows:
        print(f"| {name} | {value:.3g} |")
    failures = [name for name, value in rows if value > args.tolerance]
    print(f"\nbeyond tolerance ({args.tolerance:g}): {', '.join(failures) or 'none'}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
