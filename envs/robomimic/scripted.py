"""Scripted waypoint controllers for lift, can and square: OSC_POSE delta actions toward waypoints read from the
simulator, the gripper fully open or closed, Gaussian noise, and several operator styles.

No scripted policies ship with robosuite or robomimic. These controllers give local demonstration data and pipeline
tests; they are far more uniform than the multi-human data of the paper, which the styles only start to imitate.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from qc_sb3.envs.robomimic.tasks import resolve_task

# OSC_POSE maps a unit action to 5 cm and 0.5 rad (the official controller's output_max).
_POSITION_SCALE = 0.05
_ROTATION_SCALE = 0.5
# Panda finger joints are about +-0.04 open and +-0.001 closed on nothing; a gap under this means an empty grasp.
_EMPTY_GRASP_GAP = 0.005
GRIPPER_OPEN = -1.0
GRIPPER_CLOSED = 1.0


@dataclass(frozen=True)
class OperatorStyle:
    """
    How one simulated operator moves.

    :param name: The style's name (recorded in the demo file's masks)
    :param speed: Largest translation action (1 = 5 cm per step)
    :param gain: Translation action per 5 cm of distance to the waypoint
    :param noise: Standard deviation of the Gaussian noise added to the six arm action components
    :param hover: Height above the grasp and place points at which the gripper approaches (m)
    :param jitter: Standard deviation of a per-episode offset of the grasp and place points (m, horizontal)
    :param settle_steps: Steps given to the gripper to close or open
    """

    name: str
    speed: float
    gain: float
    noise: float
    hover: float
    jitter: float
    settle_steps: int


OPERATOR_STYLES: tuple[OperatorStyle, ...] = (
    OperatorStyle("careful", speed=0.7, gain=2.0, noise=0.05, hover=0.12, jitter=0.002, settle_steps=14),
    OperatorStyle("steady", speed=1.0, gain=3.0, noise=0.1, hover=0.08, jitter=0.003, settle_steps=10),
    OperatorStyle("hasty", speed=1.0, gain=5.0, noise=0.15, hover=0.05, jitter=0.004, settle_steps=7),
    OperatorStyle("shaky", speed=0.9, gain=3.0, noise=0.3, hover=0.1, jitter=0.004, settle_steps=10),
)


@dataclass(frozen=True)
class Waypoint:
    """
    One phase of a scripted motion: move the gripper site toward ``target`` with the fingers along ``yaw``.

    :param target: The gripper site's goal position (world frame), recomputed every step; None holds the position
        the phase started at
    :param gripper: -1 open, 1 closed
    :param yaw: Goal yaw of the finger axis (rad), recomputed every step; None keeps the yaw the phase started with
    :param tolerance: The phase ends once the site is this close to the target (m) and has moved less than half as
        much in the last step ...
    :param min_steps: ... and has run at least this many steps
    :param max_steps: The phase ends after this many steps whatever the distance
    :param yaw_tolerance: ... and, when ``yaw`` is given, the yaw is this close to it (rad)
    :param speed: Fraction of the style's speed and noise in this phase (operators slow down and steady their hand
        where precision matters)
    :param carrying: Whether the phase holds the object: if the fingers close on nothing, the grasp failed and the
        controller starts over from the first waypoint
    """

    target: Callable[[], np.ndarray] | None
    gripper: float
    yaw: Callable[[], float] | None = None
    tolerance: float = 0.01
    min_steps: int = 0
    max_steps: int = 80
    yaw_tolerance: float = 0.05
    speed: float = 1.0
    carrying: bool = False


def _yaw(matrix: np.ndarray) -> float:
    """Yaw of a frame's x-axis in the horizontal plane."""
    return float(np.arctan2(matrix[1, 0], matrix[0, 0]))


def _rotation_vector(matrix: np.ndarray) -> np.ndarray:
    """The axis-angle vector of a rotation matrix (through its unit quaternion, stable near pi)."""
    trace = np.trace(matrix)
    diagonal = np.diag(matrix)
    if trace > diagonal.max():
        w = np.sqrt(1.0 + trace) / 2
        xyz = np.array([matrix[2, 1] - matrix[1, 2], matrix[0, 2] - matrix[2, 0], matrix[1, 0] - matrix[0, 1]]) / (4 * w)
    else:
        i = int(np.argmax(diagonal))
        j, k = (i + 1) % 3, (i + 2) % 3
        xyz = np.zeros(3)
        xyz[i] = np.sqrt(1.0 + 2 * diagonal[i] - trace) / 2
        xyz[j] = (matrix[j, i] + matrix[i, j]) / (4 * xyz[i])
        xyz[k] = (matrix[k, i] + matrix[i, k]) / (4 * xyz[i])
        w = (matrix[k, j] - matrix[j, k]) / (4 * xyz[i])
    if w < 0:
        w, xyz = -w, -xyz
    norm = np.linalg.norm(xyz)
    return np.zeros(3) if norm < 1e-12 else 2 * np.arctan2(norm, w) * xyz / norm


def _wrap(angle: float, period: float) -> float:
    """``angle`` shifted by a multiple of ``period`` into [-period / 2, period / 2)."""
    return float((angle + period / 2) % period - period / 2)


class WaypointController:
    """
    Base scripted controller: follows the waypoints of :meth:`plan`, then holds the last one; starts over (counted
    in ``retries``) when a grasp turns out empty.

    Actions: translation proportional to the distance to the waypoint (clipped to the style's speed), rotation
    toward a gripper pointing straight down with the waypoint's yaw, Gaussian noise on the six arm components,
    the gripper at the waypoint's command.

    :param env: The robosuite env (reset already)
    :param style: The operator style
    :param rng: Random generator for the noise and the per-episode offsets
    """

    def __init__(self, env: Any, style: OperatorStyle, rng: np.random.Generator):
        self.env = env
        self.style = style
        self.rng = rng
        self.site_id = env.robots[0].eef_site_id["right"]
        self.offset = np.append(rng.normal(0.0, style.jitter, size=2), 0.0)
        self.waypoints = self.plan()
        self.last_position = self.site_position()
        self.retries = 0
        self._start_phase(0)

    def plan(self) -> list[Waypoint]:
        """The task's waypoints."""
        raise NotImplementedError

    @property
    def done(self) -> bool:
        """Whether every waypoint has been reached."""
        return self.index >= len(self.waypoints)

    def finger_gap(self) -> float:
        """Opening of the fingers (the two finger joints move in opposite directions)."""
        robot = self.env.robots[0]
        left, right = self.env.sim.data.qpos[robot._ref_gripper_joint_pos_indexes["right"]]
        return float(left - right)

    def site_position(self) -> np.ndarray:
        """The gripper site's position (robomimic's ``robot0_eef_pos``)."""
        return np.array(self.env.sim.data.site_xpos[self.site_id])

    def site_matrix(self) -> np.ndarray:
        """The gripper site's orientation; its x-axis joins the fingers."""
        return np.array(self.env.sim.data.site_xmat[self.site_id]).reshape(3, 3)

    def gripper_yaw(self) -> float:
        """Yaw of the finger axis."""
        return _yaw(self.site_matrix())

    def body_position(self, name: str) -> np.ndarray:
        """Position of a body of the model."""
        return np.array(self.env.sim.data.body_xpos[self.env.sim.model.body_name2id(name)])

    def body_yaw(self, name: str) -> float:
        """Yaw of a body's x-axis."""
        return _yaw(np.array(self.env.sim.data.body_xmat[self.env.sim.model.body_name2id(name)]).reshape(3, 3))

    def nearest_yaw(self, yaw: float, period: float) -> float:
        """The yaw equivalent to ``yaw`` modulo ``period`` closest to the gripper's current yaw."""
        current = self.gripper_yaw()
        return current + _wrap(yaw - current, period)

    def __call__(self) -> np.ndarray:
        """The next action (7-D, in [-1, 1])."""
        waypoint = self.waypoints[min(self.index, len(self.waypoints) - 1)]
        if waypoint.carrying and self.finger_gap() < _EMPTY_GRASP_GAP:
            self.retries += 1
            self._start_phase(0)
            waypoint = self.waypoints[0]
        position = self.site_position()
        error = (self.phase_position if waypoint.target is None else waypoint.target()) - position
        translation = self.style.gain * error / _POSITION_SCALE
        largest, speed = np.abs(translation).max(), self.style.speed * waypoint.speed
        if largest > speed:
            translation *= speed / largest
        goal_yaw = self.phase_yaw if waypoint.yaw is None else waypoint.yaw()
        rotation = self._rotation_toward(goal_yaw)
        noise = self.rng.normal(0.0, self.style.noise * waypoint.speed, size=6)
        arm = np.concatenate([translation, rotation]) + noise
        action = np.append(np.clip(arm, -1.0, 1.0), waypoint.gripper)
        self._advance(waypoint, error, goal_yaw)
        return action

    def _rotation_toward(self, yaw: float) -> np.ndarray:
        """Rotation action toward the frame with the fingers along ``yaw`` and the gripper pointing down."""
        x_axis = np.array([np.cos(yaw), np.sin(yaw), 0.0])
        z_axis = np.array([0.0, 0.0, -1.0])
        goal = np.column_stack([x_axis, np.cross(z_axis, x_axis), z_axis])
        error = _rotation_vector(goal @ self.site_matrix().T)
        return np.clip(error / _ROTATION_SCALE, -1.0, 1.0)

    def _advance(self, waypoint: Waypoint, error: np.ndarray, goal_yaw: float) -> None:
        """Move on to the next waypoint once this one is reached or timed out."""
        self.phase_steps += 1
        position = self.site_position()
        moved, self.last_position = np.linalg.norm(position - self.last_position), position
        reached = (
            np.linalg.norm(error) < waypoint.tolerance
            and moved < waypoint.tolerance / 2
            and self.phase_steps >= waypoint.min_steps
        )
        if waypoint.yaw is not None:
            reached = reached and abs(_wrap(goal_yaw - self.gripper_yaw(), 2 * np.pi)) < waypoint.yaw_tolerance
        if not self.done and (reached or self.phase_steps >= waypoint.max_steps):
            self._start_phase(self.index + 1)

    def _start_phase(self, index: int) -> None:
        """Enter waypoint ``index``, remembering where the gripper is."""
        self.index = index
        self.phase_steps = 0
        self.phase_yaw = self.gripper_yaw()
        self.phase_position = self.site_position()


class LiftController(WaypointController):
    """Lift: fingers across the cube's faces, grasp, lift."""

    def plan(self) -> list[Waypoint]:
        cube = self.env.cube.root_body
        style = self.style

        def above_cube() -> np.ndarray:
            return self.body_position(cube) + self.offset + [0.0, 0.0, style.hover]

        def at_cube() -> np.ndarray:
            return self.body_position(cube) + self.offset - [0.0, 0.0, 0.005]

        def lifted() -> np.ndarray:
            position = self.site_position()
            return np.array([position[0], position[1], 1.0])

        def cube_yaw() -> float:
            return self.nearest_yaw(self.body_yaw(cube), np.pi / 2)

        return [
            Waypoint(above_cube, GRIPPER_OPEN, yaw=cube_yaw, tolerance=0.02),
            Waypoint(at_cube, GRIPPER_OPEN, yaw=cube_yaw, tolerance=0.008, max_steps=50, speed=0.5),
            Waypoint(None, GRIPPER_CLOSED, min_steps=style.settle_steps, tolerance=1.0),
            Waypoint(lifted, GRIPPER_CLOSED, tolerance=0.01, carrying=True),
        ]


class CanController(WaypointController):
    """Can: grasp the can from above, carry it over its quadrant of the target bin (clear of the dividers and within
    the arm's reach), drop it in."""

    def plan(self) -> list[Waypoint]:
        env = self.env
        can = env.objects[env.object_id].root_body
        # The can's quadrant starts at the bin's centre; aim 5-6 cm inside it from there.
        drop = np.array([env.bin2_pos[0] + 0.05, env.bin2_pos[1] + 0.065]) + self.offset[:2]
        carry_height = 1.02
        style = self.style

        def above_can() -> np.ndarray:
            return self.body_position(can) + self.offset + [0.0, 0.0, style.hover]

        def at_can() -> np.ndarray:
            # Fingers around the can's upper half: the can is 7 cm wide, the open fingers 8 cm apart.
            return self.body_position(can) + self.offset + [0.0, 0.0, 0.02]

        def raised() -> np.ndarray:
            position = self.site_position()
            return np.array([position[0], position[1], carry_height])

        def over_bin() -> np.ndarray:
            return np.array([drop[0], drop[1], carry_height])

        def lowered() -> np.ndarray:
            return np.array([drop[0], drop[1], 0.96])

        def away() -> np.ndarray:
            return np.array([drop[0], drop[1], 1.1])

        return [
            Waypoint(above_can, GRIPPER_OPEN, tolerance=0.006, max_steps=80),
            Waypoint(at_can, GRIPPER_OPEN, tolerance=0.008, max_steps=50, speed=0.5),
            Waypoint(None, GRIPPER_CLOSED, min_steps=style.settle_steps, tolerance=1.0),
            Waypoint(raised, GRIPPER_CLOSED, tolerance=0.03, carrying=True),
            Waypoint(over_bin, GRIPPER_CLOSED, tolerance=0.02, max_steps=120, carrying=True),
            Waypoint(lowered, GRIPPER_CLOSED, tolerance=0.02, max_steps=40, carrying=True),
            Waypoint(None, GRIPPER_OPEN, min_steps=style.settle_steps, tolerance=1.0),
            Waypoint(away, GRIPPER_OPEN, tolerance=0.02),
        ]


class SquareController(WaypointController):
    """Square: grasp the nut by the outer part of its handle, turn it square to the peg with the handle away from the
    far side of the table (out of the arm's reach), lower it over the peg, let go."""

    def plan(self) -> list[Waypoint]:
        env = self.env
        nut = env.nuts[env.nut_id]
        handle_site = env.sim.model.site_name2id(nut.important_sites["handle"])
        nut_body = nut.root_body
        peg = np.array(env.sim.data.body_xpos[env.peg1_body_id])
        carry_height = 1.02
        style = self.style

        def grasp_point() -> np.ndarray:
            # 1 cm further out than the handle's centre keeps the fingers clear of the nut's ring.
            yaw = self.body_yaw(nut_body)
            outward = np.array([0.01 * np.cos(yaw), 0.01 * np.sin(yaw), 0.003])
            return np.array(env.sim.data.site_xpos[handle_site]) + outward

        def above_handle() -> np.ndarray:
            return grasp_point() + self.offset + [0.0, 0.0, style.hover]

        def at_handle() -> np.ndarray:
            return grasp_point() + self.offset

        def raised() -> np.ndarray:
            position = self.site_position()
            return np.array([position[0], position[1], carry_height])

        def nut_over(height: float) -> Callable[[], np.ndarray]:
            # Servo the nut's centre (not the gripper) over the peg.
            def target() -> np.ndarray:
                shift = peg[:2] - self.body_position(nut_body)[:2]
                position = self.site_position()
                return np.array([position[0] + shift[0], position[1] + shift[1], height])

            return target

        def handle_yaw() -> float:
            # Fingers across the handle: along the nut's y-axis.
            return self.nearest_yaw(self.body_yaw(nut_body) + np.pi / 2, np.pi)

        def square_yaw() -> float:
            # Turn the held nut to the nearest yaw of pi / 2, pi, -pi / 2 (handle never toward +x, out of reach).
            nut_yaw = self.body_yaw(nut_body)
            goals = np.array([np.pi / 2, np.pi, -np.pi / 2])
            turns = np.array([_wrap(goal - nut_yaw, 2 * np.pi) for goal in goals])
            return self.gripper_yaw() + float(turns[np.argmin(np.abs(turns))])

        def away() -> np.ndarray:
            position = self.site_position()
            return np.array([position[0], position[1], 1.05])

        return [
            Waypoint(above_handle, GRIPPER_OPEN, yaw=handle_yaw, tolerance=0.01, max_steps=100),
            Waypoint(at_handle, GRIPPER_OPEN, yaw=handle_yaw, tolerance=0.006, max_steps=50, speed=0.5),
            Waypoint(None, GRIPPER_CLOSED, min_steps=style.settle_steps, tolerance=1.0),
            Waypoint(raised, GRIPPER_CLOSED, tolerance=0.02, carrying=True),
            Waypoint(nut_over(carry_height), GRIPPER_CLOSED, yaw=square_yaw, tolerance=0.02, max_steps=120, carrying=True),
            # Line up just above the peg's top (0.95), slowly, then slide down.
            Waypoint(nut_over(0.975), GRIPPER_CLOSED, yaw=square_yaw, tolerance=0.004, max_steps=60, speed=0.4, carrying=True),
            Waypoint(nut_over(0.87), GRIPPER_CLOSED, yaw=square_yaw, tolerance=0.01, max_steps=60, speed=0.5, carrying=True),
            Waypoint(None, GRIPPER_OPEN, min_steps=style.settle_steps, tolerance=1.0),
            Waypoint(away, GRIPPER_OPEN, tolerance=0.02),
        ]


CONTROLLERS: dict[str, type[WaypointController]] = {
    "lift": LiftController,
    "can": CanController,
    "square": SquareController,
}


def make_controller(task: str, env: Any, style: OperatorStyle, rng: np.random.Generator) -> WaypointController:
    """
    The scripted controller of a task.

    :param task: The task name (full or short)
    :param env: The robosuite env (reset already)
    :param style: The operator style
    :param rng: Random generator for the noise and the per-episode offsets
    :return: The controller; call it for each action
    """
    return CONTROLLERS[resolve_task(task).short_name](env, style, rng)
