"""Checks of what comes into a chunked algorithm beyond SB3's: its hyperparameters, the env's outputs, training health."""

from __future__ import annotations

import inspect
import warnings
from pathlib import Path
from typing import Any

import numpy as np

_PACKAGE_DIR = Path(__file__).resolve().parents[1]


def user_stacklevel() -> int:
    """
    The ``stacklevel`` of ``warnings.warn`` that points at the first caller outside qc_sb3, for a warning raised in the
    function that calls this one (as pandas' ``find_stack_level``).
    """
    level, frame = 1, inspect.currentframe()
    frame = frame.f_back if frame is not None else None  # the function that warns: stacklevel 1
    while frame is not None and Path(frame.f_code.co_filename).resolve().is_relative_to(_PACKAGE_DIR):
        level += 1
        frame = frame.f_back
    return level


def check_positive_int(name: str, value: Any, minimum: int = 1) -> None:
    """Raise a ValueError naming ``name`` unless ``value`` is an integer >= ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")


def check_training_finite(
    names: list[str],
    means: list[float],
    first_non_finite_update: int,
    parameters_norm: float,
    first_update: int,
    last_update: int,
) -> None:
    """
    Stop training with an error when a loss or the parameters became NaN or inf in the updates read since the last
    check (one ``train()`` call on the CPU; on an accelerator, those since the last log dump).

    The check runs on the values already read from the device, so the optimizer steps of those updates have run:
    the model's parameters may then be NaN, and the error says not to save them.

    :param names: The losses' names
    :param means: Their means over the updates checked
    :param first_non_finite_update: The first update (``n_updates``) checked whose losses are not all finite
    :param parameters_norm: The norm of all the policy's parameters after the updates checked
    :param first_update: The first update checked (``n_updates``)
    :param last_update: The last update checked (``n_updates``)
    """
    non_finite_losses = [name for name, mean in zip(names, means, strict=True) if not np.isfinite(mean)]
    if non_finite_losses:
        where = f"the loss(es) {', '.join(non_finite_losses)} became NaN or inf at update {first_non_finite_update}"
    elif not np.isfinite(parameters_norm):
        where = f"the parameters became NaN or inf in updates {first_update}..{last_update} (the losses were finite)"
    else:
        return
    raise RuntimeError(
        f"train: {where} (n_updates); training stopped: the model's parameters may be NaN or inf, do not save them "
        "(reload the last saved model). Check the data and rewards for huge values, or lower the learning rate"
    )


def check_env_outputs_finite(values: np.ndarray, what: str, env_step: int, first_env: int = 0) -> None:
    """
    Refuse NaN or inf in one env step's outputs (one row per env), also as float32, the replay buffer's dtype
    (a finite 1e39 becomes inf there), before anything is stored.

    :param values: ``(n_envs, ...)`` observations or ``(n_envs,)`` rewards
    :param what: What the values are, for the message
    :param env_step: The env step they come from (``num_timesteps``)
    :param first_env: Index of the env of the first row
    """
    with np.errstate(over="ignore", invalid="ignore"):
        finite = np.isfinite(values) & np.isfinite(values.astype(np.float32))
    finite_envs = finite.reshape(len(finite), -1).all(axis=1)
    if not finite_envs.all():
        env_index = first_env + int(np.argmin(finite_envs))
        raise ValueError(
            f"env {env_index} returned a {what} holding NaN or inf (as float32, the replay buffer's dtype) at env step "
            f"{env_step} (num_timesteps); refused before it is stored: the env must return finite values within "
            "float32's range"
        )


def warn_if_no_online_update(start: int, total_timesteps: int, learning_starts: int, gradient_steps: int) -> None:
    """
    Warn, before any work, when the online steps of a ``learn()`` call all fall within ``learning_starts``: updates
    start only after them, so the online phase would only collect data.

    :param start: The env step ``learn()`` counts from (0, or ``num_timesteps`` without ``reset_num_timesteps``)
    :param total_timesteps: ``learn()``'s online env steps
    :param learning_starts: The algorithm's ``learning_starts``
    :param gradient_steps: The algorithm's ``gradient_steps`` (0: no updates are asked for)
    """
    end = start + total_timesteps
    if start < end <= learning_starts and gradient_steps != 0:
        warnings.warn(
            f"learning_starts={learning_starts} but this learn() runs the env to step {end} "
            f"({total_timesteps} online steps): no online update will happen, the online phase only collects data. "
            f"Lower learning_starts, or learn() for more than {learning_starts - start} online steps",
            UserWarning,
            stacklevel=user_stacklevel(),
        )
