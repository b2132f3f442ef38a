"""One writer per run folder: OS file locks that die with their process, and two runners on one results folder."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch as th

from qc_sb3.benchmarks.runner.config import load_config
from qc_sb3.benchmarks.runner.datasets import prepare_datasets
from qc_sb3.benchmarks.runner.evaluations import EVAL_COLUMNS
from qc_sb3.benchmarks.runner.locks import FolderBusyError, folder_lock
from qc_sb3.benchmarks.runner.planning import plan_runs
from qc_sb3.benchmarks.runner.runs import execute_run

from test_benchmarks_toys import TOY_TASK, register_toy_suite, toy_config, write_config

REPOSITORY = Path(__file__).parents[1]
TESTS = Path(__file__).parent
PROTOCOL = {"offline_steps": 100, "online_steps": 0, "eval_interval": 50, "eval_episodes": 1}
# A runner process with the toy suite registered (everything in that process: --workers 0).
RUNNER = (
    "import sys; from test_benchmarks_toys import register_toy_suite; register_toy_suite(); "
    "from qc_sb3.benchmarks.run import main; sys.exit(main(sys.argv[1:]))"
)


@pytest.fixture(autouse=True, scope="module")
def toy_suite():
    register_toy_suite()


def python_process(code: str, *args: str, **kwargs) -> subprocess.Popen:
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPOSITORY), str(TESTS)])}
    return subprocess.Popen([sys.executable, "-c", code, *args], env=environment, text=True, **kwargs)


def test_a_lock_held_by_a_killed_process_is_free_at_once(tmp_path):
    holder = python_process(
        "import sys, time; from qc_sb3.benchmarks.runner.locks import folder_lock\n"
        "with folder_lock(sys.argv[1]):\n    print('locked', flush=True); time.sleep(120)",
        str(tmp_path),
        stdout=subprocess.PIPE,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(FolderBusyError, match=f"locked by pid {holder.pid}"), folder_lock(tmp_path):
            pass
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    # kill -9 gave the holder no chance to clean up; the kernel released its lock with its files.
    assert (tmp_path / ".lock").exists()
    with folder_lock(tmp_path):
        pass


def test_a_run_another_process_holds_is_skipped_and_left_untouched(tmp_path):
    config = load_config(toy_config(protocol=PROTOCOL))
    (run,) = prepare_datasets(plan_runs(config, tmp_path / "results"), tmp_path / "datasets")
    n_threads = th.get_num_threads()
    # flock locks belong to an open file: a second open, even in this process, is another holder.
    with folder_lock(run.run_dir):
        summary = execute_run(run)
    th.set_num_threads(n_threads)
    assert summary["status"] == "busy"
    assert f"locked by pid {os.getpid()}" in summary["error"] and str(run.run_dir) in summary["error"]
    assert [path.name for path in Path(run.run_dir).iterdir()] == [".lock"]


def policy_widths(run_dir: Path) -> list[int]:
    """The hidden widths of the checkpoint's flow network (its Linear layers' output sizes, the last excluded)."""
    (checkpoint,) = (run_dir / "checkpoints").glob("ckpt-*")
    policy = th.load(checkpoint / "tensors.pt", weights_only=True)["parameters"]["policy"]
    weights = [tensor for name, tensor in policy.items() if name.startswith("flow.") and name.endswith("weight")]
    return [weight.shape[0] for weight in weights if weight.ndim == 2][:-1]


@pytest.mark.parametrize("same_config", [False, True])
def test_two_runners_on_one_results_folder_leave_it_consistent(tmp_path, same_config):
    widths = {"a": [16, 16], "b": [16, 16] if same_config else [8]}
    hyperparameters = toy_config()["hyperparameters"]
    configs = {
        name: write_config(
            tmp_path / f"{name}.yaml",
            toy_config(protocol=PROTOCOL, hyperparameters={**hyperparameters, "policy_kwargs": {"net_arch": width}}),
        )
        for name, width in widths.items()
    }
    out = tmp_path / "results"
    runners = {
        name: python_process(
            RUNNER,
            *(str(config), "--out", str(out), "--workers", "0", "--no-report"),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        for name, config in configs.items()
    }
    outputs = {name: runner.communicate(timeout=300)[0] for name, runner in runners.items()}
    codes = {name: runner.returncode for name, runner in runners.items()}
    run_dir = out / TOY_TASK / "QC" / "seed0"
    # One finished run, all of it from one config: config.json, eval.csv, the checkpoint; no error of the other.
    assert (run_dir / "DONE").exists(), outputs
    saved_width = json.loads((run_dir / "config.json").read_text())["hyperparameters"]["policy_kwargs"]["net_arch"]
    assert policy_widths(run_dir) == saved_width
    rows = (run_dir / "eval.csv").read_text().splitlines()
    assert rows[0] == ",".join(EVAL_COLUMNS) and [row.split(",")[:2] for row in rows[1:]] == [
        ["50", "offline"],
        ["100", "offline"],
    ]
    assert not (run_dir / "error.txt").exists()
    assert not [path for path in (run_dir / "checkpoints").iterdir() if path.name.startswith(".")]
    winners = [name for name in widths if widths[name] == saved_width]
    assert any(codes[name] == 0 for name in winners), outputs
    for name in set(widths) - set(winners):
        # The other config's runner never claimed the folder: refused before running, or skipped as busy.
        assert codes[name] != 0
        assert "different configuration" in outputs[name] or "busy" in outputs[name], outputs[name]
