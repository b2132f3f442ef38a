"""Probe a run's policy at a checkpoint: the success of best-of-N for several N, and how spread the critic's scores
of the N samples are (docs/evidence.md §6).

Run: ``python -m qc_sb3.benchmarks.parity.policy_probe RUN_DIR [--samples 1 8 32] [--episodes 20] [--checkpoint NAME]
[--seed S] [--out FILE]``.

A QC, BFN or BFN-n policy acts with the best of N flow samples scored by its critic (``actor_num_samples``); here each
N asked for is evaluated for E episodes on the run's evaluation env (its task's env with the run's env settings:
episode limit, sparse rewards), with the chunks executed open-loop as when the run is evaluated. N = 1 is the flow
(behaviour) policy's own success: one sample, no critic choice. At each decision the probe records the aggregated
critic scores of the N samples (the mean over the ensemble, or the min, as the run's ``q_agg``) and reports, as means
over decisions, the chosen sample's score, the samples' mean score, the best score minus the mean one, and the scores'
standard deviation over the N samples (ddof 0). A QC-FQL, FQL or FQL-n policy has no best-of-N: its one row is the
one-step actor's success and the score of its actions.

The run folder is only read (:mod:`qc_sb3.benchmarks.runner.run_snapshot`): the model is rebuilt from ``config.json``
and from a
copy of the checkpoint taken into a temporary folder (a runner may replace the checkpoint meanwhile); its lock is never
taken, and its offline data is not needed (a resumed model's buffer holds it).
"""

from __future__ import annotations

import argparse
import csv
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch as th
from stable_baselines3.common.monitor import Monitor

from qc_sb3.benchmarks.runner.atomic import atomic_path
from qc_sb3.benchmarks.runner.run_snapshot import ProbeError, load_model, run_from_folder
from qc_sb3.benchmarks.runner.specs import RunSpec
from qc_sb3.common.chunked import ChunkedOffPolicyAlgorithm
from qc_sb3.common.flow_q import FlowQPolicy
from qc_sb3.qc.policies import QCPolicy

COLUMNS = (
    "samples",
    "episodes",
    "success",
    "return",
    "length",
    "decisions",
    "q_chosen",
    "q_samples_mean",
    "q_max_minus_mean",
    "q_std",
    "task",
    "method",
    "checkpoint",
    "offline_steps",
    "env_steps",
    "seed",
)
# The samples column of a policy without best-of-N (QC-FQL, FQL, FQL-n).
ACTOR = "actor"
@dataclass(frozen=True)
class Decision:
    """
    One decision of the probed policy.

    :param chunk: The chosen flat chunk, shape ``(flat_action_dim,)``, in [-1, 1]
    :param scores: The aggregated critic scores of the candidates, shape ``(N,)`` (one for a one-step actor)
    :param chosen: Index of the chosen candidate in ``scores``
    """

    chunk: th.Tensor
    scores: th.Tensor
    chosen: int


def aggregated_scores(policy: FlowQPolicy, features: th.Tensor, actions: th.Tensor) -> th.Tensor:
    """
    The critic's scores as the policy aggregates its ensemble (``q_agg``: mean or min over the K critics).

    :param policy: The policy
    :param features: States, shape ``(M, features_dim)``
    :param actions: Flat chunks, shape ``(M, flat_action_dim)``
    :return: Shape ``(M,)``
    """
    q_values = policy.critic(features, actions)  # (K, M)
    return q_values.mean(dim=0) if policy.q_agg == "mean" else q_values.amin(dim=0)


def best_of_n_decision(policy: QCPolicy, features: th.Tensor, noise: th.Tensor) -> Decision:
    """
    One state's best-of-N decision with every candidate's score, computed as
    :func:`~qc_sb3.common.networks.best_of_n_actions` does (N Euler-integrated flow samples from ``noise``, the
    highest aggregated score kept).

    :param policy: A QC, BFN or BFN-n policy
    :param features: One state, shape ``(1, features_dim)``
    :param noise: The N flow noises, shape ``(N, flat_action_dim)``
    :return: The decision
    """
    repeated = features.expand(noise.shape[0], -1)
    candidates = policy.flow.integrate(repeated, noise, policy.flow_steps)
    scores = aggregated_scores(policy, repeated, candidates)
    chosen = int(scores.argmax())
    return Decision(candidates[chosen], scores, chosen)


def actor_decision(policy: FlowQPolicy, features: th.Tensor) -> Decision:
    """
    One state's decision by the policy's own sampler (QC-FQL's one-step actor), with the score of its chunk.

    :param policy: The policy
    :param features: One state, shape ``(1, features_dim)``
    :return: The decision
    """
    chunk = policy.sample_actions(features)
    return Decision(chunk[0], aggregated_scores(policy, features, chunk), 0)


def score_statistics(scores: Sequence[np.ndarray], chosen: Sequence[int]) -> dict[str, float]:
    """
    The spread of the candidates' scores, as means over decisions.

    :param scores: Per decision, the aggregated scores of its N candidates
    :param chosen: Per decision, the index of the chosen one
    :return: ``q_chosen``, ``q_samples_mean``, ``q_max_minus_mean``, ``q_std`` (over the N candidates, ddof 0)
    """
    if len(scores) == 0:
        return {name: float("nan") for name in ("q_chosen", "q_samples_mean", "q_max_minus_mean", "q_std")}
    return {
        "q_chosen": float(np.mean([decision[index] for decision, index in zip(scores, chosen, strict=True)])),
        "q_samples_mean": float(np.mean([decision.mean() for decision in scores])),
        "q_max_minus_mean": float(np.mean([decision.max() - decision.mean() for decision in scores])),
        "q_std": float(np.mean([decision.std() for decision in scores])),
    }


def probe_episodes(model: ChunkedOffPolicyAlgorithm, run: RunSpec, samples: int | None, episodes: int, seed: int) -> dict:
    """
    Evaluate the policy with N candidates per decision (or its own actor) for some episodes on the run's env.

    The env is the runner's evaluation env (the task's env with the run's env settings, in a ``Monitor``); its first
    reset and torch's generator (the noise) are seeded with ``seed``, alike for every N. Chunks are executed
    open-loop, ``act_chunk_size`` actions per decision, in the env's scale and clipped to its bounds, as
    :meth:`~qc_sb3.common.policies.ChunkPolicy.predict` does; success is the last step's ``info["success"]``.

    :param model: The model (:func:`load_model`)
    :param run: The run
    :param samples: N, or None for the policy's own actor (QC-FQL)
    :param episodes: Episodes
    :param seed: Seed of the env's episodes and of the noise
    :return: The row's ``success``, ``return``, ``length``, ``decisions`` and :func:`score_statistics`
    """
    policy: Any = model.policy
    policy.set_training_mode(False)
    env = Monitor(run.make_env(seed=None, **run.env_kwargs))
    th.manual_seed(seed)
    successes, returns, lengths, scores, chosen = [], [], [], [], []
    try:
        for episode in range(episodes):
            observation, _ = env.reset(seed=seed if episode == 0 else None)
            done, total, steps, info = False, 0.0, 0, {}
            while not done:
                with th.no_grad():
                    observation_tensor, _ = policy.obs_to_tensor(observation)
                    features = policy.features(observation_tensor)
                    if samples is None:
                        decision = actor_decision(policy, features)
                    else:
                        noise = th.randn(samples, policy.flat_action_dim, dtype=features.dtype, device=features.device)
                        decision = best_of_n_decision(policy, features, noise)
                scores.append(decision.scores.cpu().numpy())
                chosen.append(decision.chosen)
                chunk = decision.chunk.cpu().numpy().reshape(policy.act_chunk_size, *policy.action_space.shape)
                actions = np.clip(policy.unscale_action(chunk), policy.action_space.low, policy.action_space.high)
                for action in actions:
                    observation, reward, terminated, truncated, info = env.step(action)
                    total += float(reward)
                    steps += 1
                    done = terminated or truncated
                    if done:
                        break
            if "success" not in info:
                raise ProbeError(f"{run.task}'s env reports no info['success'] at the end of an episode")
            successes.append(float(info["success"]))
            returns.append(total)
            lengths.append(steps)
    finally:
        env.close()
    return {
        "success": float(np.mean(successes)),
        "return": float(np.mean(returns)),
        "length": float(np.mean(lengths)),
        "decisions": len(scores),
        **score_statistics(scores, chosen),
    }


def probe_run(
    run_dir: str | Path,
    samples: Sequence[int] | None = None,
    episodes: int = 20,
    checkpoint: str | None = None,
    seed: int = 0,
    device: str = "cpu",
) -> list[dict[str, Any]]:
    """
    Probe a run at a checkpoint: one row per N (:func:`probe_episodes`), or one row for a policy without best-of-N.

    :param run_dir: The run's folder (only read)
    :param samples: The N to evaluate (None: 1 and the run's own ``actor_num_samples``); ignored without best-of-N
    :param episodes: Episodes per N
    :param checkpoint: The checkpoint's name, or None for the latest
    :param seed: Seed of the episodes and the noise
    :param device: Torch device
    :return: The rows, with the columns of :data:`COLUMNS`
    :raises ValueError: If ``samples`` or ``episodes`` is not positive
    :raises ProbeError: If the folder cannot be probed
    """
    if episodes < 1:
        raise ValueError(f"episodes must be >= 1, got {episodes}")
    if samples is not None and (not samples or any(n < 1 for n in samples)):
        raise ValueError(f"samples must be a non-empty list of counts >= 1, got {list(samples)}")
    run = run_from_folder(run_dir, device=device)
    with tempfile.TemporaryDirectory(prefix="policy-probe-") as copy_dir:
        model, checkpoint_name = load_model(run, copy_dir, checkpoint)
    if isinstance(model.policy, QCPolicy):
        counts: list[int | None] = list(samples or dict.fromkeys([1, model.policy.actor_num_samples]))
    else:
        counts = [None]
    common = {
        "task": run.task,
        "method": run.method,
        "checkpoint": checkpoint_name,
        "offline_steps": model.offline_steps_done,
        "env_steps": model.num_timesteps,
        "seed": seed,
    }
    return [
        {"samples": ACTOR if n is None else n, "episodes": episodes, **probe_episodes(model, run, n, episodes, seed), **common}
        for n in counts
    ]


def write_csv(rows: Sequence[dict[str, Any]], path: str | Path) -> None:
    """Write the rows (atomically)."""
    with atomic_path(path) as temporary, open(temporary, "w", encoding="utf-8", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)


def format_table(rows: Sequence[dict[str, Any]]) -> str:
    """The rows as a Markdown table."""
    shown = ("samples", "episodes", "success", "return", "length", "q_chosen", "q_samples_mean", "q_max_minus_mean", "q_std")
    lines = ["| " + " | ".join(shown) + " |", "|" + "---|" * len(shown)]
    for row in rows:
        cells = [f"{row[name]:.4g}" if isinstance(row[name], float) else str(row[name]) for name in shown]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """
    The ``python -m qc_sb3.benchmarks.parity.policy_probe`` command.

    :param argv: Arguments (default: the command line's)
    :return: The exit status
    """
    parser = argparse.ArgumentParser(
        prog="python -m qc_sb3.benchmarks.parity.policy_probe", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("run_dir", help="a run's folder (<out>/<task>/<method>/seed<k>), only read")
    parser.add_argument("--samples", type=int, nargs="+", help="the N of best-of-N (default: 1 and the run's own)")
    parser.add_argument("--episodes", type=int, default=20, help="episodes per N (default: 20)")
    parser.add_argument("--checkpoint", help="a checkpoint's name, e.g. ckpt-00003 (default: the latest)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the episodes and the noise (default: 0)")
    parser.add_argument("--out", default="policy_probe.csv", help="the CSV to write (default: policy_probe.csv)")
    parser.add_argument("--device", default="cpu", help="torch device (default: cpu)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default: 1)")
    args = parser.parse_args(argv)
    run_dir = Path(args.run_dir).resolve()
    if Path(args.out).resolve().is_relative_to(run_dir):
        parser.error(f"--out {args.out} is inside the run folder, which the probe never writes to")
    th.set_num_threads(args.threads)
    try:
        rows = probe_run(run_dir, args.samples, args.episodes, args.checkpoint, args.seed, args.device)
    except (ProbeError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    write_csv(rows, args.out)
    first = rows[0]
    print(
        f"{first['task']}/{first['method']} at {first['checkpoint']} ({first['offline_steps']} offline steps, "
        f"{first['env_steps']} env steps), seed {args.seed}:"
    )
    print(format_table(rows))
    print(f"written: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
