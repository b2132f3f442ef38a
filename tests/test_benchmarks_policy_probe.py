"""The policy probe on toy runs: it only reads the run folder, its decisions are best-of-N's, N = 1 is the flow alone,
its score statistics, its errors."""

from __future__ import annotations

import csv
import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch as th
from torch import nn

from qc_sb3.benchmarks.parity.policy_probe import best_of_n_decision, main, probe_run, score_statistics
from qc_sb3.benchmarks.runner.config import load_config
from qc_sb3.benchmarks.runner.datasets import prepare_datasets
from qc_sb3.benchmarks.runner.planning import plan_runs
from qc_sb3.benchmarks.runner.run_snapshot import ProbeError, load_model, run_from_folder
from qc_sb3.benchmarks.runner.runs import execute_run
from qc_sb3.common.networks import best_of_n_actions

from test_benchmarks_toys import TOY_TASK, keep_torch_threads, toy_config, toy_suite  # noqa: F401 (autouse fixtures of this module)

# Short toy runs: 20 offline gradient steps, no online phase, one checkpoint.
PROTOCOL = {"offline_steps": 20, "online_steps": 0, "eval_interval": 20, "eval_episodes": 1}


def finished_run(out: Path, method: str) -> Path:
    """A toy run of ``method``, executed to its end under ``out``; its folder."""
    hyperparameters = toy_config()["hyperparameters"]
    if method != "QC":
        del hyperparameters["actor_num_samples"]  # best-of-N's only
    config = load_config(toy_config(methods={method: None}, protocol=PROTOCOL, hyperparameters=hyperparameters))
    (run,) = prepare_datasets(plan_runs(config, out), out / "datasets")
    assert execute_run(run)["status"] == "done"
    return Path(run.run_dir)


@pytest.fixture(scope="module")
def qc_run(tmp_path_factory) -> Path:
    return finished_run(tmp_path_factory.mktemp("qc"), "QC")


def folder_state(folder: Path) -> dict[str, tuple]:
    """Every entry under a folder: its kind, size, modification time, and a file's content hash."""
    state = {}
    for path in sorted([folder, *folder.rglob("*")]):
        stat = path.stat()
        content = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None
        state[str(path.relative_to(folder))] = (path.is_dir(), stat.st_size, stat.st_mtime_ns, stat.st_mode, content)
    return state


def test_the_probe_leaves_the_run_folder_byte_identical(qc_run, tmp_path):
    before = folder_state(qc_run)
    out = tmp_path / "probe.csv"
    assert main([str(qc_run), "--samples", "1", "2", "--episodes", "2", "--out", str(out)]) == 0
    assert folder_state(qc_run) == before
    with out.open(newline="") as file:
        rows = list(csv.DictReader(file))
    assert [row["samples"] for row in rows] == ["1", "2"]
    assert all(row["checkpoint"] == "ckpt-00001" and row["offline_steps"] == "20" for row in rows)
    # One candidate: nothing to choose from, no spread.
    one = rows[0]
    assert float(one["q_std"]) == 0.0 and float(one["q_max_minus_mean"]) == 0.0
    assert float(one["q_chosen"]) == pytest.approx(float(one["q_samples_mean"]))
    # Chunks of 5 executed open-loop: ceil(length / 5) decisions per episode (toy episodes are at most 50 steps).
    assert 2 <= int(one["decisions"]) <= 2 * 10 and 0.0 <= float(one["success"]) <= 1.0


def test_the_output_may_not_be_inside_the_run_folder(qc_run):
    before = folder_state(qc_run)
    with pytest.raises(SystemExit):
        main([str(qc_run), "--out", str(qc_run / "probe.csv")])
    assert folder_state(qc_run) == before


def test_the_rebuilt_run_is_the_folders_config(qc_run):
    run = run_from_folder(qc_run)
    assert run.record() == json.loads((qc_run / "config.json").read_text())


def test_a_decision_is_best_of_n_actions_for_the_same_noise(qc_run, tmp_path):
    model, _ = load_model(run_from_folder(qc_run), tmp_path)
    policy = model.policy
    generator = th.Generator().manual_seed(0)
    for n_samples in (1, 3, 8):
        features = th.randn(1, policy.features_dim, generator=generator)
        noise = th.randn(n_samples, policy.flat_action_dim, generator=generator)
        with th.no_grad():
            decision = best_of_n_decision(policy, features, noise)
            expected = best_of_n_actions(
                policy.flow, policy.critic, features, n_samples, policy.flow_steps, policy.q_agg, noise=noise[None]
            )
        assert th.equal(decision.chunk, expected[0])
        assert decision.scores.shape == (n_samples,) and decision.chosen == int(decision.scores.argmax())


def test_one_sample_is_the_flow_alone(qc_run, tmp_path):
    model, _ = load_model(run_from_folder(qc_run), tmp_path)
    policy = model.policy
    generator = th.Generator().manual_seed(1)
    features = th.randn(1, policy.features_dim, generator=generator)
    noise = th.randn(1, policy.flat_action_dim, generator=generator)
    steps = policy.flow_steps
    with th.no_grad():
        decision = best_of_n_decision(policy, features, noise)
        # Euler integration of the flow by hand (docs/algorithms.md §3), with its forward pass on concat[s, x, t].
        actions = noise.clone()
        for i in range(steps):
            actions = actions + policy.flow(features, actions, th.full((1, 1), i / steps)) / steps
        expected = actions.clamp(-1.0, 1.0)
    assert decision.chosen == 0
    th.testing.assert_close(decision.chunk, expected[0], rtol=1e-5, atol=1e-6)


class KnownCritic(nn.Module):
    """Two critics whose scores are known: Q_1 = a_0 and Q_2 = 2 a_0, a_0 the chunk's first coordinate."""

    def forward(self, observations: th.Tensor, actions: th.Tensor) -> th.Tensor:
        return th.stack([actions[:, 0], 2.0 * actions[:, 0]])


@pytest.mark.parametrize(
    ("q_agg", "scores"),
    [("mean", [0.75, -0.3, 1.35, 0.15]), ("min", [0.5, -0.4, 0.9, 0.1])],
)
def test_the_scores_of_a_known_critic(qc_run, tmp_path, monkeypatch, q_agg, scores):
    model, _ = load_model(run_from_folder(qc_run), tmp_path)
    policy = model.policy
    monkeypatch.setattr(policy, "critic", KnownCritic())
    monkeypatch.setattr(policy, "q_agg", q_agg)
    monkeypatch.setattr(policy, "flow_steps", 0)  # no Euler step: each candidate is its noise, clipped to [-1, 1]
    noise = th.zeros(4, policy.flat_action_dim)
    noise[:, 0] = th.tensor([0.5, -0.2, 0.9, 0.1])
    noise[:, 1] = 3.0  # clipped to 1
    with th.no_grad():
        decision = best_of_n_decision(policy, th.zeros(1, policy.features_dim), noise)
    th.testing.assert_close(decision.scores, th.tensor(scores))
    assert decision.chosen == 2
    assert decision.chunk[0] == pytest.approx(0.9) and decision.chunk[1] == 1.0
    statistics = score_statistics([decision.scores.numpy()], [decision.chosen])
    assert statistics["q_chosen"] == pytest.approx(scores[2])
    assert statistics["q_max_minus_mean"] == pytest.approx(scores[2] - np.mean(scores))


def test_score_statistics_by_hand():
    # Two decisions: scores (1, 2, 3, 6), the last one chosen; scores (0, 0), the second chosen.
    statistics = score_statistics([np.array([1.0, 2.0, 3.0, 6.0]), np.array([0.0, 0.0])], [3, 1])
    assert statistics["q_chosen"] == pytest.approx((6.0 + 0.0) / 2)
    assert statistics["q_samples_mean"] == pytest.approx((3.0 + 0.0) / 2)
    assert statistics["q_max_minus_mean"] == pytest.approx((3.0 + 0.0) / 2)
    # Standard deviation over the candidates (ddof 0): sqrt((4 + 1 + 0 + 9) / 4), then the mean over decisions.
    assert statistics["q_std"] == pytest.approx((np.sqrt(14.0 / 4.0) + 0.0) / 2)


def test_a_run_folder_without_a_checkpoint_is_refused(qc_run, tmp_path, capsys):
    run_dir = tmp_path / TOY_TASK / "QC" / "seed0"
    run_dir.mkdir(parents=True)
    shutil.copy(qc_run / "config.json", run_dir / "config.json")
    with pytest.raises(ProbeError, match=r"has no checkpoint .*latest\.json does not exist"):
        probe_run(run_dir, episodes=1)
    assert main([str(run_dir), "--out", str(tmp_path / "probe.csv")]) == 1
    assert "has no checkpoint" in capsys.readouterr().err
    assert not (tmp_path / "probe.csv").exists()
    with pytest.raises(ProbeError, match=r"has no checkpoint 'ckpt-00009'; it has \['ckpt-00001'\]"):
        probe_run(qc_run, episodes=1, checkpoint="ckpt-00009")
    with pytest.raises(ProbeError, match="not a run folder"):
        probe_run(tmp_path / "nowhere", episodes=1)


def test_a_policy_without_best_of_n_has_one_actor_row(tmp_path):
    run_dir = finished_run(tmp_path, "QC-FQL")
    (row,) = probe_run(run_dir, samples=[1, 8], episodes=1)
    assert row["samples"] == "actor" and row["method"] == "QC-FQL"
    assert row["q_std"] == 0.0 and row["q_max_minus_mean"] == 0.0 and row["q_chosen"] == row["q_samples_mean"]
    assert np.isfinite(row["q_chosen"]) and row["decisions"] >= 1
