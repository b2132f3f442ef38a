"""
rl-zoo3 integration: registers QC, QC-FQL and RLPD in rl-zoo3's ``ALGOS`` as ``qc``, ``qc_fql`` and ``rlpd``, and
ships their hyperparameter files (the paper's settings for the OGBench and robomimic tasks) in
``qc_sb3/zoo/hyperparams/``.

Importing this package registers the algorithms when rl-zoo3 is installed (``pip install rl_zoo3``) and does
nothing otherwise: qc_sb3 does not depend on rl-zoo3. ``python -m rl_zoo3.train`` checks ``--algo`` before it imports
``--gym-packages``, so train through this package's entry point instead, which registers the algorithms first and
reads the shipped hyperparameter file unless ``--conf-file`` is given::

    python -m qc_sb3.zoo train --algo qc --env cube-double-singletask-task2-v0 --gym-packages ogbench
    python -m qc_sb3.zoo enjoy --algo qc --env cube-double-singletask-task2-v0 --gym-packages ogbench

or, in Python, ``import qc_sb3.zoo`` before calling rl-zoo3's ``train()``.
"""

from __future__ import annotations

from pathlib import Path

from qc_sb3.qc import QC
from qc_sb3.qc_fql import QCFQL
from qc_sb3.rlpd import RLPD

ZOO_ALGORITHMS = {"qc": QC, "qc_fql": QCFQL, "rlpd": RLPD}
HYPERPARAMS_DIR = Path(__file__).with_name("hyperparams")


def hyperparams_file(algo: str) -> Path:
    """
    The shipped hyperparameter file of an algorithm.

    :param algo: The rl-zoo3 name of the algorithm (``qc``, ``qc_fql`` or ``rlpd``)
    :return: Path of its YAML file
    """
    if algo not in ZOO_ALGORITHMS:
        raise ValueError(f"unknown qc_sb3 algorithm {algo!r} for rl-zoo3; expected one of {sorted(ZOO_ALGORITHMS)}")
    return HYPERPARAMS_DIR / f"{algo}.yml"


def register() -> bool:
    """
    Add the algorithms to rl-zoo3's ``ALGOS`` (the dict its train and enjoy scripts read).

    :return: Whether rl-zoo3 is installed (and the algorithms are now registered)
    """
    try:
        from rl_zoo3.utils import ALGOS
    except ImportError:
        return False
    ALGOS.update(ZOO_ALGORITHMS)
    return True


register()
