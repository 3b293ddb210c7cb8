"""The stiffness fit's loss terms (paper 001 Eq. 16–19), each with its gradient, in face units.

- reproducibility barrier (Eq. 17): −λ_r log(1 − (‖x_i − x_i^t‖/ε_r)²) per vertex and shape, infinite
  at ε_r, so the optimiser never leaves the feasible set;
- target stiffness (Eq. 18): ½ A_i λ_t (κ_i − κ_t)², area-weighted, pulling every vertex toward the
  target where the shapes leave it free (ears, back of the head);
- smoothness (Eq. 19): ½ λ_l ((κ_a − κ_b)/‖e⁰‖)² per edge.
The barrier depends on the equilibrium positions (the adjoint carries it to the stiffness), the
other two on the stiffness alone.
"""
from __future__ import annotations

import numpy as np


def barrier(x, targets, reproducibility: float, weight: float):
    """(value, gradient (n, 3)) of Eq. 17 for one shape; value inf when a vertex is at or past ε_r."""
    offset = np.asarray(x) - np.asarray(targets)
    ratio = (offset * offset).sum(axis=1) / reproducibility ** 2
    if ratio.max(initial=0.0) >= 1.0:
        return np.inf, None
    gap = 1.0 - ratio
    value = -weight * np.log(gap).sum()
    gradient = (2.0 * weight / reproducibility ** 2 / gap)[:, None] * offset
    return float(value), gradient


def max_deviation(x, targets) -> float:
    """Largest vertex distance from its target."""
    offset = np.asarray(x) - np.asarray(targets)
    return float(np.sqrt((offset * offset).sum(axis=1).max(initial=0.0)))


def target_stiffness(stiffness, vertex_area, target: float, weight: float):
    """(value, gradient (n,)) of Eq. 18."""
    difference = np.asarray(stiffness) - target
    return (float(0.5 * weight * (vertex_area * difference * difference).sum()),
            weight * vertex_area * difference)


def smoothness(stiffness, edges, edge_rest_length, weight: float):
    """(value, gradient (n,)) of Eq. 19."""
    stiffness = np.asarray(stiffness)
    slope = (stiffness[edges[:, 0]] - stiffness[edges[:, 1]]) / edge_rest_length
    gradient = np.zeros(len(stiffness))
    per_edge = weight * slope / edge_rest_length
    np.add.at(gradient, edges[:, 0], per_edge)
    np.add.at(gradient, edges[:, 1], -per_edge)
    return float(0.5 * weight * (slope * slope).sum()), gradient
