"""One correctives request: quadratic corrective shape keys fitted to simulated samples (paper 002 §4).

`python -m solver correctives MODEL FIT RIG -o CORR.npz [--keys …] [--pairs a:b,…] [--jobs N] [--threshold-mm X]`
and the `correctives` job kind both parse into a `CorrectivesRequest`, checked on construction.
`run_correctives` solves the single-key chains and the pair probes, keeps the pairs whose probe
departs from the sum of the singles by more than the threshold, solves the kept pairs' samples,
fits the terms (correctives/fitting.py) and writes CORR.npz atomically (correctives/corr_file.py).
The solved samples stay in `.<stem>.samples/` beside CORR.npz, so a rerun (after a crash, a
cancel, or with another threshold) solves only what is missing. docs/correctives.md.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np

from ..correctives.fitting import DEFAULT_THRESHOLD_MM
from . import fields as check
from .fields import RequestError

MAX_PROCESSES = 64
MAX_COMBINATIONS = 10_000
THRESHOLD_RANGE_MM = (0.0, 100.0)
# A chain is at most 16 quasi-static frames; on ICT (~15 k tets) with lip contact a frame takes
# seconds to tens of seconds, so 30 min is a stuck child, not a slow one.
DEFAULT_SAMPLE_TIMEOUT_S = 1800.0
SAMPLE_TIMEOUT_RANGE_S = (5.0, 6 * 3600.0)
COLLISION_KINDS = ("teeth", "lips")


@dataclass(frozen=True)
class CorrectivesRequest:
    model: Path
    fit: Path
    rig: Path
    output: Path                                 # CORR.npz
    keys: tuple = ()                             # shape keys to correct; () = every key of the fit
    pairs: tuple = ()                            # ((a, b), …) the only pairs probed; () = every pair of the keys
    processes: int = 1                           # chains of samples solved at once, one process each
    threshold_mm: float = DEFAULT_THRESHOLD_MM   # pairs departing less from the sum of singles are pruned
    collisions: tuple = COLLISION_KINDS          # the contacts the samples are simulated with
    sample_timeout_s: float = DEFAULT_SAMPLE_TIMEOUT_S   # per chain of samples (one child process)
    # Rays to combinations of 3–5 linked keys (correctives/samples.py); None: as many as kept pairs.
    combinations: Optional[int] = None

    def __post_init__(self):
        def put(name, value):
            object.__setattr__(self, name, value)

        put("model", check.input_file(self.model, "model", "MODEL.npz"))
        put("fit", check.input_file(self.fit, "fit", "FIT.npz"))
        put("rig", check.input_file(self.rig, "rig", "RIG.npz"))
        put("keys", check.names(tuple(self.keys), "keys") if self.keys else ())
        put("pairs", check.name_pairs(tuple(self.pairs), "pairs") if self.pairs else ())
        put("processes", check.whole_number(self.processes, "processes", 1, MAX_PROCESSES))
        put("threshold_mm", check.number(self.threshold_mm, "threshold_mm", *THRESHOLD_RANGE_MM,
                                         meaning="millimetres a pair must depart from the sum of its singles"))
        put("collisions", check.choices(tuple(self.collisions), "collisions", COLLISION_KINDS))
        if self.combinations is not None:
            put("combinations", check.whole_number(self.combinations, "combinations", 0, MAX_COMBINATIONS))
        put("sample_timeout_s", check.number(self.sample_timeout_s, "sample_timeout_s", *SAMPLE_TIMEOUT_RANGE_S,
                                             meaning="seconds one chain of samples may take"))
        put("output", check.output_file(self.output, "output", ".npz", [self.model, self.fit, self.rig]))


def samples_folder(output: Path) -> Path:
    return Path(output).resolve().parent / f".{Path(output).stem}.samples"


def _inputs(request: CorrectivesRequest):
    """(model, fit, rig, keys, {key: the key it was fitted on top of}) loaded and checked against
    each other."""
    from ..inverse.fit_file import load_fit, shape_contexts
    from ..model_file import load_model
    from ..rig import load_rig
    model = load_model(request.model)
    fit = load_fit(request.fit, model)
    rig = load_rig(request.rig)
    if len(rig.vertices) != len(model["skin_vertices"]) or not np.allclose(rig.vertices, model["skin_vertices"],
                                                                          atol=1e-9):
        raise RequestError("rig", "not the rig the model was built from (its neutral skin differs)",
                           "give the rig the model and fit were made from")
    fitted = [str(name) for name in fit["shape_key_names"]]
    in_rig = [str(name) for name in rig.shape_key_names]
    keys = list(request.keys) or [name for name in fitted if name in in_rig]
    unknown = [name for name in keys if name not in fitted]
    if unknown:
        raise RequestError("keys", f"{', '.join(unknown)} not in the fit (it has {', '.join(fitted)})",
                           "fit those shapes first, or correct the names")
    absent = [name for name in keys if name not in in_rig]
    if absent:
        raise RequestError("keys", f"{', '.join(absent)} not shape keys of the rig", "give the rig the fit was made "
                                                                                     "from")
    if not keys:
        raise RequestError("keys", "the fit and the rig share no shape key", "fit the rig's shape keys first")
    contexts = {name: context for name, context in zip(fitted, shape_contexts(fit)) if context and name in keys}
    missing = {name: context for name, context in contexts.items() if context not in keys}
    if missing:
        on_top = "; ".join(f"{name} is fitted on top of {context}" for name, context in missing.items())
        raise RequestError("keys", on_top + " (its activations are a difference to that key's, so it is sampled "
                                            "only together with it)",
                           "add " + ", ".join(sorted(set(missing.values()))) + " to the keys")
    outside = sorted({name for pair in request.pairs for name in pair} - set(keys))
    if outside:
        raise RequestError("pairs", f"{', '.join(outside)} {'is' if len(outside) == 1 else 'are'} paired but not "
                                    f"among the keys ({', '.join(keys)})",
                           "add " + ", ".join(outside) + " to the keys (each must be fitted), or leave "
                           "its pairs out")
    return model, fit, rig, keys, contexts


def run_correctives(request: CorrectivesRequest, report) -> dict:
    from ..correctives.corr_file import save_correctives
    from ..correctives.fitting import (RIDGE_GRID, choose_ridge, fit_terms, probe_deviation_mm, sample_errors_mm,
                                       term_names_for)
    from ..correctives.samples import (SampleStore, combination_chains, first_chains, pair_chain, solve_chains,
                                       store_fingerprint)
    model, fit, rig, keys, contexts = _inputs(request)
    neutral = np.asarray(rig.vertices, dtype=np.float64)
    rig_names = [str(name) for name in rig.shape_key_names]
    deltas = np.asarray(rig.shape_key_deltas, dtype=np.float64)[[rig_names.index(key) for key in keys]]
    store = SampleStore(samples_folder(request.output),
                        store_fingerprint(request.model, request.fit, request.collisions), report)
    candidates, singles, probes = first_chains(keys, request.pairs, contexts)
    report.progress(f"correctives for {len(keys)} keys: {len(singles)} single-key chains, {len(candidates)} pair "
                    f"probes, in {request.processes} process{'es' * (request.processes != 1)}", fraction=0.0,
                    keys=len(keys), pairs=len(candidates))

    def solve(chains, done, total):
        return solve_chains(chains, keys, request.model, request.fit, request.collisions, store, request.processes,
                            request.sample_timeout_s, report, done, total) if chains else {}

    from ..correctives.samples import SampleError
    try:
        first = solve(singles + probes, 0, len(singles) + len(probes) + len(candidates))
        at_full = {chain.keys[0]: first[chain.stem][0][-1] for chain in singles}
        deviation, probe_skin = [], {}
        for chain in probes:
            partners = [b for a, b in candidates if a == chain.keys[0]]
            for row, partner in enumerate(partners):
                probe_skin[(chain.keys[0], partner)] = (chain.weights[row], first[chain.stem][0][row],
                                                        first[chain.stem][1][row])
                deviation.append(probe_deviation_mm(neutral, at_full, first[chain.stem][0][row], chain.keys[0],
                                                    partner))
        kept = [pair for pair, value in zip(candidates, deviation) if value > request.threshold_mm]
        report.progress(f"{len(kept)} of {len(candidates)} pairs kept: their simulation at (1, 1) departs from the "
                        f"sum of the singles by more than {request.threshold_mm:g} mm", fraction=None,
                        pairs_kept=len(kept), pairs=len(candidates))
        pairs = [pair_chain(keys, *pair, contexts=contexts) for pair in kept]
        combinations = combination_chains(keys, kept, len(kept) if request.combinations is None
                                          else request.combinations, contexts)
        later = pairs + combinations
        second = solve(later, len(singles) + len(probes), len(singles) + len(probes) + len(later))
    except SampleError as error:
        raise RequestError("model", str(error), "see the message; solved samples are kept, so running the same "
                                                "command again continues where this one stopped") from None
    solved = {**first, **second}
    weights, skins, converged, in_fit, chain_index = [], [], [], [], []
    for index, chain in enumerate(singles + pairs + combinations):
        weights.append(chain.weights)
        skins.append(solved[chain.stem][0])
        converged.append(solved[chain.stem][1])
        in_fit.append(np.ones(len(chain.weights), dtype=bool))
        chain_index.append(np.full(len(chain.weights), index))
    for pair, value in zip(candidates, deviation):
        if pair not in kept:           # a pruned pair's probe: not fitted, its error reported
            row_weights, skin, done = probe_skin[pair]
            weights.append(row_weights[None])
            skins.append(skin[None])
            converged.append(np.atleast_1d(done))
            in_fit.append(np.zeros(1, dtype=bool))
            chain_index.append(np.full(1, -1))
    weights, skins, chain_index = np.concatenate(weights), np.concatenate(skins), np.concatenate(chain_index)
    converged, in_fit = np.concatenate(converged).astype(bool), np.concatenate(in_fit)
    if not converged.all():
        report.warning(f"{int((~converged).sum())} of {len(converged)} samples did not converge; the correctives "
                       f"are fitted to them as they are")
    term_names = term_names_for(keys, kept)
    ridge, ridge_errors = choose_ridge(neutral, deltas, keys, term_names, weights[in_fit], skins[in_fit],
                                       chain_index[in_fit])
    if ridge_errors.any():
        report.progress(f"ridge α = {ridge:g}, chosen by cross-validation over chains (mean vertex distance to the "
                        f"left-out samples {ridge_errors[RIDGE_GRID.index(ridge)]:.3f} mm; without ridge "
                        f"{ridge_errors[0]:.3f} mm)", fraction=None, ridge=ridge)
    terms, rank, columns = fit_terms(neutral, deltas, keys, term_names, weights[in_fit], skins[in_fit], ridge)
    if rank < columns:
        report.warning(f"the samples determine only {rank} of the {columns} corrective terms")
    corrected, linear = sample_errors_mm(neutral, deltas, keys, term_names, terms, weights, skins)
    save_correctives(request.output, {
        "key_names": np.array(keys, dtype=str), "term_names": term_names, "terms": terms.astype(np.float32),
        "vertex_count": np.array(len(neutral)),
        "pairs": np.array(candidates, dtype=str).reshape(len(candidates), 2),
        "probe_deviation_mm": np.array(deviation, dtype=np.float64),
        "pair_kept": np.array([pair in kept for pair in candidates], dtype=bool),
        "threshold_mm": np.array(request.threshold_mm), "sample_weights": weights,
        "sample_error_mm": corrected, "sample_linear_error_mm": linear, "sample_in_fit": in_fit,
        "ridge": np.array(ridge), "ridge_grid": np.array(RIDGE_GRID), "ridge_cv_error_mm": ridge_errors,
        "combinations": np.array(len(combinations))})
    fitted = corrected[in_fit]
    summary = {"outputs": {"correctives": str(request.output)}, "keys": len(keys), "pairs": len(candidates),
               "pairs_kept": len(kept), "terms": len(term_names), "samples": int(in_fit.sum()),
               "combinations": len(combinations), "ridge": ridge,
               "error_max_mm": round(float(fitted.max()), 4), "error_mean_mm": round(float(fitted.mean()), 4),
               "linear_error_max_mm": round(float(linear[in_fit].max()), 4),
               "linear_error_mean_mm": round(float(linear[in_fit].mean()), 4)}
    summary["message"] = (f"wrote {request.output.name}: {len(term_names)} corrective shapes for {len(keys)} keys, "
                          f"{len(kept)} of {len(candidates)} pairs kept (> {request.threshold_mm:g} mm); on the "
                          f"{summary['samples']} simulated samples the corrected rig is off by "
                          f"{summary['error_mean_mm']:.3f} mm mean / {summary['error_max_mm']:.3f} mm max of the "
                          f"per-sample worst vertex (the linear rig: {summary['linear_error_mean_mm']:.3f} / "
                          f"{summary['linear_error_max_mm']:.3f} mm)")
    return summary
