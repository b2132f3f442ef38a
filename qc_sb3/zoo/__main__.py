"""
rl-zoo3's command line with qc_sb3's algorithms registered: ``python -m qc_sb3.zoo train|enjoy [rl-zoo3 arguments]``.

``train`` reads ``qc_sb3/zoo/hyperparams/<algo>.yml`` unless ``--conf-file`` is given (rl-zoo3 would look for it in
its own package).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from qc_sb3.zoo import ZOO_ALGORITHMS, hyperparams_file, register

COMMANDS = ("train", "enjoy")


def _algo_of(arguments: Sequence[str]) -> str | None:
    """The value of ``--algo`` in rl-zoo3 arguments (``--algo qc`` or ``--algo=qc``), or None."""
    for index, argument in enumerate(arguments):
        if argument == "--algo" and index + 1 < len(arguments):
            return arguments[index + 1]
        if argument.startswith("--algo="):
            return argument.split("=", 1)[1]
    return None


def zoo_arguments(command: str, arguments: Sequence[str]) -> list[str]:
    """
    The arguments to hand to rl-zoo3: for ``train`` with one of qc_sb3's algorithms and no ``--conf-file``, the
    shipped hyperparameter file is added.

    :param command: ``train`` or ``enjoy``
    :param arguments: rl-zoo3's arguments
    :return: The arguments, with ``--conf-file`` added where needed
    """
    arguments = list(arguments)
    has_conf_file = any(argument in ("-conf", "--conf-file") or argument.startswith("--conf-file=") for argument in arguments)
    algo = _algo_of(arguments)
    if command == "train" and not has_conf_file and algo in ZOO_ALGORITHMS:
        arguments += ["--conf-file", str(hyperparams_file(algo))]
    return arguments


def main(argv: Sequence[str] | None = None) -> None:
    """Run rl-zoo3's ``train`` or ``enjoy`` with qc_sb3's algorithms registered."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in COMMANDS:
        raise SystemExit(f"usage: python -m qc_sb3.zoo {{{','.join(COMMANDS)}}} [rl-zoo3 arguments], got {argv[:1]}")
    if not register():
        raise SystemExit("rl-zoo3 is not installed: pip install rl_zoo3")
    command = argv[0]
    # rl-zoo3's scripts parse sys.argv themselves.
    sys.argv = [f"rl_zoo3 {command}", *zoo_arguments(command, argv[1:])]
    if command == "train":
        from rl_zoo3.train import train

        train()
    else:
        from rl_zoo3.enjoy import enjoy

        enjoy()


if __name__ == "__main__":
    main()
