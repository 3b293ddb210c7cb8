"""Sparse solves of the reduced Hessian for Newton's method (newton.py), on CHOLMOD.

CHOLMOD's symbolic analysis (fill-reducing ordering, supernodal structure) is done once per
reduced-Hessian pattern, which ``BoneConstraints.reduce_hessian`` keeps identical across
iterations and frames; each iteration only refactorises the numbers (``cholesky_inplace``).
The supernodal factorisation is an LLᵀ that stops with "not positive definite" instead of
silently producing an indefinite LDLᵀ, so a Hessian that is not positive definite is caught
and retried with a diagonal shift H + βI, β growing tenfold from 1e-8 × the mean diagonal (or,
right after a shifted factorisation, from a tenth of that shift): a shifted Newton step still
points downhill, and the shift is recorded per iteration.

A numeric factorisation costs ~0.15 s on a 35k-tet face, several times the assembly, and
frame-to-frame (and iteration-to-iteration) the Hessian changes little. So the last factor is
kept and used as the preconditioner of conjugate gradients on the current Hessian: an
inexact Newton step (Dembo–Eisenstat–Steihaug) solved to a relative residual η_k = min(0.1,
residual_k / force_scale), which keeps Newton's quadratic convergence while each solve costs a
few triangular solves. When CG needs more than MAX_KRYLOV_ITERATIONS (the old factor no longer
describes the Hessian) or meets negative curvature (CG would not give a descent direction),
the current Hessian is factorised and solved directly, and that factor is kept.

A part of the Hessian can switch on and off between iterations without the elasticity
changing much: the contact planes' augmented-Lagrangian terms, κ (w ⊗ n)(w ⊗ n)ᵀ per active
plane, stiff (κ = 100 × the tissue's) and discrete. A kept factor made before a plane switched
on preconditions CG so poorly that contact rounds used to be solved exactly, a factorisation
per iteration. An objective that offers ``hessian_low_rank(x)`` (those columns, one key per
column) gets a preconditioner that carries the current ones: the kept factor, copied once,
updated and downdated with CHOLMOD's rank-k modification (Davis & Hager) by the columns that
appeared and disappeared since, instead of a new factorisation (measured on ICT's lip
animation: docs/collisions.md). Keys name full-space columns; a plane kept across frames keeps
the reduced column of the frame it was added in (sliding bases turn with the jaw), which only
makes the preconditioner that much less exact: the downdate takes out what was put in.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from .cholesky import NotPositiveDefinite, SparseCholesky

FIRST_SHIFT_RELATIVE = 1e-8     # first diagonal shift, relative to the mean |diagonal|
SHIFT_GROWTH = 10.0
MAX_SHIFT_ATTEMPTS = 14         # up to 1e5 × the mean diagonal: a scaled gradient step
# Each CG iteration costs a pair of triangular solves with the kept factor (~9 ms at 35k tets
# against ~150 ms for a new factorisation); past this many a fresh factor is cheaper.
MAX_KRYLOV_ITERATIONS = 12


@dataclass(frozen=True)
class LowRankTerm:
    """Σ_i c_i c_iᵀ, the part of a matrix that switches discretely between solves: the columns
    c_i (n × k CSC) and one hashable key per column that identifies its values exactly (equal
    keys, equal columns), so that two terms can be compared column by column."""
    columns: sp.csc_matrix
    keys: tuple

    @staticmethod
    def empty(size: int) -> "LowRankTerm":
        return LowRankTerm(sp.csc_matrix((size, 0)), ())


class HessianNotPositiveDefinite(RuntimeError):
    """None of the diagonal shifts tried (up to the largest of the sequence, or the ones a caller
    gave) made the matrix positive definite / gave a usable descent direction."""


class CholmodLinearSolver:
    """Solves (Pᵀ H P) d = r by supernodal Cholesky, reusing one symbolic analysis per pattern,
    or, when an inexact solve is allowed, by CG preconditioned with the last numeric factor
    (modified by the change of the matrix's low-rank term since, when one is given)."""

    def __init__(self):
        self._factor = None
        self._has_numeric_factor = False
        self._factored_term: LowRankTerm | None = None      # the low-rank term inside the factor
        self._modified: tuple | None = None                # (factor copy, the term it holds)
        self._factored_matrix: tuple | None = None         # (matrix, shift) factorised: `kept_factor`
        self._indptr = self._indices = None
        self.symbolic_analyses = 0
        self.factorisations = 0
        self.krylov_iterations = 0
        self.low_rank_modifications = 0
        self.last_shift = 0.0
        # A kept factor whose last CG solve took more than this many iterations is stale: the
        # next solve factorises instead of running CG on it (None: only when CG fails). As the
        # factor ages CG climbs (ICT smooth take: 3 → 19 iterations a frame over 24 frames
        # without a factorisation); a factorisation costs ~12–15 CG iterations and brings them
        # back to 1–4. Same take, 24 frames, oversolve guard 0.2: 281 CG iterations and no
        # factorisation without the refresh, 183 + 1 refreshing past 8, 150 + 1 past 6. Set by
        # the simulator (SimulationSettings.stale_factor_krylov_iterations).
        self.stale_krylov_iterations: int | None = None
        self._stale = False

    def _analyse_if_new_pattern(self, matrix: sp.csc_matrix):
        same_pattern = self._factor is not None and (
            (matrix.indptr is self._indptr and matrix.indices is self._indices)
            or (np.array_equal(matrix.indptr, self._indptr) and np.array_equal(matrix.indices, self._indices)))
        if not same_pattern:
            # The analysis (METIS ordering, where the back end keeps one) is paid once per
            # animation, ~0.1 s at 35k tets (cholesky.py).
            self._factor = SparseCholesky(matrix)
            self._has_numeric_factor = False
            self._indptr, self._indices = matrix.indptr, matrix.indices
            self.symbolic_analyses += 1
            self.last_shift = 0.0

    def solve(self, matrix: sp.csc_matrix, rhs: np.ndarray, relative_tolerance: float = 0.0,
              low_rank: LowRankTerm | None = None, shifts: tuple | None = None) -> tuple[np.ndarray, float]:
        """(d, β): d solves (matrix + βI) d = rhs, β = 0 unless the matrix is not positive
        definite; with relative_tolerance > 0, ‖matrix d − rhs‖ ≤ relative_tolerance ‖rhs‖ suffices.
        `low_rank`: the part of `matrix` that is Σ c cᵀ over its columns (see LowRankTerm).
        `shifts`: the only shifts to try, in order (default: the growing sequence, see
        ``factorise``); when none works, HessianNotPositiveDefinite."""
        self._analyse_if_new_pattern(matrix)
        if relative_tolerance > 0.0 and not self._stale:
            direction, _ = self.krylov_solve(matrix, rhs, relative_tolerance, low_rank)
            if direction is not None:
                return direction, 0.0
        shift = self.factorise(matrix, low_rank, shifts=shifts)
        return self._factor.solve(rhs), shift

    def krylov_solve(self, matrix: sp.csc_matrix, rhs: np.ndarray, relative_tolerance: float,
                     low_rank: LowRankTerm | None = None, shift: float = 0.0) -> tuple[np.ndarray | None, str]:
        """(d, outcome): d solves (matrix + shift I) d = rhs to `relative_tolerance` by CG
        preconditioned with the kept factor (see ``solve``), never factorising; d is None when
        there is no kept factor (outcome NO_FACTOR), CG met negative curvature (NEGATIVE_CURVATURE:
        the matrix is not positive definite) or needed more than MAX_KRYLOV_ITERATIONS
        (TOO_MANY_ITERATIONS)."""
        self._analyse_if_new_pattern(matrix)
        if not self._has_numeric_factor:
            return None, NO_FACTOR
        low_rank = low_rank if low_rank is not None else LowRankTerm.empty(matrix.shape[0])
        preconditioner = self._preconditioner_for(low_rank)
        direction, iterations, outcome = _conjugate_gradients_with_outcome(
            matrix, rhs, preconditioner.solve, relative_tolerance, MAX_KRYLOV_ITERATIONS, shift)
        self.krylov_iterations += iterations
        self._stale = self.stale_krylov_iterations is not None and iterations > self.stale_krylov_iterations
        return direction, outcome

    def _preconditioner_for(self, term: LowRankTerm):
        """The kept factor with its low-rank term replaced by `term`: columns that appeared are
        added (update) before those that went are taken out (downdate), so the matrix stays
        positive definite in between. The modified copy is kept and modified again next time.
        A back end that cannot modify a factor (cholespy) preconditions with the kept one as it
        is, and CG makes up the difference in iterations."""
        if not self._factor.can_modify:
            return self._factor.current
        factor, held = self._modified if self._modified is not None else (self._factor.current, self._factored_term)
        wanted, present = set(term.keys), set(held.keys)
        added = [i for i, key in enumerate(term.keys) if key not in present]
        removed = [i for i, key in enumerate(held.keys) if key not in wanted]
        if not added and not removed:
            return factor
        if factor is self._factor.current:
            # The modification turns the factor simplicial; the kept supernodal one is what the
            # next factorisation refills, so the modified preconditioner is a copy.
            factor = factor.copy()
        if added:
            factor.modify(term.columns[:, added].tocsc())
        if removed:
            factor.modify(held.columns[:, removed].tocsc(), subtract=True)
        self.low_rank_modifications += 1
        self._modified = (factor, term)
        return factor

    def factorise(self, matrix: sp.csc_matrix, low_rank: LowRankTerm | None = None,
                  shifts: tuple | None = None) -> float:
        """Factorise matrix + βI, β the smallest shift of the sequence that makes it positive
        definite (0 when it already is), and keep the factor; returns β. `low_rank`: the part
        of `matrix` that switches between solves (see ``solve``), remembered with the factor.
        `shifts`: try only these, in order."""
        self._analyse_if_new_pattern(matrix)
        self._modified = None
        self._factored_term = low_rank if low_rank is not None else LowRankTerm.empty(matrix.shape[0])
        for shift in (shift_sequence(matrix, self.last_shift) if shifts is None else shifts):
            self.factorisations += 1
            try:
                self._factor.factorise(matrix, shift)
            except NotPositiveDefinite:
                self._has_numeric_factor = False
                continue
            self._has_numeric_factor = True
            self._stale = False
            self.last_shift = shift
            # Values are refilled in place by the next assembly; the pattern is shared and fixed.
            self._factored_matrix = (sp.csc_matrix((matrix.data.copy(), matrix.indices, matrix.indptr),
                                                   shape=matrix.shape), shift)
            return shift
        if shifts is not None:
            raise HessianNotPositiveDefinite("reduced Hessian not positive definite with the shifts "
                                             + ", ".join(f"{value:.3g}" for value in shifts))
        raise HessianNotPositiveDefinite(
            f"reduced Hessian not positive definite even with a diagonal shift of {shift:.3g}")

    def forget_numeric_factor(self) -> None:
        """Drop the kept numeric factor (the symbolic analysis stays): the next solve factorises,
        as a fresh solver would. The inexact steps that the kept factor preconditions depend on
        where it was made, and where a face has more than one equilibrium for the same loads
        (ICT's lower lip in mouthShrugLower: two, 0.72 mm apart) that can decide which one is
        reached."""
        self._has_numeric_factor = False
        self._factored_term = None
        self._modified = None
        self.last_shift = 0.0

    def kept_factor(self) -> dict | None:
        """What rebuilds the kept numeric factor: the matrix factorised, its shift and the
        low-rank term inside, as plain arrays (None without one). A resumed bake restores it
        (`restore_factor`), so its first frames are preconditioned as the uninterrupted bake's
        were and reach the same equilibrium, not one a tolerance away (physics/checkpoint.py)."""
        if not self._has_numeric_factor or self._factored_matrix is None:
            return None
        matrix, shift = self._factored_matrix
        term = self._factored_term
        keys = [np.frombuffer(key, np.uint8) for key in term.keys]
        return {"indptr": matrix.indptr, "indices": matrix.indices, "data": matrix.data,
                "shape": np.array(matrix.shape), "shift": np.array(shift),
                "term_indptr": term.columns.indptr, "term_indices": term.columns.indices,
                "term_data": term.columns.data, "term_shape": np.array(term.columns.shape),
                "key_bytes": np.concatenate(keys) if keys else np.zeros(0, np.uint8),
                "key_ends": np.cumsum([len(key) for key in keys], dtype=np.int64)}

    def restore_factor(self, kept: dict) -> None:
        """Factorise again what `kept_factor` described (the same matrix, shift and term)."""
        matrix = sp.csc_matrix((kept["data"], kept["indices"], kept["indptr"]), shape=tuple(kept["shape"]))
        columns = sp.csc_matrix((kept["term_data"], kept["term_indices"], kept["term_indptr"]),
                                shape=tuple(kept["term_shape"]))
        key_bytes, ends = np.asarray(kept["key_bytes"], np.uint8), np.asarray(kept["key_ends"], np.int64)
        starts = np.concatenate([[0], ends[:-1]]) if len(ends) else ends
        keys = tuple(key_bytes[start:end].tobytes() for start, end in zip(starts, ends))
        self.factorise(matrix, LowRankTerm(columns, keys), shifts=(float(kept["shift"]),))

    def factor_copy(self):
        """A copy of the kept numeric factor (a cholesky.CholeskyFactor; ``solve``), for a caller that
        keeps solving with it while later solves refactorise the kept one in place: inverse
        physics linearises an equilibrium, then solves trial equilibria, then uses the
        linearisation again after a rejected trial."""
        if not self._has_numeric_factor:
            raise RuntimeError("no numeric factor: call factorise first")
        return self._factor.snapshot()


# How a Krylov solve ended (CholmodLinearSolver.krylov_solve).
SOLVED = "solved"
NEGATIVE_CURVATURE = "negative curvature"
TOO_MANY_ITERATIONS = "too many iterations"
NO_FACTOR = "no kept factor"


def preconditioned_conjugate_gradients(matrix, rhs, preconditioner, relative_tolerance, max_iterations):
    """(d, iterations) with ‖matrix d − rhs‖₂ ≤ relative_tolerance ‖rhs‖₂, or (None, iterations)
    when that takes more than max_iterations or the matrix shows negative curvature (then CG's
    iterate need not be a descent direction and the caller factorises instead)."""
    direction, iterations, _ = _conjugate_gradients_with_outcome(matrix, rhs, preconditioner,
                                                                 relative_tolerance, max_iterations)
    return direction, iterations


def _conjugate_gradients_with_outcome(matrix, rhs, preconditioner, relative_tolerance, max_iterations,
                                      shift: float = 0.0):
    """(d or None, iterations, outcome) of CG on matrix + shift I (see
    ``preconditioned_conjugate_gradients``; outcome SOLVED, NEGATIVE_CURVATURE or TOO_MANY_ITERATIONS)."""
    target = relative_tolerance * np.linalg.norm(rhs)
    solution = np.zeros_like(rhs)
    residual = rhs.copy()
    preconditioned = preconditioner(residual)
    search = preconditioned.copy()
    alignment = residual @ preconditioned
    for iteration in range(1, max_iterations + 1):
        image = matrix @ search
        if shift:
            image += shift * search
        curvature = search @ image
        if not curvature > 0.0:
            return None, iteration, NEGATIVE_CURVATURE
        step = alignment / curvature
        solution += step * search
        residual -= step * image
        if np.linalg.norm(residual) <= target:
            return solution, iteration, SOLVED
        preconditioned = preconditioner(residual)
        next_alignment = residual @ preconditioned
        search = preconditioned + (next_alignment / alignment) * search
        alignment = next_alignment
    return None, max_iterations, TOO_MANY_ITERATIONS


def shift_sequence(matrix, last_shift: float = 0.0, first_relative: float = FIRST_SHIFT_RELATIVE):
    """0, then diagonal shifts growing tenfold from `first_relative` × the mean |diagonal|;
    after a shifted factorisation (`last_shift` > 0) it starts at a tenth of that shift instead.

    Why: on a frame with strong muscle activation the unprojected Hessian stays indefinite for
    many iterations, and climbing from 0 each time cost ~8 failed factorisations per Newton
    iteration (320 factorisations in 41 iterations on an ICT lip frame). Starting just below
    the last shift that worked (as IPOPT's inertia correction does) finds it in one or two,
    and the start falls tenfold per iteration back to 0 once the Hessian is definite again."""
    diagonal_scale = float(np.abs(matrix.diagonal()).mean()) if matrix.shape[0] else 0.0
    # An all-zero diagonal has no scale of its own; start from 1 in the Hessian's units then.
    first = first_relative * (diagonal_scale if diagonal_scale > 0.0 else 1.0)
    largest = first * SHIFT_GROWTH ** (MAX_SHIFT_ATTEMPTS - 1)
    shift = min(last_shift / SHIFT_GROWTH, largest)
    if shift < first:
        yield 0.0
        shift = first
    while shift <= largest * (1.0 + 1e-12):
        yield shift
        shift *= SHIFT_GROWTH
