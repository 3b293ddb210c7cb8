"""Settings saved by earlier versions of the add-on, converted when a file is opened.

Blender keeps a stored value whose property no longer exists as a plain ID property under its
old name, so an old file still holds it: a muscle's `contraction` γ (1 = rest) became the 0–1
`activation` slider, and the diffusion's steps × time step became a spread in mm. Each old
value is converted once and then removed. (Keyframes on an old property are not carried over:
their curves would need re-shaping, and the conversion is not linear; the report names them.)
"""
from __future__ import annotations

import math
from typing import List

from . import solver_numbers


def upgrade(obj) -> List[str]:
    """Convert `obj.face_physics`'s old stored values in place; what was converted, for a report."""
    settings = obj.face_physics
    done = []
    for muscle in settings.muscles:
        if "contraction" in muscle.keys():
            gamma = float(muscle["contraction"])
            if gamma > 0.0:
                muscle.activation = min(max(solver_numbers.activation_from_contraction(gamma), 0.0),
                                        solver_numbers.MAX_MUSCLE_ACTIVATION)
            del muscle["contraction"]
            done.append(f"{muscle.name} contraction {gamma:g} → activation {muscle.activation:.3f}")
    keys = settings.keys()
    if "diffusion_steps" in keys or "diffusion_time_step" in keys:
        steps = int(settings.get("diffusion_steps", solver_numbers.default("diffusion_steps")))
        step = float(settings.get("diffusion_time_step", solver_numbers.default("diffusion_time_step_m2")))
        low, high = solver_numbers.limits("diffusion_spread_m")
        settings.diffusion_spread_mm = 1000.0 * min(max(math.sqrt(2.0 * max(steps, 0) * step), low), high)
        for name in ("diffusion_steps", "diffusion_time_step"):
            if name in settings.keys():
                del settings[name]
        done.append(f"diffusion {steps} × {step:g} m² → spread {settings.diffusion_spread_mm:.1f} mm")
    return done
