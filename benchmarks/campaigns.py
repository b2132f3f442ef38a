"""The campaigns of a results folder: runs that share a protocol and a dataset, the only runs a report pools.

A results folder may hold runs of several protocols side by side (a pilot beside the campaign it sized, sharing
domains): :mod:`benchmarks.report` reports each protocol apart, in a sub-folder named here (docs/evidence.md §4).
"""

from __future__ import annotations

import json

import pandas as pd


def campaign_key(config: dict) -> str:
    """
    What runs must share to be pooled in one report: their protocol (phase budgets, evaluation schedule) and their
    dataset, as canonical JSON.

    :param config: A run's ``config.json``
    :return: The key
    """
    return json.dumps({"protocol": config["protocol"], "dataset": config.get("dataset")}, sort_keys=True)


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
        key: folders[key] if folders[key] and "" not in folders[key].split("+") and taken.count(folders[key]) == 1
        else f"protocol-{index}"
        for index, key in enumerate(keys)
    }


def describe_campaign(key: str) -> str:
    """
    A campaign key in words: ``10000 offline gradient steps + 20000 online env steps; 20 episodes every 2500 steps;
    data: source generate, episodes 60, ...``.

    :param key: A :func:`campaign_key`
    :return: The description
    """
    campaign = json.loads(key)
    protocol = campaign["protocol"]
    text = (
        f"{protocol['offline_steps']} offline gradient steps + {protocol['online_steps']} online env steps; "
        f"{protocol['eval_episodes']} evaluation episodes every {protocol['eval_interval']} steps"
    )
    if campaign["dataset"]:
        text += "; data: " + ", ".join(f"{name} {value}" for name, value in campaign["dataset"].items())
    return text
