"""The corrective fit's parts that need no simulation (solver/correctives/): the pairs probed
(all, or the user's), the combination samples (which keys, which weights, always the same ones)
and the ridge chosen by cross-validation over chains."""
from __future__ import annotations

import numpy as np

from solver.correctives.fitting import RIDGE_GRID, choose_ridge, fit_terms, term_names_for
from solver.correctives.samples import (FIRST_WEIGHTS, candidate_pairs, combination_chains, first_chains, pair_chain,
                                       single_chain)

KEYS = ["jawOpen", "mouthClose", "mouthSmile_L", "mouthSmile_R", "mouthFunnel", "mouthPucker"]


def test_chosen_pairs_are_the_only_ones_probed():
    """Every pair by default; with the user's pairs (either order) only those, ordered as the keys,
    and a key without a later partner among them gets no probe chain."""
    candidates, singles, probes = first_chains(KEYS)
    assert candidates == candidate_pairs(KEYS) and len(candidates) == 15 and len(singles) == 6
    assert [probe.keys[0] for probe in probes] == KEYS[:-1]
    assert sum(len(probe.weights) for probe in probes) == 15
    chosen = [("mouthPucker", "jawOpen"), ("mouthSmile_L", "mouthSmile_R")]
    candidates, singles, probes = first_chains(KEYS, chosen, {"mouthClose": "jawOpen"})
    assert candidates == [("jawOpen", "mouthPucker"), ("mouthSmile_L", "mouthSmile_R")]
    assert len(singles) == 6 and [probe.keys for probe in probes] == [("jawOpen",), ("mouthSmile_L",)]
    np.testing.assert_array_equal(probes[0].weights, [[1, 0, 0, 0, 0, 1]])
    np.testing.assert_array_equal(probes[1].weights, [[0, 0, 1, 1, 0, 0]])


def test_combinations_are_rays_to_distinct_linked_key_sets_and_always_the_same():
    kept = [("jawOpen", "mouthSmile_L"), ("mouthSmile_L", "mouthSmile_R"), ("mouthSmile_R", "mouthPucker"),
            ("mouthFunnel", "mouthPucker"), ("jawOpen", "mouthClose")]
    contexts = {"mouthClose": "jawOpen"}
    chains = combination_chains(KEYS, kept, 8, contexts)
    again = combination_chains(KEYS, kept, 8, contexts)
    assert [c.stem for c in chains] == [c.stem for c in again]
    assert all(np.array_equal(a.weights, b.weights) for a, b in zip(chains, again))
    assert 1 < len(chains) <= 8 and len({c.keys for c in chains}) == len(chains)
    linked = {frozenset(pair) for pair in kept}
    for chain in chains:
        assert chain.kind == "combination" and 3 <= len(chain.keys) <= 5
        columns = [KEYS.index(key) for key in chain.keys]
        # Every key is reached from the others through kept pairs.
        reached = {chain.keys[0]}
        for _ in chain.keys:
            reached |= {key for key in chain.keys for other in reached if frozenset((key, other)) in linked}
        assert reached == set(chain.keys), chain.keys
        weights = chain.weights
        assert weights.shape == (len(FIRST_WEIGHTS), len(KEYS))
        assert np.all(weights[:, [i for i in range(len(KEYS)) if i not in columns]] == 0.0)
        direction = weights[-1, columns]
        if "mouthClose" not in chain.keys:      # a ray t · d, d in [0.4, 1]
            assert np.all((direction >= 0.4) & (direction <= 1.0))
            np.testing.assert_allclose(weights[:, columns], np.outer(FIRST_WEIGHTS, direction))
        else:                                   # on top of jawOpen: never above it
            assert np.all(weights[:, 0] >= weights[:, 1])
    assert combination_chains(KEYS, kept, 0) == [] and combination_chains(KEYS, [], 5) == []
    assert combination_chains(KEYS[:2], [tuple(KEYS[:2])], 5) == []      # no third key to link


def _samples(keys, kept, cubic: float):
    """Chains' weights and skins of a made-up rig whose simulation is the basis's terms exactly,
    plus `cubic` · w_a³ (a departure the basis cannot carry)."""
    rng = np.random.default_rng(3)
    vertices = 40
    neutral, deltas = rng.normal(size=(vertices, 3)), rng.normal(size=(len(keys), vertices, 3))
    term_names = term_names_for(keys, kept)
    truth = 1e-3 * rng.normal(size=(len(term_names), vertices, 3))
    from solver.correctives.corr_file import term_coefficients
    chains = [single_chain(keys, key) for key in keys] + [pair_chain(keys, *pair) for pair in kept] + \
        combination_chains(keys, kept, len(kept))
    weights = np.concatenate([chain.weights for chain in chains])
    index = np.concatenate([np.full(len(chain.weights), n) for n, chain in enumerate(chains)])
    skins = neutral + np.tensordot(weights, deltas, axes=1) + np.tensordot(
        term_coefficients(term_names, keys, weights), truth, axes=1) + cubic * (weights ** 3).sum(axis=1)[:, None, None]
    return neutral, deltas, term_names, truth, weights, skins, index


def test_the_ridge_is_none_when_the_samples_are_the_basis_and_shrinks_otherwise():
    keys = ["a", "b", "c", "d"]
    kept = candidate_pairs(keys)
    neutral, deltas, term_names, truth, weights, skins, index = _samples(keys, kept, 0.0)
    ridge, errors = choose_ridge(neutral, deltas, keys, term_names, weights, skins, index)
    assert ridge == 0.0 and errors.shape == (len(RIDGE_GRID),) and errors[0] < 1e-9
    terms, rank, columns = fit_terms(neutral, deltas, keys, term_names, weights, skins, ridge)
    assert rank == columns and np.abs(terms - truth).max() < 1e-10
    # With a departure the basis cannot carry, a larger α gives smaller terms, and the choice is
    # the grid's least cross-validated error, the same on a second call.
    neutral, deltas, term_names, _, weights, skins, index = _samples(keys, kept, 2e-3)
    ridge, errors = choose_ridge(neutral, deltas, keys, term_names, weights, skins, index)
    assert ridge == RIDGE_GRID[int(np.argmin(errors))]
    assert choose_ridge(neutral, deltas, keys, term_names, weights, skins, index)[0] == ridge
    sizes = [np.abs(fit_terms(neutral, deltas, keys, term_names, weights, skins, alpha)[0]).sum() for alpha in
             (0.0, 0.01, 0.1)]
    assert sizes[0] > sizes[1] > sizes[2]
