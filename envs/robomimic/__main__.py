"""Command line: generate scripted robomimic demonstrations, convert robomimic hdf5 files to Minari.

python -m qc_sb3.envs.robomimic generate lift --episodes 20 --out lift.hdf5 --seed 0
python -m qc_sb3.envs.robomimic convert lift.hdf5 --task lift-mh-low_dim [--filter-key train] [--overwrite]
"""

from __future__ import annotations

import argparse
import sys

import h5py
import minari

from qc_sb3.envs.robomimic.convert import convert_to_minari
from qc_sb3.envs.robomimic.demos import generate_demos
from qc_sb3.envs.robomimic.tasks import ROBOMIMIC_TASKS, TASKS

TASK_CHOICES = [*ROBOMIMIC_TASKS, *(info.short_name for info in TASKS.values())]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m qc_sb3.envs.robomimic", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)

    generate = commands.add_parser("generate", help="write scripted demonstrations as a robomimic low-dim hdf5 file")
    generate.add_argument("task", choices=TASK_CHOICES)
    generate.add_argument("--episodes", type=int, required=True, help="number of demos to write")
    generate.add_argument("--out", required=True, help="the hdf5 file to write")
    generate.add_argument("--seed", type=int, default=0)
    generate.add_argument("--workers", type=int, default=1, help="processes running episodes")
    generate.add_argument("--max-episode-steps", type=int, default=None, help="episode limit (default: the task's)")
    generate.add_argument("--keep-failed", action="store_true", help="write failed episodes too")
    generate.add_argument("--overwrite", action="store_true", help="replace an existing file")
    generate.add_argument("--no-progress", action="store_true", help="hide the progress bar")

    convert = commands.add_parser("convert", help="convert a robomimic low-dim hdf5 file to a Minari dataset")
    convert.add_argument("file", help="the robomimic hdf5 file (official low_dim_v15.hdf5 or generated)")
    convert.add_argument("--task", required=True, choices=TASK_CHOICES)
    convert.add_argument("--filter-key", default=None, help="convert only the demos of mask/<filter-key>")
    convert.add_argument("--dataset-id", default=None, help="Minari id (default: robomimic/<task>-v0)")
    convert.add_argument("--overwrite", action="store_true", help="replace an existing dataset")
    return parser


def main(argv: list[str] | None = None) -> int:
    """
    Run the command line.

    :param argv: The arguments (default: ``sys.argv[1:]``)
    :return: The exit status
    """
    args = _parser().parse_args(argv)
    try:
        if args.command == "generate":
            path = generate_demos(
                args.task,
                episodes=args.episodes,
                out_path=args.out,
                seed=args.seed,
                workers=args.workers,
                progress=not args.no_progress,
                max_episode_steps=args.max_episode_steps,
                keep_failed=args.keep_failed,
                overwrite=args.overwrite,
            )
            with h5py.File(path, "r") as file:
                data = file["data"]
                successes, attempts = len(file["mask/successful"]), int(data.attrs["attempts"])
                print(
                    f"wrote {len(data)} demos ({int(data.attrs['total'])} steps) to {path}; "
                    f"{successes} successes in {attempts} attempts ({successes / attempts:.0%})"
                )
        else:
            dataset_id = convert_to_minari(
                args.file, args.task, filter_key=args.filter_key, dataset_id=args.dataset_id, overwrite=args.overwrite
            )
            dataset = minari.load_dataset(dataset_id)
            print(
                f"converted {dataset.total_episodes} demos ({dataset.total_steps} steps) of {args.file} to Minari "
                f"dataset {dataset_id!r}"
            )
    except (ValueError, OSError, RuntimeError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
