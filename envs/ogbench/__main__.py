"""
Command line: generate OGBench play datasets locally, convert npz files to Minari.

    python -m qc_sb3.envs.ogbench generate cube-double-play --episodes 100 --workers 2 --seed 0 --out DIR
    python -m qc_sb3.envs.ogbench generate visual-cube-double-play --episodes 100 --workers 2 --seed 0 --out DIR
    python -m qc_sb3.envs.ogbench convert NPZ --task cube-double-play-singletask-task2-v0 [--id ID] [--overwrite]
    python -m qc_sb3.envs.ogbench convert NPZ_FOLDER --task cube-double-play-singletask-task2-v0 [--overwrite]
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from qc_sb3.envs.ogbench.convert import convert_shards, convert_to_minari
from qc_sb3.envs.ogbench.generate import generate_dataset
from qc_sb3.envs.ogbench.play import UPSTREAM_EPISODE_LENGTH


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``python -m qc_sb3.envs.ogbench``."""
    parser = argparse.ArgumentParser(prog="python -m qc_sb3.envs.ogbench", description=__doc__.strip().splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)

    generate = commands.add_parser("generate", help="record a play dataset with OGBench's scripted oracles")
    generate.add_argument("dataset", help="[visual-]<family>-play[-v0], e.g. cube-double-play, visual-cube-double-play")
    generate.add_argument("--episodes", type=int, required=True, help="training episodes (OGBench: 1000)")
    generate.add_argument("--val-episodes", type=int, default=None, help="validation episodes (default episodes // 10)")
    generate.add_argument("--workers", type=int, default=1, help="worker processes")
    generate.add_argument("--seed", type=int, default=0)
    generate.add_argument("--episode-length", type=int, default=UPSTREAM_EPISODE_LENGTH, help="rows per episode")
    generate.add_argument("--out", type=Path, required=True, help="output folder")
    generate.add_argument("--overwrite", action="store_true", help="replace existing files")
    generate.add_argument("--no-progress", action="store_true", help="hide the progress bar")

    convert = commands.add_parser("convert", help="convert an npz (or a folder of npz shards) to Minari")
    convert.add_argument("source", type=Path, help="an npz file, or a folder of npz shards")
    convert.add_argument("--task", required=True, help="e.g. cube-double-play-singletask-task2-v0 (visual-...: frames)")
    convert.add_argument("--id", default=None, help="Minari id for a single npz (default ogbench/<task>)")
    convert.add_argument("--overwrite", action="store_true", help="replace existing Minari datasets")
    convert.add_argument("--no-progress", action="store_true", help="hide the progress bars")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """
    :param argv: Command line arguments (default ``sys.argv[1:]``)
    :return: The exit status
    """
    args = build_parser().parse_args(argv)
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(message)s"))
    package_logger = logging.getLogger("qc_sb3.envs.ogbench")
    package_logger.addHandler(handler)
    package_logger.setLevel(logging.INFO)
    start = time.perf_counter()
    try:
        if args.command == "generate":
            path = generate_dataset(
                args.dataset,
                episodes=args.episodes,
                out_dir=args.out,
                workers=args.workers,
                seed=args.seed,
                val_episodes=args.val_episodes,
                episode_length=args.episode_length,
                progress=not args.no_progress,
                overwrite=args.overwrite,
            )
            print(f"wrote {path} and {path.with_name(path.stem + '-val.npz')}")
        elif args.source.is_dir():
            if args.id is not None:
                raise ValueError("--id names one dataset; a folder of shards gets ids ogbench/<task>-shard<NNN>-v0")
            for dataset_id in convert_shards(args.source, args.task, overwrite=args.overwrite, progress=not args.no_progress):
                print(f"wrote Minari dataset {dataset_id}")
        else:
            dataset_id = convert_to_minari(
                args.source, args.task, dataset_id=args.id, overwrite=args.overwrite, progress=not args.no_progress
            )
            print(f"wrote Minari dataset {dataset_id}")
    except (ValueError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"done in {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
