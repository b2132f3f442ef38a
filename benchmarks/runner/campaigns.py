"""The campaigns of a results folder: runs that share a protocol and their suites' data, the only runs a report pools.

A results folder may hold runs of several protocols side by side (a pilot beside the campaign it sized, sharing
domains): :mod:`qc_sb3.benchmarks.report` reports each protocol apart, in a sub-folder named here (docs/evidence.md §4).
"""

from __future__ import annotations

import json

import pandas as pd


def campaign_keys(results: pd.DataFrame) -> pd.Series:
    """
    Each run's campaign, as canonical JSON of its protocol (phase budgets, evaluation schedule) and the dataset of each
    suite. Runs of one protocol are one campaign when each suite among them has one dataset (a config's runs: one
    data source per suite); where a suite has several, each (suite, dataset) is a campaign of its own.

    :param results: Rows with the columns ``protocol_key``, ``suite`` and ``dataset_key`` (JSON)
    :return: The campaign key of each row
    """
    keys = pd.Series("", index=results.index, dtype=object)
    for protocol, runs in results.groupby("protocol_key"):
        datasets = runs.groupby("suite")["dataset_key"].unique()
        if all(len(of_suite) == 1 for of_suite in datasets):
            keys[runs.index] = _key(str(protocol), {str(suite): of_suite[0] for suite, of_suite in datasets.items()})
        else:
            for (suite, dataset), of_dataset in runs.groupby(["suite", "dataset_key"]):
                keys[of_dataset.index] = _key(str(protocol), {str(suite): str(dataset)})
    return keys


def _key(protocol: str, datasets: dict[str, str]) -> str:
    decoded = {suite: json.loads(dataset) for suite, dataset in datasets.items()}
    return json.dumps({"protocol": json.loads(protocol), "datasets": decoded}, sort_keys=True)


def campaign_names(results: pd.DataFrame) -> dict[str, str]:
    """
    A name for each protocol of a results folder: the folders its runs sit in, joined by ``+`` (``parity+reference``),
    or ``protocol-<k>`` (in order of the keys) where its runs sit directly in the results folder or share their
    folders' name with another protocol's.

    :param results: :func:`load_results`'s rows
    :return: ``campaign`` key -> name
    """
    keys = sorted(results["campaign"].unique())
    folders = {key: "+".join(sorted(set(results.loc[results["campaign"] == key, "folder"]))) for key in keys}
    taken = list(folders.values())
    return {
        key: folders[key]
        if folders[key] and "" not in folders[key].split("+") and taken.count(folders[key]) == 1
        else f"protocol-{index}"
        for index, key in enumerate(keys)
    }


def describe_campaign(key: str) -> str:
    """
    A campaign key in words: ``10000 offline gradient steps + 20000 online env steps; 20 evaluation episodes every
    2500 steps; ogbench data: source generate, episodes 60, ...``.

    :param key: A :func:`campaign_keys` key
    :return: The description
    """
    campaign = json.loads(key)
    protocol = campaign["protocol"]
    text = (
        f"{protocol['offline_steps']} offline gradient steps + {protocol['online_steps']} online env steps; "
        f"{protocol['eval_episodes']} evaluation episodes every {protocol['eval_interval']} steps"
    )
    for suite, dataset in campaign["datasets"].items():
        if dataset:
            text += f"; {suite} data: " + ", ".join(f"{name} {value}" for name, value in dataset.items())
    return text
