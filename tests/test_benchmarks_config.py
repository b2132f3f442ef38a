"""Benchmark configs: every bad input is refused before any run starts, and the paper's settings are built in."""

from __future__ import annotations

from pathlib import Path

import pytest

from qc_sb3.benchmarks.run import main, run_benchmark
from qc_sb3.benchmarks.runner.config import ConfigError, load_config
from qc_sb3.benchmarks.runner.planning import plan_runs

from test_benchmarks_toys import TOY_TASK, register_toy_suite, toy_config, write_config

CONFIGS_DIR = Path(__file__).parents[1] / "benchmarks" / "configs"


@pytest.fixture(autouse=True, scope="module")
def toy_suite():
    register_toy_suite()


def config_error(data: dict) -> str:
    with pytest.raises(ConfigError) as error:
        load_config(data)
    return str(error.value)


def test_toy_config_is_valid():
    config = load_config(toy_config())
    assert config.tasks == (TOY_TASK,)
    assert list(config.methods) == ["QC"]
    assert config.protocol.offline_steps == 40 and config.protocol.eval_interval == 20


def test_unknown_task_is_named_with_the_valid_ones():
    message = config_error(toy_config(tasks=[TOY_TASK, "cube-sextuple-play-singletask-task1-v0"]))
    assert "unknown task 'cube-sextuple-play-singletask-task1-v0'" in message
    assert TOY_TASK in message.split("valid tasks:")[1]


def test_unknown_method_is_named_with_the_valid_ones():
    message = config_error(toy_config(methods=["QC", "DQN"]))
    assert "unknown method 'DQN'" in message
    valid = message.split("valid methods:")[1]
    for method in ("QC", "QC-FQL", "BFN", "BFN-n", "FQL", "FQL-n", "RLPD", "RLPD-AC", "QC-RLPD"):
        assert method in valid


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"protcol": {}}, "unknown key 'protcol' in config"),
        ({"protocol": {"offline_steps": 40, "eval_every": 5}}, "unknown key 'eval_every' in protocol"),
        ({"execution": {"workers": 1, "gpus": 1}}, "unknown key 'gpus' in execution"),
        ({"datasets": {"toy": {"source": "generate", "episodes": 3, "episode_length": 9}}}, "unknown key 'episode_length'"),
        ({"datasets": {"toy": {"source": "download"}}}, "source: official or source: generate"),
        ({"datasets": {}}, "datasets.toy must be a mapping"),
        ({"datasets": {"toy": {"source": "generate"}}}, "needs 'episodes'"),
        ({"datasets": {"toy": {"source": "generate", "episodes": 0}}}, "datasets.toy.episodes must be >= 1"),
        ({"datasets": {"toy": {"source": "generate", "episodes": 2}, "atari": {}}}, "unknown suite 'atari'"),
        ({"hyperparameters": {"learning_rat": 1e-3}}, "unknown hyperparameter 'learning_rat'"),
        ({"hyperparameters": {"learning_starts": "soon"}}, "hyperparameters.learning_starts must be like its default 5000"),
        ({"hyperparameters": {"seed": 3}}, "hyperparameters.seed cannot be set"),
        ({"methods": {"QC": {"alpha": 10.0}}}, "unknown hyperparameter 'alpha' in methods.QC; valid for QC:"),
        ({"methods": {"QC": {"offline_gradient_steps": 10}}}, "set by protocol.offline_steps"),
        (
            {"protocol": {"offline_steps": -5, "online_steps": 40, "eval_interval": 20}},
            "protocol.offline_steps must be an integer >= 0",
        ),
        (
            {"protocol": {"offline_steps": 40, "online_steps": 30, "eval_interval": 20}},
            "must divide protocol.online_steps (30)",
        ),
        ({"protocol": {"eval_episodes": 0}}, "protocol.eval_episodes must be an integer >= 1"),
        ({"protocol": {"eval_interval": 2.5}}, "protocol.eval_interval must be an integer >= 1"),
        ({"seeds": [0, 0]}, "seeds lists a seed more than once"),
        ({"seeds": -1}, "seeds must be"),
        ({"env": {"sparse": True}}, "unknown env key 'sparse'"),
        ({"env": {"max_episode_steps": 0}}, "env.max_episode_steps must be an integer >= 1"),
        ({"execution": {"workers": 0}}, "execution.workers must be an integer >= 1"),
        ({"tasks": []}, "tasks must be a non-empty list"),
    ],
)
def test_bad_input_is_refused_with_a_message_that_names_it(changes, expected):
    assert expected in config_error(toy_config(**changes))


def test_every_problem_is_reported_at_once():
    message = config_error(toy_config(methods=["QC", "DQN"], protocol={"eval_episodes": -1}, extra=1))
    assert "unknown method 'DQN'" in message
    assert "protocol.eval_episodes" in message
    assert "unknown key 'extra'" in message


def test_missing_official_folder_and_file_are_refused(tmp_path):
    missing = tmp_path / "nowhere"
    message = config_error(toy_config(datasets={"toy": {"source": "official", "directory": str(missing)}}))
    assert str(missing / "point-reach.npz") in message
    empty = tmp_path / "empty"
    empty.mkdir()
    message = config_error(toy_config(datasets={"toy": {"source": "official", "directory": str(empty)}}))
    assert "does not exist" in message and str(empty / "point-reach.npz") in message


def test_a_bad_config_stops_the_command_before_any_run(tmp_path, capsys):
    config = write_config(tmp_path / "bad.yaml", toy_config(methods=["QC", "DQN"]))
    out = tmp_path / "results"
    assert main([str(config), "--out", str(out)]) == 2
    assert "unknown method 'DQN'" in capsys.readouterr().out
    assert not out.exists()


def test_a_missing_config_file_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        run_benchmark(tmp_path / "missing.yaml", out=tmp_path / "results")


def test_overrides_apply_globally_then_per_method():
    data = toy_config(
        methods={"QC": {"batch_size": 8, "policy_kwargs": {"net_arch": [8]}}, "QC-FQL": None},
        hyperparameters={"batch_size": 32, "alpha": 3.0, "policy_kwargs": {"net_arch": [32, 32], "critic_layer_norm": False}},
    )
    runs = {run.method: run for run in plan_runs(load_config(data), "out")}
    qc, qc_fql = runs["QC"].hyperparameters, runs["QC-FQL"].hyperparameters
    assert qc["batch_size"] == 8 and qc_fql["batch_size"] == 32
    # Nested mappings merge key by key: the method's net_arch, the global critic_layer_norm.
    assert qc["policy_kwargs"] == {"net_arch": [8], "critic_layer_norm": False}
    assert qc_fql["policy_kwargs"] == {"net_arch": [32, 32], "critic_layer_norm": False}
    # A global argument applies only to the methods that take it.
    assert qc_fql["alpha"] == 3.0 and "alpha" not in qc


def test_seeds_come_from_the_command_then_the_config_then_the_suite():
    config = load_config(toy_config(seeds=None))
    assert [run.seed for run in plan_runs(config, "out")] == [0, 1]  # the toy suite's default: 2
    assert [run.seed for run in plan_runs(load_config(toy_config(seeds=3)), "out")] == [0, 1, 2]
    assert [run.seed for run in plan_runs(config, "out", seeds=[7, 9])] == [7, 9]
    runs = plan_runs(config, "results")
    assert [run.run_dir for run in runs] == [str(Path("results") / TOY_TASK / "QC" / f"seed{seed}") for seed in (0, 1)]


def test_a_slice_of_methods_plans_the_same_runs_as_the_whole_config():
    config = load_config(toy_config(methods={"QC": {"batch_size": 8}, "QC-FQL": None, "BFN": None}, seeds=[0, 1]))
    whole = {(run.method, run.seed): run for run in plan_runs(config, "out")}
    # Selected in another order and with a repeat: the config's order, each once.
    sliced = plan_runs(config, "out", methods=["BFN", "QC", "BFN"], tasks=[TOY_TASK])
    assert [(run.method, run.seed) for run in sliced] == [("QC", 0), ("QC", 1), ("BFN", 0), ("BFN", 1)]
    for run in sliced:
        expected = whole[(run.method, run.seed)]
        assert (run.run_dir, run.hyperparameters) == (expected.run_dir, expected.hyperparameters)
    assert sliced[0].hyperparameters["batch_size"] == 8


@pytest.mark.parametrize(
    "selection, expected",
    [
        ({"methods": ["QC", "FQL"]}, "(--methods):\n  - 'FQL' is not a method of this config; its methods: QC, QC-FQL"),
        ({"methods": []}, "no method selected; expected some of the config's: QC, QC-FQL"),
        ({"tasks": ["cube"]}, f"(--tasks):\n  - 'cube' is not a task of this config; its tasks: {TOY_TASK}"),
    ],
)
def test_a_selection_outside_the_config_is_refused_by_name(selection, expected):
    config = load_config(toy_config(methods=["QC", "QC-FQL"]))
    with pytest.raises(ConfigError) as error:
        plan_runs(config, "out", **selection)
    assert expected in str(error.value)


def test_the_command_runs_only_the_selected_methods(tmp_path):
    config = write_config(tmp_path / "toy.yaml", toy_config(methods=["QC", "QC-FQL"], seeds=[0]))
    out = tmp_path / "results"
    assert main([str(config), "--out", str(out), "--workers", "0", "--no-report", "--methods", "QC-FQL"]) == 0
    assert sorted(path.name for path in (out / TOY_TASK).iterdir()) == ["QC-FQL"]
    assert (out / TOY_TASK / "QC-FQL" / "seed0" / "DONE").exists()
    assert main([str(config), "--out", str(out), "--methods", "BFN"]) == 2
    assert sorted(path.name for path in (out / TOY_TASK).iterdir()) == ["QC-FQL"]


def og(family: str, number: int) -> str:
    """An OGBench task name."""
    return f"{family}-play-singletask-task{number}-v0"


OGBENCH_GENERATE = {"ogbench": {"source": "generate", "episodes": 10}, "robomimic": {"source": "generate", "episodes": 10}}


def paper_run(task: str, method: str):
    """The resolved run of a task and method under the paper's protocol (the config gives no hyperparameters)."""
    pytest.importorskip("qc_sb3.envs.ogbench")
    config = load_config({"tasks": [task], "methods": [method], "datasets": OGBENCH_GENERATE})
    return plan_runs(config, "out")


# Expected values written from docs/algorithms.md §4-§6 (the paper's table), not from the code.
@pytest.mark.parametrize(
    ("task", "method", "expected", "env_kwargs", "n_seeds"),
    [
        (
            og("cube-triple", 2),
            "QC",
            {"chunk_size": 5, "action_chunking": True, "actor_num_samples": 32, "offline_sparse_rewards": False},
            {"max_episode_steps": 1000, "sparse": False},
            4,
        ),
        (
            og("puzzle-3x3", 4),
            "QC",
            {"chunk_size": 5, "actor_num_samples": 64, "offline_sparse_rewards": True},
            {"max_episode_steps": 500, "sparse": True},
            4,
        ),
        (
            og("scene", 1),
            "QC-FQL",
            {"chunk_size": 5, "alpha": 300.0, "offline_sparse_rewards": True},
            {"max_episode_steps": 750, "sparse": True},
            4,
        ),
        (
            og("cube-quadruple", 3),
            "QC-FQL",
            {"alpha": 100.0},
            {"max_episode_steps": 1000, "sparse": False},
            4,
        ),
        (
            og("cube-double", 2),
            "BFN",
            {"chunk_size": 1, "actor_num_samples": 4},
            {"max_episode_steps": 500},
            4,
        ),
        (
            og("cube-double", 2),
            "BFN-n",
            {"chunk_size": 5, "action_chunking": False, "actor_num_samples": 4},
            {},
            4,
        ),
        (og("puzzle-3x3", 1), "FQL", {"chunk_size": 1, "alpha": 100.0}, {}, 4),
        (og("cube-triple", 1), "FQL", {"chunk_size": 1, "alpha": 300.0}, {}, 4),
        (og("cube-double", 5), "FQL-n", {"chunk_size": 5, "action_chunking": False, "alpha": 100.0}, {}, 4),
        (og("cube-single", 1), "QC-FQL", {"alpha": 300.0}, {"max_episode_steps": 200}, 4),  # cube-double's
        ("lift-mh-low_dim", "QC", {"chunk_size": 5, "actor_num_samples": 16}, {"max_episode_steps": 300}, 5),
        ("square-mh-low_dim", "QC-FQL", {"alpha": 10000.0}, {"max_episode_steps": 400}, 5),
        ("can-mh-low_dim", "FQL-n", {"alpha": 10000.0, "action_chunking": False}, {"max_episode_steps": 300}, 5),
        (og("cube-double", 1), "RLPD", {"chunk_size": 1, "n_critics": 10, "bc_alpha": 0.0}, {}, 4),
        (og("cube-double", 1), "RLPD-AC", {"chunk_size": 5, "bc_alpha": 0.0}, {}, 4),
        (og("cube-double", 1), "QC-RLPD", {"chunk_size": 5, "bc_alpha": 0.01}, {}, 4),
    ],
)
def test_paper_settings_are_built_in(task, method, expected, env_kwargs, n_seeds):
    runs = paper_run(task, method)
    assert [run.seed for run in runs] == list(range(n_seeds))
    run = runs[0]
    for key, value in expected.items():
        assert run.hyperparameters[key] == value, key
    for key, value in env_kwargs.items():
        assert run.env_kwargs[key] == value, key
    # docs/algorithms.md §3, §5: shared by every method: batch 256, Adam 3e-4, tau 0.005, gamma 0.99, 4 x 512 (the policies'
    # default when policy_kwargs is None), updates from 5000 online steps, the buffer holds every online step.
    hyperparameters = run.hyperparameters
    assert hyperparameters["batch_size"] == 256 and hyperparameters["learning_rate"] == 3e-4
    assert hyperparameters["tau"] == 0.005 and hyperparameters["gamma"] == 0.99
    assert hyperparameters["policy_kwargs"] is None
    assert hyperparameters["learning_starts"] == 5000
    assert hyperparameters["buffer_size"] == 1_000_000
    protocol = run.protocol
    assert (protocol.offline_steps, protocol.online_steps, protocol.eval_interval, protocol.eval_episodes) == (
        1_000_000,
        1_000_000,
        100_000,
        50,
    )
    # docs/algorithms.md §4: the RLPD family has no offline phase.
    assert run.offline_steps == (0 if method in ("RLPD", "RLPD-AC", "QC-RLPD") else 1_000_000)
    if method in ("QC", "BFN", "BFN-n", "QC-FQL", "FQL", "FQL-n"):
        assert hyperparameters["flow_steps"] == 10 and hyperparameters["n_critics"] == 2 and hyperparameters["q_agg"] == "mean"


@pytest.mark.parametrize(
    "name",
    [
        "paper.yaml",
        "quickstart.yaml",
        "cpu.yaml",
        "evidence-tasks-pilot.yaml",
        "evidence-tasks-puzzle.yaml",
        "evidence-tasks-can.yaml",
        "image-check.yaml",
    ],
)
def test_shipped_configs_are_valid(name, tmp_path):
    pytest.importorskip("qc_sb3.envs.ogbench")
    data_dirs = {}
    if name == "paper.yaml":
        # The official files' layout, as empty files: validation checks that they exist, nothing reads them here.
        ogbench, robomimic = tmp_path / "ogbench", tmp_path / "robomimic"
        ogbench.mkdir()
        for family in ("scene", "puzzle-3x3", "cube-double", "cube-triple"):
            (ogbench / f"{family}-play-v0.npz").touch()
        (ogbench / "cube-quadruple-play-100m-v0").mkdir()
        (ogbench / "cube-quadruple-play-100m-v0" / "cube-quadruple-play-100m-v0-000.npz").touch()
        for task in ("lift", "can", "square"):
            (robomimic / task / "mh").mkdir(parents=True)
            (robomimic / task / "mh" / "low_dim_v15.hdf5").touch()
        data_dirs = {"ogbench": ogbench, "robomimic": robomimic}
    from qc_sb3.benchmarks.run import apply_data_dirs
    from qc_sb3.benchmarks.runner.config import read_config_data

    data = apply_data_dirs(read_config_data(CONFIGS_DIR / name), [f"{suite}={path}" for suite, path in data_dirs.items()])
    config = load_config(data)
    runs = plan_runs(config, tmp_path / "out")
    assert runs
    if name == "paper.yaml":
        assert len(config.tasks) == 28 and len(config.methods) == 9
        assert config.protocol.offline_steps == 1_000_000 and config.protocol.online_steps == 1_000_000
