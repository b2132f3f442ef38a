"""Test-session settings: a headless MuJoCo rendering backend for the visual OGBench tests, and the networks' layers
on oneDNN's matmul wherever it applies."""

import os
from collections.abc import Iterator

import pytest

# MuJoCo picks its OpenGL backend when it is first imported, so this runs before any test module imports it. OSMesa
# (Debian package libosmesa6, which .ci/run installs) renders without a display or GPU; a backend the user chose
# (MUJOCO_GL=egl, ...) is kept.
os.environ.setdefault("MUJOCO_GL", "osmesa")

# Imported once MUJOCO_GL is set.
from qc_sb3.accel.onednn_matmul import onednn_matmuls


@pytest.fixture(autouse=True, scope="session")
def onednn_layers() -> Iterator[None]:
    """
    The whole session, module fixtures included, runs the networks' layers on oneDNN's matmul from MIN_ROWS rows,
    whichever the CPU would choose by default (qc_sb3.accel.onednn_matmul.onednn_by_default): both paths are tested
    on every machine, the BLAS below MIN_ROWS rows and oneDNN from it. tests/test_onednn_matmul.py tests the default
    choice itself. Worker processes that tests start make the default choice.
    """
    with onednn_matmuls():
        yield
