"""Face regions on the coarse shell, for judging the fitted stiffness maps (paper 001 Fig. 5:
stiffer on the nose and forehead than on the cheeks and lips): tests/test_shell_fit.py asserts
the order, bench/shell_fit.py prints the means docs/shell.md quotes."""
from __future__ import annotations

import numpy as np


def face_regions(shell, rig) -> dict:
    """Coarse-vertex masks of the nose, forehead, lips and cheeks, as balls round points placed
    from the landmarks solver/model_builder/landmarks.py infers from the shape keys (radii in
    face heights): nose tip and mid-bridge; the midline forehead point and two points beside it
    a brow's width out; upper and lower lip and the four half-way points to the corners; the
    points half-way from each cheekbone to the mouth corner."""
    from ..model_builder.landmarks import infer_landmarks
    p = infer_landmarks(rig).position
    x = shell.coarse_rest * shell.face_height_m
    height = shell.face_height_m

    def ball(points, radius):
        return np.min([np.linalg.norm(x - point, axis=1) for point in points], axis=0) < radius * height

    brow = 0.5 * (p["brow_outer_L"] - p["brow_inner_R"])
    lips = [p["upper_lip"], p["lower_lip"]] + [0.5 * (p[a] + p[b]) for a in ("upper_lip", "lower_lip")
                                               for b in ("mouth_corner_L", "mouth_corner_R")]
    return {"nose": ball([p["nose_tip"], 0.5 * (p["nose_tip"] + p["nasion"])], 0.05),
            "forehead": ball([p["forehead"], p["forehead"] + brow, p["forehead"] - brow], 0.06),
            "lips": ball(lips, 0.04),
            "cheeks": ball([0.5 * (p["cheekbone_L"] + p["mouth_corner_L"]),
                            0.5 * (p["cheekbone_R"] + p["mouth_corner_R"])], 0.05)}


def region_means(stiffness: np.ndarray, regions: dict) -> dict:
    """Geometric mean of a per-vertex stiffness over each region (the fit works in log κ)."""
    return {name: float(np.exp(np.log(stiffness[mask]).mean())) for name, mask in regions.items()}
