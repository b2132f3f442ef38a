"""Runs of the reference implementation's own training script with a benchmark config's settings, side by side
(docs/evidence.md §2).

Run: ``python -m qc_sb3.benchmarks.parity.reference_runs CONFIG --reference-root DIR --python PY [--out DIR] [--seeds 0 1 2]
[--workers N]``.

The reference (github ColinQiyangLi/qc) is never a dependency of qc_sb3: ``--reference-root`` is a copy of its code and
``--python`` the interpreter of a virtual environment of its own (its pinned requirements, ogbench, mujoco, h5py).
Each run of the config (its OGBench tasks, its methods with an offline phase, its seeds) becomes one call of the
reference's ``main.py`` with the same settings, read from the run as :mod:`qc_sb3.benchmarks.runner.planning` resolves
it: networks,
N, alpha, T, K, batch, learning rate, tau, gamma, chunk length, ``action_chunking``, sparse rewards, updates from
``learning_starts`` online steps on, the protocol's budgets and evaluations; on the same ``.npz`` files that the
runner's Minari dataset is converted from (:func:`qc_sb3.benchmarks.runner.suites.ogbench.play_data_files`). A setting
the reference has no flag for, left at a value other than the constructor default, is refused before anything runs.

Each finished run is moved into ``<out>/<task>/<method>/seed<k>/`` at once (nothing half-written): ``config.json`` (as
the runner's, plus ``implementation: reference`` and the reference's command line), ``versions.json`` (the reference's
packages and source digest), ``eval.csv`` in the runner's columns (``return`` and ``length`` left empty: the
reference's OGBench evaluation logs neither), the reference's training statistics (``reference_offline_agent.csv``,
``reference_online_agent.csv``) and ``DONE``. Finished runs are skipped, so the command resumes a campaign; a run
interrupted before its end starts again (the reference's main.py keeps no checkpoint). The reference also evaluates
one step before the end of each phase; those rows are left out, so that both implementations are evaluated at the
same steps. Its first online update comes at online step ``learning_starts`` (``i >= start_training``), one step
before qc_sb3's (SB3's ``num_timesteps > learning_starts``): one update more out of the online phase's.
The agent CSVs are also written as ``train_stats.csv`` (:mod:`qc_sb3.benchmarks.runner.training_stats`), read as qc_sb3's are.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any

from qc_sb3.benchmarks.runner.atomic import write_json
from qc_sb3.benchmarks.runner.config import load_config
from qc_sb3.benchmarks.runner.locks import folder_lock
from qc_sb3.benchmarks.runner.methods import get_method
from qc_sb3.benchmarks.runner.planning import default_dataset_cache, plan_runs
from qc_sb3.benchmarks.runner.provenance import source_revision
from qc_sb3.benchmarks.runner.specs import DatasetRequest, RunSpec
from qc_sb3.benchmarks.runner.suites.ogbench import play_data_files
from qc_sb3.benchmarks.runner.tasks import get_task
from qc_sb3.benchmarks.runner.training_stats import export_run

# The reference's agent flags for each method: the actor (best-of-N sampling or the distilled one-step policy).
ACTOR_TYPES = {"QC": "best-of-n", "BFN": "best-of-n", "BFN-n": "best-of-n"}
ACTOR_TYPES |= {"QC-FQL": "distill-ddpg", "FQL": "distill-ddpg", "FQL-n": "distill-ddpg"}
# Constructor arguments with a reference flag: argument -> main.py flags set to its value.
FLAG_OF = {
    "chunk_size": ("horizon_length",),
    "action_chunking": ("agent.action_chunking",),
    "alpha": ("agent.alpha",),
    "flow_steps": ("agent.flow_steps",),
    "batch_size": ("agent.batch_size",),
    "learning_rate": ("agent.lr",),
    "tau": ("agent.tau",),
    "gamma": ("discount", "agent.discount"),
    "n_critics": ("agent.num_qs",),
    "learning_starts": ("start_training",),
    "q_agg": ("agent.q_agg",),
}
# Arguments the runner sets or that the reference's design fixes (its buffer holds the offline data and every online
# step; its rewards are made sparse by --sparse, taken from the env), and compile_step (the same updates, compiled).
HANDLED = {"buffer_size", "offline_sparse_rewards", "policy_kwargs", "actor_num_samples", "compile_step"}
EVAL_COLUMNS = ("step", "phase", "success", "return", "length")
REFERENCE_PACKAGES = ("jax", "jaxlib", "flax", "optax", "distrax", "numpy", "ogbench", "mujoco", "gymnasium")
WANDB_STUB = '''"""Offline stand-in for wandb: the reference logs its CSV files itself."""
class _Anything:
    def __init__(self, *args, **kwargs): pass
Image = Video = Histogram = Settings = _Anything
class _Run:
    project, name, id, url = "qc", "run", "run", ""
    def log(self, *args, **kwargs): pass
    def finish(self, *args, **kwargs): pass
    def save(self, *args, **kwargs): pass
run = _Run()
config = {}
def init(*args, **kwargs): return run
def log(*args, **kwargs): pass
def finish(*args, **kwargs): pass
'''
# The reference imports robomimic at module level even for OGBench tasks; these are the names it touches.
ROBOMIMIC_STUB = {
    "robomimic/__init__.py": "DATASET_REGISTRY = {}\n",
    "robomimic/utils/__init__.py": "",
    "robomimic/utils/env_utils.py": "",
    "robomimic/utils/file_utils.py": "",
    "robomimic/utils/obs_utils.py": "def initialize_obs_modality_mapping_from_dict(*args, **kwargs): pass\n",
}


def reference_flags(run: RunSpec) -> list[str]:
    """
    The reference ``main.py`` flags of a run (everything but the dataset folder and the save folder).

    :param run: A planned run of an OGBench task and a method with an offline phase
    :return: ``--name=value`` flags
    :raises ValueError: Naming the setting, if the run sets one the reference has no flag for
    """
    if run.method not in ACTOR_TYPES:
        raise ValueError(f"method {run.method!r} has no reference main.py run; methods: {', '.join(ACTOR_TYPES)}")
    if run.suite != "ogbench":
        raise ValueError(f"task {run.task!r} is not an OGBench task; the reference runs here read OGBench npz files")
    defaults = get_method(run.method).constructor_defaults()
    hyperparameters = run.hyperparameters
    _check_the_reference_can_match(run)
    unsupported = [
        f"{key}={value!r}"
        for key, value in hyperparameters.items()
        if key not in FLAG_OF and key not in HANDLED and value != defaults.get(key)
    ]
    if unsupported:
        raise ValueError(f"{run.method}: the reference main.py has no flag for {', '.join(unsupported)}")
    flags = {
        "env_name": run.task,
        "seed": run.seed,
        "offline_steps": run.protocol.offline_steps,
        "online_steps": run.protocol.online_steps,
        "eval_interval": run.protocol.eval_interval,
        "eval_episodes": run.protocol.eval_episodes,
        "log_interval": min(1000, run.protocol.eval_interval),
        "sparse": bool(run.env_kwargs.get("sparse", False)),
        "run_group": "evidence",
        "agent.actor_type": ACTOR_TYPES[run.method],
    }
    if ACTOR_TYPES[run.method] == "best-of-n":
        flags["agent.actor_num_samples"] = hyperparameters["actor_num_samples"]
    for key, names in FLAG_OF.items():
        if key in hyperparameters:
            flags.update(dict.fromkeys(names, hyperparameters[key]))
    actor_dims, value_dims = _hidden_dims((hyperparameters.get("policy_kwargs") or {}).get("net_arch"))
    flags["agent.actor_hidden_dims"] = actor_dims
    flags["agent.value_hidden_dims"] = value_dims
    if (hyperparameters.get("policy_kwargs") or {}).keys() - {"net_arch"}:
        raise ValueError(f"{run.method}: the reference main.py has flags for policy_kwargs.net_arch only")
    return [f"--{name}={_flag_value(value)}" for name, value in flags.items()]


def _check_the_reference_can_match(run: RunSpec) -> None:
    """Refuse settings the reference's main.py fixes otherwise: its offline rewards are sparse exactly when the env's
    are (``--sparse``), its buffer keeps every online step, and its env is the registered task's."""
    sparse = bool(run.env_kwargs.get("sparse", False))
    if run.hyperparameters.get("offline_sparse_rewards", sparse) != sparse:
        raise ValueError(
            f"{run.method}: offline_sparse_rewards={run.hyperparameters['offline_sparse_rewards']!r} differs from the "
            f"env's sparse={sparse!r}; the reference's --sparse sets both"
        )
    if run.hyperparameters.get("buffer_size", run.protocol.online_steps) < run.protocol.online_steps:
        raise ValueError(
            f"{run.method}: buffer_size={run.hyperparameters['buffer_size']} is below the online steps "
            f"({run.protocol.online_steps}); the reference's buffer keeps every online step"
        )
    task_defaults = get_task(run.task).env_kwargs
    changed = {key: value for key, value in run.env_kwargs.items() if key != "sparse" and task_defaults.get(key) != value}
    if changed:
        raise ValueError(f"{run.task}: the reference runs the registered task; it has no flag for env {changed!r}")


def _hidden_dims(net_arch: Any) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Actor and critic widths of SB3's ``net_arch`` (a list for both, or ``{"pi": ..., "qf": ...}``)."""
    if net_arch is None:
        return (512, 512, 512, 512), (512, 512, 512, 512)
    if isinstance(net_arch, dict):
        return tuple(net_arch["pi"]), tuple(net_arch["qf"])
    return tuple(net_arch), tuple(net_arch)


def _flag_value(value: Any) -> str:
    if isinstance(value, tuple):
        return "(" + ",".join(str(item) for item in value) + ("," if len(value) == 1 else "") + ")"
    return str(value)


def convert_eval_rows(rows: Sequence[dict[str, str]], run: RunSpec) -> list[dict[str, Any]]:
    """
    The reference's ``eval.csv`` rows in the runner's columns, at the runner's evaluation steps only.

    :param rows: The reference's rows (``step`` is offline gradient steps, then the offline budget plus online steps)
    :param run: The run
    :return: Rows with ``step``, ``phase``, ``success``, ``return``, ``length``
    """
    protocol = run.protocol
    converted = []
    for row in rows:
        step = int(float(row["step"]))
        phase = "offline" if step <= protocol.offline_steps else "online"
        phase_step = step if phase == "offline" else step - protocol.offline_steps
        if phase_step % protocol.eval_interval != 0:
            continue
        converted.append(
            {
                "step": step,
                "phase": phase,
                "success": float(row["success"]),
                "return": row.get("episode.return", ""),
                "length": row.get("episode.length", ""),
            }
        )
    return converted


def execute_reference_run(run: RunSpec, reference_root: Path, python: str, data_files: Sequence[Path]) -> None:
    """
    One reference run, its files moved into the run's folder once it has finished.

    :param run: The run
    :param reference_root: The reference's code
    :param python: Its environment's interpreter
    :param data_files: The ``.npz`` training files
    :raises RuntimeError: With the end of the reference's output, if it fails
    """
    run_dir = Path(run.run_dir)
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="reference-run-", dir=run_dir.parent) as scratch:
        scratch = Path(scratch)
        _write_stubs(scratch / "stubs")
        data_dir = scratch / "data"
        data_dir.mkdir()
        for index, path in enumerate(data_files):
            link = data_dir / f"{index:04d}-{path.name}"
            link.symlink_to(path.resolve())
            # The reference also opens each file's validation set (it does not train on it): the file's own if any.
            validation = path.with_name(path.name.removesuffix(".npz") + "-val.npz")
            link.with_name(link.name.removesuffix(".npz") + "-val.npz").symlink_to(
                (validation if validation.exists() else path).resolve()
            )
        command = [python, "main.py", *reference_flags(run), f"--ogbench_dataset_dir={data_dir}"]
        command.append(f"--save_dir={scratch / 'save'}")
        environment = {
            **os.environ,
            "PYTHONPATH": str(scratch / "stubs"),
            "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1",
            "OMP_NUM_THREADS": "1",
        }
        started = time.time()
        with open(scratch / "output.log", "w", encoding="utf-8") as log:
            done = subprocess.run(command, cwd=reference_root, env=environment, stdout=log, stderr=subprocess.STDOUT)
        if done.returncode != 0:
            tail = (scratch / "output.log").read_text(encoding="utf-8", errors="replace")[-3000:]
            raise RuntimeError(f"reference run {run.run_dir} failed (exit {done.returncode}):\n{tail}")
        (save,) = (scratch / "save").glob("*/evidence/*/*/")
        final = scratch / "final"
        final.mkdir()
        with open(save / "eval.csv", encoding="utf-8") as file:
            rows = convert_eval_rows(list(csv.DictReader(file)), run)
        with open(final / "eval.csv", "w", encoding="utf-8", newline="") as file:
            writer = csv.DictWriter(file, fieldnames=EVAL_COLUMNS)
            writer.writeheader()
            writer.writerows(rows)
        for phase in ("offline", "online"):
            if (save / f"{phase}_agent.csv").exists():
                shutil.copy(save / f"{phase}_agent.csv", final / f"reference_{phase}_agent.csv")
        record = _run_record(run, command[1:-2], [path.resolve() for path in data_files], time.time() - started)
        write_json(final / "config.json", record)
        write_json(final / "versions.json", _reference_versions(python, reference_root))
        export_run(final)
        (final / "DONE").write_text("done\n", encoding="utf-8")
        if run_dir.exists():
            shutil.rmtree(run_dir)
        os.replace(final, run_dir)


def _run_record(run: RunSpec, arguments: Sequence[str], data_files: Sequence[Path], wall_time: float) -> dict[str, Any]:
    return {
        "implementation": "reference",
        "task": run.task,
        "suite": run.suite,
        "domain": run.domain,
        "method": run.method,
        "seed": run.seed,
        "hyperparameters": run.hyperparameters,
        "env_kwargs": run.env_kwargs,
        "protocol": vars(run.protocol),
        "dataset": run.dataset,
        "reference_arguments": list(arguments),
        "reference_data_files": [str(path) for path in data_files],
        "wall_time_s": round(wall_time, 1),
    }


def _reference_versions(python: str, reference_root: Path) -> dict[str, Any]:
    script = (
        "import json, importlib.metadata as m, platform\n"
        "v = {'python': platform.python_version()}\n"
        f"for p in {REFERENCE_PACKAGES!r}:\n"
        "    try: v[p] = m.version(p)\n"
        "    except m.PackageNotFoundError: v[p] = 'not installed'\n"
        "print(json.dumps(v))\n"
    )
    done = subprocess.run([python, "-c", script], capture_output=True, text=True, check=True)
    digest = hashlib.sha256()
    for path in sorted(reference_root.rglob("*.py")):
        digest.update(path.relative_to(reference_root).as_posix().encode() + b"\0" + path.read_bytes())
    return {
        "versions": json.loads(done.stdout),
        "reference_source_sha256": digest.hexdigest(),
        "launcher_source": source_revision(),
    }


def _write_stubs(folder: Path) -> None:
    (folder / "wandb").mkdir(parents=True)
    (folder / "wandb" / "__init__.py").write_text(WANDB_STUB, encoding="utf-8")
    for name, text in ROBOMIMIC_STUB.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text, encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config", help="benchmark config (YAML)")
    parser.add_argument("--reference-root", required=True, type=Path, help="the reference's code (main.py)")
    parser.add_argument("--python", required=True, help="the reference environment's python")
    parser.add_argument("--out", default="results/evidence/reference", help="results folder")
    parser.add_argument("--seeds", type=int, nargs="+", help="seeds (default: the config's)")
    parser.add_argument("--workers", type=int, default=1, help="runs at a time")
    args = parser.parse_args(argv)
    if not (args.reference_root / "main.py").is_file():
        parser.error(f"--reference-root {str(args.reference_root)!r} holds no main.py")
    config = load_config(args.config)
    runs = [run for run in plan_runs(config, args.out, args.seeds) if run.offline_phase]
    for run in runs:
        reference_flags(run)  # every run's settings are checked before any runs
    cache = default_dataset_cache(config, config.out or args.out)
    files = {}
    # As the runner does: one process at a time prepares datasets in a cache.
    with folder_lock(cache, wait=True):
        for run in runs:
            if run.task not in files:
                request = DatasetRequest(
                    task=get_task(run.task), options=config.datasets[run.suite], cache=cache, workers=1, progress=False
                )
                files[run.task] = play_data_files(request)
    pending = [run for run in runs if not (Path(run.run_dir) / "DONE").exists()]
    print(f"{len(runs) - len(pending)} of {len(runs)} reference runs done; running {len(pending)}", flush=True)

    def execute(run: RunSpec) -> None:
        execute_reference_run(run, args.reference_root.resolve(), args.python, files[run.task])
        print(f"done: {run.run_dir}", flush=True)

    with ThreadPoolExecutor(max_workers=args.workers) as pool:
        futures = [pool.submit(execute, run) for run in pending]
        for future in as_completed(futures):
            if future.exception() is not None:  # stop at the first failure, not after the runs still queued
                pool.shutdown(cancel_futures=True)
                raise future.exception()


if __name__ == "__main__":
    main(sys.argv[1:])
