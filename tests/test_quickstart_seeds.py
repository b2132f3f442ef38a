"""The committed quickstart runs (five seeds on an AMD CPU with AVX-512, seed 0 where torch reports AVX2 and on an Intel
CPU with AVX-512): their READMEs' tables are what each run's eval.csv holds, and the runs are the quickstart's config."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

ROOT = Path(__file__).parents[1]
RUNS = ROOT / "results" / "quickstart-seeds"
AVX2_RESULTS = ROOT / "results" / "quickstart-avx2"
AVX2_RUN = AVX2_RESULTS / "lift-mh-low_dim" / "QC" / "seed0"
XEON_RESULTS = ROOT / "results" / "quickstart-xeon"
XEON_RUN = XEON_RESULTS / "lift-mh-low_dim" / "QC" / "seed0"


def run_folder(seed: int) -> Path:
    return RUNS / "lift-mh-low_dim" / "QC" / f"seed{seed}"


def machines(run: Path, key: str) -> set[str]:
    """What a run's sessions recorded of their machine under ``key`` (``cpu``, ``cpu_capability``)."""
    sessions = json.loads((run / "versions.json").read_text(encoding="utf-8"))["sessions"]
    return {session["machine"][key] for session in sessions}


def cpu_capabilities(run: Path) -> set[str]:
    """The PyTorch CPU capabilities a run's sessions recorded."""
    return machines(run, "cpu_capability")


def successes(run: Path) -> list[float]:
    return list(pd.read_csv(run / "eval.csv")["success"])


def readme_rows() -> dict[int, list[float]]:
    """The README's per-seed table: seed -> its three successes."""
    rows = {}
    for line in (RUNS / "README.md").read_text(encoding="utf-8").splitlines():
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if line.startswith("| ") and cells[0].isdigit():
            rows[int(cells[0])] = [float(cell) for cell in cells[1:]]
    return rows


def test_readme_table_is_the_runs_eval_files():
    rows = readme_rows()
    assert sorted(rows) == [0, 1, 2, 3, 4]
    for seed, successes in rows.items():
        evaluations = pd.read_csv(run_folder(seed) / "eval.csv")
        assert list(evaluations["step"]) == [1500, 3000, 4500]
        assert successes == pytest.approx(list(evaluations["success"]))


def test_readme_means_are_the_mean_of_its_table():
    rows = readme_rows()
    text = (RUNS / "README.md").read_text(encoding="utf-8")
    offline_end = sum(row[1] for row in rows.values()) / len(rows)
    online_end = sum(row[2] for row in rows.values()) / len(rows)
    assert f"{offline_end:.2f} [" in text and f"{online_end:.2f} [" in text


def test_runs_are_the_quickstart_config_on_five_seeds():
    quickstart = yaml.safe_load((ROOT / "benchmarks" / "configs" / "quickstart.yaml").read_text(encoding="utf-8"))
    seeds = yaml.safe_load((ROOT / "benchmarks" / "configs" / "quickstart-seeds.yaml").read_text(encoding="utf-8"))
    for key in ("tasks", "methods", "protocol", "datasets", "hyperparameters"):
        assert seeds[key] == quickstart[key], key
    assert seeds["seeds"] == [0, 1, 2, 3, 4]
    for seed in seeds["seeds"]:
        config = json.loads((run_folder(seed) / "config.json").read_text())
        assert config["seed"] == seed
        assert cpu_capabilities(run_folder(seed)) == {"AVX512"}
        assert machines(run_folder(seed), "cpu") == {"AMD EPYC"}


def test_readme_quotes_the_five_seeds_and_the_quickstarts_seed():
    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    summary = (RUNS / "report" / "summary.md").read_text(encoding="utf-8")
    quoted = readme.split("five seeds of the same config give ", 1)[1].split(" after the online one", 1)[0]
    offline, online = quoted.split(" after the offline phase and ")
    row = next(line for line in summary.splitlines() if line.startswith("| robomimic | robomimic | QC |"))
    assert row.endswith(f"| {offline} | {online} |"), (row, offline, online)
    offline_successes, online_successes = (round(success * 20) for success in successes(run_folder(0))[1:])
    assert (
        f"On an AMD EPYC with AVX-512, QC succeeds in {offline_successes} of 20 episodes after the offline phase and "
        f"{online_successes} of 20 after the online phase" in readme
    )


@pytest.mark.parametrize(
    ("run", "capability", "cpu"),
    [(AVX2_RUN, "AVX2", "AMD EPYC"), (XEON_RUN, "AVX512", "Intel(R) Xeon(R)")],
    ids=["avx2", "xeon"],
)
def test_run_is_the_quickstarts_seed_0_on_other_kernels(run, capability, cpu):
    quickstart = json.loads((run_folder(0) / "config.json").read_text(encoding="utf-8"))
    assert json.loads((run / "config.json").read_text(encoding="utf-8")) == quickstart
    assert cpu_capabilities(run) == {capability}
    assert all(name.startswith(cpu) for name in machines(run, "cpu"))
    evaluations = pd.read_csv(run / "eval.csv")
    offline = evaluations["phase"] == "offline"
    assert list(evaluations["success"][offline]) == successes(run_folder(0))[: offline.sum()]


def test_avx2_readme_table_and_critic_losses_are_the_runs_files():
    text = (AVX2_RESULTS / "README.md").read_text(encoding="utf-8")
    for label, run in (("AVX2 (this run)", AVX2_RUN), ("AVX512 (seed 0 in `results/quickstart-seeds`)", run_folder(0))):
        assert f"| {label} | " + " | ".join(f"{success:.2f}" for success in successes(run)) + " |" in text
    first_losses = []
    for run in (AVX2_RUN, run_folder(0)):
        stats = pd.read_csv(run / "train_stats.csv", dtype={"value": str})
        first_losses.append(stats[stats["tag"] == "offline/critic_loss"].iloc[0])
    assert first_losses[0]["step"] == first_losses[1]["step"] == 1000
    assert f"{first_losses[0]['value']} here, {first_losses[1]['value']} with AVX512" in " ".join(text.split())


@pytest.mark.parametrize(
    ("run", "where"),
    [(AVX2_RUN, "where torch reports AVX2"), (XEON_RUN, "on an Intel Xeon with AVX-512")],
    ids=["avx2", "xeon"],
)
def test_readme_quotes_the_runs_on_other_kernels(run, where):
    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    offline_successes, online_successes = (round(success * 20) for success in successes(run)[1:])
    assert f"{offline_successes} and {online_successes} of 20 {where}" in readme


def test_xeon_readme_table_and_critic_losses_are_the_runs_files():
    text = (XEON_RESULTS / "README.md").read_text(encoding="utf-8")
    rows = (
        ("Intel Xeon, AVX512 (this run)", XEON_RUN),
        ("AMD EPYC, AVX512 (seed 0 in `results/quickstart-seeds`)", run_folder(0)),
    )
    for label, run in rows:
        assert f"| {label} | " + " | ".join(f"{success:.2f}" for success in successes(run)) + " |" in text
    losses = []
    for run in (XEON_RUN, run_folder(0)):
        stats = pd.read_csv(run / "train_stats.csv", dtype={"value": str})
        losses.append(stats[stats["tag"] == "offline/critic_loss"].set_index("step")["value"])
    differing = losses[0].index[losses[0].astype(float) != losses[1].astype(float)]
    first = differing[0]
    assert f"first differs at {first} steps" in " ".join(text.split())
    assert f"{losses[0][first]} here, {losses[1][first]} on the AMD EPYC" in " ".join(text.split())
