"""The built-in suites, one module each, mirroring :mod:`envs`: OGBench (:mod:`qc_sb3.benchmarks.runner.suites.ogbench`),
robomimic (:mod:`qc_sb3.benchmarks.runner.suites.robomimic`), and a small image task, image-reach
(:mod:`qc_sb3.benchmarks.runner.suites.image_reach`).

A suite module declares ``SUITE`` (a :class:`~qc_sb3.benchmarks.runner.specs.SuiteSpec`: its dataset sources, how it prepares
them, its default seeds and the per-domain settings of its domains) and ``tasks()``, which imports its :mod:`envs`
package and raises ``ImportError`` if that package's extra is not installed; such a suite is left out of the
registry (:mod:`qc_sb3.benchmarks.runner.tasks`) and the reason kept. Adding a suite is one new module here, listed in
:data:`SUITE_MODULES`.
"""

from __future__ import annotations

from types import ModuleType

from qc_sb3.benchmarks.runner.specs import SuiteSpec, TaskSpec
from qc_sb3.benchmarks.runner.suites import image_reach, ogbench, robomimic

SUITE_MODULES: tuple[ModuleType, ...] = (ogbench, robomimic, image_reach)


def builtin_suites() -> list[SuiteSpec]:
    """The built-in suites."""
    return [module.SUITE for module in SUITE_MODULES]


def builtin_tasks() -> tuple[list[TaskSpec], dict[str, str]]:
    """
    The tasks of the built-in suites whose :mod:`envs` packages import.

    :return: The tasks, and suite name -> why its tasks are left out
    """
    tasks: list[TaskSpec] = []
    unavailable: dict[str, str] = {}
    for module in SUITE_MODULES:
        try:
            tasks.extend(module.tasks())
        except ImportError as error:
            name = module.SUITE.name
            unavailable[name] = f"envs.{name} does not import ({error}; the {name} extra installs its packages)"
    return tasks, unavailable
