"""Test-session settings: a headless MuJoCo rendering backend for the visual OGBench tests."""

import os

# MuJoCo picks its OpenGL backend when it is first imported, so this runs before any test module imports it. OSMesa
# (Debian package libosmesa6, which .ci/run installs) renders without a display or GPU; a backend the user chose
# (MUJOCO_GL=egl, ...) is kept.
os.environ.setdefault("MUJOCO_GL", "osmesa")
