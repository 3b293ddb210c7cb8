"""Per-tet muscle and passive volume fractions by Monte-Carlo sampling (paper 000 §4–5).

The tet mesh does not conform to the thin facial muscles; instead each tet records how
much of it each muscle occupies. Samples are uniform in each tet (a fixed, seeded
pattern of barycentric points, so builds are reproducible); a sample inside several
muscles counts for the one it is most inside, so fractions never sum above one.
"""
from __future__ import annotations

import itertools

import numpy as np

from .muscles import path_bounds, path_membership


def uniform_barycentric_samples(count, seed=7):
    """(≈count,4) barycentric points, uniform in a tetrahedron and closed under corner permutations.

    Closing the pattern under all 24 orderings of the corners makes it independent of
    how a tet happens to list its nodes, so mirror-image tets sample mirror-image points
    and a symmetric face gets symmetric muscle fractions.
    """
    rng = np.random.default_rng(seed)
    base = max(1, round(count / 24))
    cuts = np.sort(rng.random((base, 3)), axis=1)
    points = np.diff(np.concatenate([np.zeros((base, 1)), cuts, np.ones((base, 1))], axis=1), axis=1)
    orders = np.array(list(itertools.permutations(range(4))))
    return points[:, orders].reshape(-1, 4)


def muscle_fractions(nodes, tets, muscles, samples_per_tet=48):
    """(M,m) fraction of each tet in each muscle, and (M,m) mean path parameter of those samples.

    The path parameter (0 at origin, 1 at insertion) feeds the Laplace boundary conditions.
    """
    weights = uniform_barycentric_samples(samples_per_tet)
    samples_per_tet = len(weights)
    corners = nodes[tets]                                         # (M,4,3)
    points = np.einsum("sk,mkd->msd", weights, corners)          # (M,S,3)
    m = len(muscles)
    best_score = np.zeros((len(tets), samples_per_tet))           # must beat 0 to count
    best_muscle = np.full((len(tets), samples_per_tet), -1)
    best_param = np.zeros((len(tets), samples_per_tet))
    tet_low, tet_high = corners.min(1), corners.max(1)
    for index, muscle in enumerate(muscles):
        for path in muscle.paths:
            low, high = path_bounds(path)
            near = np.flatnonzero(np.all(tet_high >= low, 1) & np.all(tet_low <= high, 1))
            if not len(near):
                continue
            score, param = path_membership(path, points[near].reshape(-1, 3))
            score, param = score.reshape(len(near), -1), param.reshape(len(near), -1)
            better = score > best_score[near]
            best_score[near] = np.where(better, score, best_score[near])
            best_muscle[near] = np.where(better, index, best_muscle[near])
            best_param[near] = np.where(better, param, best_param[near])
    fraction = np.zeros((len(tets), m))
    mean_param = np.zeros((len(tets), m))
    for index in range(m):
        hit = best_muscle == index
        count = hit.sum(1)
        fraction[:, index] = count / samples_per_tet
        mean_param[:, index] = np.where(count > 0, (best_param * hit).sum(1) / np.maximum(count, 1), 0.0)
    return fraction, mean_param
