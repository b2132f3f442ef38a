"""Suites declare the per-domain settings of their domains: a missing one is an error naming the key, never a default."""

from __future__ import annotations

import dataclasses

import pytest

from qc_sb3.benchmarks.runner.config import ConfigError, load_config
from qc_sb3.benchmarks.runner.methods import METHODS
from qc_sb3.benchmarks.runner.planning import plan_runs
from qc_sb3.benchmarks.runner.specs import TaskSpec
from qc_sb3.benchmarks.runner.suites import builtin_suites
from qc_sb3.benchmarks.runner.tasks import get_suite, get_task, register_suite, register_task, task_names

from test_benchmarks_toys import TOY_SUITE, make_point_reach, toy_config

PARTIAL_SUITE = "toy-partial"
PARTIAL_TASK = "point-reach-partial"


def register_partial_suite() -> None:
    """A toy suite that declares QC's N for its domain and nothing for the FQL family, and its one task."""
    register_suite(
        dataclasses.replace(TOY_SUITE, name=PARTIAL_SUITE, domain_settings={"reach": {"QC": {"actor_num_samples": 8}}}),
        overwrite=True,
    )
    register_task(TaskSpec(PARTIAL_TASK, PARTIAL_SUITE, "reach", make_point_reach, {"max_episode_steps": 50}), overwrite=True)


@pytest.fixture(autouse=True, scope="module")
def partial_suite():
    register_partial_suite()


def partial_config(methods: list[str]) -> dict:
    return toy_config(
        tasks=[PARTIAL_TASK],
        methods=methods,
        datasets={PARTIAL_SUITE: {"source": "generate", "episodes": 2}},
        hyperparameters={},
    )


def test_a_declared_setting_is_the_runs_value():
    # 8, not QC's constructor default 32.
    (run,) = plan_runs(load_config(partial_config(["QC"])), "unused")
    assert run.hyperparameters["actor_num_samples"] == 8


def test_a_missing_per_domain_setting_is_refused_naming_the_key():
    with pytest.raises(ConfigError) as error:
        load_config(partial_config(["QC", "QC-FQL", "FQL-n", "RLPD"]))
    message = str(error.value)
    assert f"QC-FQL on {PARTIAL_TASK}: suite '{PARTIAL_SUITE}' declares no per-domain setting 'alpha'" in message
    assert "domain_settings['reach']['QC-FQL']['alpha']" in message
    assert "domain_settings['reach']['FQL-n']['alpha']" in message
    # QC's is declared and RLPD has none to declare.
    assert "'QC'" not in message and "RLPD on" not in message


def test_plan_runs_refuses_a_missing_setting_too():
    # A config checked while the suite still declared alpha, planned after the suite lost it.
    full = {"reach": {"QC": {"actor_num_samples": 8}, "QC-FQL": {"alpha": 5.0}}}
    register_suite(dataclasses.replace(get_suite(PARTIAL_SUITE), domain_settings=full), overwrite=True)
    config = load_config(partial_config(["QC-FQL"]))
    assert plan_runs(config, "unused")[0].hyperparameters["alpha"] == 5.0
    register_suite(dataclasses.replace(get_suite(PARTIAL_SUITE), domain_settings={"reach": {}}), overwrite=True)
    try:
        with pytest.raises(LookupError, match=r"no per-domain setting 'alpha' of QC-FQL for domain 'reach'"):
            plan_runs(config, "unused")
    finally:
        register_partial_suite()


def test_a_task_of_an_undeclared_domain_is_refused_at_registration():
    task = TaskSpec("point-reach-elsewhere", PARTIAL_SUITE, "elsewhere", make_point_reach)
    with pytest.raises(ValueError, match=r"domain 'elsewhere'.*declares no per-domain settings.*its domains: reach"):
        register_task(task)
    assert "point-reach-elsewhere" not in task_names()


def test_a_suite_without_the_domain_names_the_missing_domain():
    with pytest.raises(LookupError, match=r"declares no per-domain settings for domain 'cube-sextuple'.*cube-single"):
        get_suite("ogbench").domain_setting("cube-sextuple", "QC", "actor_num_samples")


def test_builtin_suites_declare_every_methods_settings_for_each_of_their_tasks_domains():
    suites = {suite.name: suite for suite in builtin_suites()}
    builtin_tasks = [get_task(name) for name in task_names() if get_task(name).suite in suites]
    assert {task.suite for task in builtin_tasks} == {"ogbench", "robomimic", "image-reach"}
    for task in builtin_tasks:
        for method in METHODS.values():
            for argument in method.per_domain:
                value = suites[task.suite].domain_setting(task.domain, method.name, argument)
                assert isinstance(value, int | float) and value > 0, (task.name, method.name, argument)
