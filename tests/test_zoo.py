"""rl-zoo3 integration (issue 15, item 9): the shipped hyperparameter files hold the paper's settings, and rl-zoo3
trains qc_sb3's algorithms through ``python -m qc_sb3.zoo`` when it is installed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from qc_sb3 import QC, QCFQL, RLPD
from qc_sb3.zoo import ZOO_ALGORITHMS, hyperparams_file, register
from qc_sb3.zoo.__main__ import zoo_arguments

REPOSITORY = Path(__file__).parents[1]
# The paper's tasks (docs/algorithms.md §4, §6): OGBench's single-task ids and robomimic's, with their domain.
OGBENCH_DOMAINS = ("scene", "puzzle-3x3", "cube-double", "cube-triple", "cube-quadruple")
PAPER_ENVS = {
    **{
        f"{domain}-singletask-task{k}-v0": (domain, f"ogbench/{domain}-play-singletask-task{k}-v0")
        for domain in OGBENCH_DOMAINS
        for k in range(1, 6)
    },
    **{
        f"robomimic/{task}-v0": ("robomimic", f"robomimic/{task}-v0")
        for task in ("lift-mh-low_dim", "can-mh-low_dim", "square-mh-low_dim")
    },
}
# The paper's per-domain settings, written out: N of QC, alpha of QC-FQL.
QC_N = {"scene": 32, "puzzle-3x3": 64, "cube-double": 32, "cube-triple": 32, "cube-quadruple": 32, "robomimic": 16}
QC_FQL_ALPHA = {
    "scene": 300,
    "puzzle-3x3": 300,
    "cube-double": 300,
    "cube-triple": 100,
    "cube-quadruple": 100,
    "robomimic": 10000,
}
SPARSE_DOMAINS = {"scene", "puzzle-3x3"}


def load_hyperparams(algo: str) -> dict:
    return yaml.safe_load(hyperparams_file(algo).read_text())


def test_the_zoo_names_the_three_algorithms():
    assert ZOO_ALGORITHMS == {"qc": QC, "qc_fql": QCFQL, "rlpd": RLPD}
    with pytest.raises(ValueError, match="unknown qc_sb3 algorithm 'sac'"):
        hyperparams_file("sac")


@pytest.mark.parametrize("algo", ["qc", "qc_fql", "rlpd"])
def test_hyperparameter_files_hold_the_paper_settings(algo):
    hyperparams = load_hyperparams(algo)
    assert set(hyperparams) == {*PAPER_ENVS, "Pendulum-v1"}
    expected_chunk_size = 1 if algo == "rlpd" else 5
    for env_id, (domain, dataset_id) in PAPER_ENVS.items():
        entry = hyperparams[env_id]
        expected = {
            "policy": "MlpPolicy",
            "n_timesteps": 1_000_000,
            "offline_dataset": dataset_id,
            "chunk_size": expected_chunk_size,
        }
        if algo == "qc":
            expected["actor_num_samples"] = QC_N[domain]
        if algo == "qc_fql":
            expected["alpha"] = QC_FQL_ALPHA[domain]
        if domain in SPARSE_DOMAINS:
            expected.update(offline_sparse_rewards=True, env_wrapper="qc_sb3.envs.ogbench.tasks.SparseReward")
        assert entry == expected, env_id
    # Every other key is a constructor argument of the algorithm (rl-zoo3 passes them through).
    toy = hyperparams["Pendulum-v1"]
    assert toy.get("offline_gradient_steps", 0) == 0 and "offline_dataset" not in toy


def test_train_arguments_get_the_shipped_file_unless_one_is_given():
    assert zoo_arguments("train", ["--algo", "qc", "--env", "Pendulum-v1"])[-2:] == [
        "--conf-file",
        str(hyperparams_file("qc")),
    ]
    assert zoo_arguments("train", ["--algo=rlpd"])[-1] == str(hyperparams_file("rlpd"))
    assert zoo_arguments("train", ["--algo", "qc", "--conf-file", "mine.yml"]) == ["--algo", "qc", "--conf-file", "mine.yml"]
    assert zoo_arguments("train", ["--algo", "sac"]) == ["--algo", "sac"]
    assert zoo_arguments("enjoy", ["--algo", "qc"]) == ["--algo", "qc"]


def test_rl_zoo3_trains_qc_end_to_end(tmp_path):
    rl_zoo3_utils = pytest.importorskip("rl_zoo3.utils", reason="rl_zoo3 is not installed (pip install -e '.[zoo]')")
    assert register()
    assert {name: rl_zoo3_utils.ALGOS[name] for name in ZOO_ALGORITHMS} == ZOO_ALGORITHMS
    command = [sys.executable, "-m", "qc_sb3.zoo", "train", "--algo", "qc", "--env", "Pendulum-v1", "-n", "150"]
    command += ["--seed", "0", "--eval-freq", "-1", "-f", str(tmp_path), "--num-threads", "1"]
    command += ["-params", "learning_starts:100", "batch_size:16", "policy_kwargs:dict(net_arch=[16])"]
    result = subprocess.run(command, cwd=REPOSITORY, capture_output=True, text=True, timeout=600, check=False)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert (tmp_path / "qc" / "Pendulum-v1_1" / "Pendulum-v1.zip").is_file()
    model = QC.load(tmp_path / "qc" / "Pendulum-v1_1" / "Pendulum-v1.zip")
    assert model.num_timesteps == 150 and model._n_updates == 50
