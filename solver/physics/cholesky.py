"""Sparse Cholesky factorisation behind one interface, on one of two back ends.

Both back ends are SuiteSparse's CHOLMOD; they differ in how it reaches Python:

* ``scikit-sparse`` (``sksparse.cholmod``): built against the system SuiteSparse, so Linux with
  its packages (``build.py setup``). The symbolic analysis (METIS ordering, supernodes) is done
  once per sparsity pattern and each factorisation only refills the numbers; a factor can be
  copied and modified by low-rank updates and downdates, which the Newton solver's contact
  preconditioner uses (linear_solver.py).
* ``cholespy``: CHOLMOD bundled in wheels for Windows, macOS and Linux, so the extension installs
  anywhere offline with no compiler (issue 39). It has no separate analysis — each factorisation
  orders and analyses again — and no modifications: a factor is what it was made from.

``SparseCholesky`` holds one pattern and its current numeric factor. ``factorise`` refills it
(raising ``NotPositiveDefinite`` when the matrix plus the shift is not positive definite, which
the Newton solver's shift search relies on), ``solve`` solves with it, ``snapshot`` returns an
independent ``CholeskyFactor`` that later factorisations do not touch. The back end is chosen
once per process: the environment variable FACE_PHYSICS_CHOLESKY (``scikit-sparse`` or
``cholespy``) when set, else scikit-sparse when it imports, else cholespy.
"""
from __future__ import annotations

import os
from contextlib import contextmanager
from functools import lru_cache
from typing import Optional

import numpy as np
import scipy.sparse as sp

SCIKIT_SPARSE, CHOLESPY = "scikit-sparse", "cholespy"
BACKENDS = (SCIKIT_SPARSE, CHOLESPY)
BACKEND_VARIABLE = "FACE_PHYSICS_CHOLESKY"


class NotPositiveDefinite(ValueError):
    """The matrix (plus the requested diagonal shift) is not positive definite."""


class CholeskyUnavailable(ImportError):
    """No sparse Cholesky back end can be imported; the message says how to get one."""


@lru_cache(maxsize=None)
def backend_name(requested: Optional[str] = None) -> str:
    """The back end to use: `requested`, else $FACE_PHYSICS_CHOLESKY, else the first of
    scikit-sparse and cholespy that imports."""
    wanted = requested or os.environ.get(BACKEND_VARIABLE) or None
    if wanted is not None and wanted not in BACKENDS:
        raise CholeskyUnavailable(f"{BACKEND_VARIABLE}={wanted!r}: choose one of {', '.join(BACKENDS)}")
    for name in ([wanted] if wanted else BACKENDS):
        try:
            _module(name)
        except ImportError:
            continue
        return name
    raise CholeskyUnavailable(
        (f"the sparse Cholesky back end {wanted} does not import" if wanted else
         "no sparse Cholesky back end imports (scikit-sparse or cholespy)")
        + ": install the extension's bundled wheels, or `pip install cholespy`, or on Linux run "
          "`python3 build.py setup` for scikit-sparse")


def _module(name: str):
    if name == SCIKIT_SPARSE:
        from sksparse import cholmod
        return cholmod
    import cholespy
    return cholespy


def backend_version(name: Optional[str] = None) -> str:
    """The installed version of a back end's package (for the add-on's Check solver)."""
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version(name or backend_name())
    except PackageNotFoundError:
        return "unknown"


class CholeskyFactor:
    """A numeric factor that stays as it was made: `solve`, and on scikit-sparse `modify`."""

    def __init__(self, backend: str, factor):
        self.backend = backend
        self._factor = factor

    @property
    def can_modify(self) -> bool:
        return self.backend == SCIKIT_SPARSE

    def solve(self, rhs: np.ndarray) -> np.ndarray:
        """x with A x = rhs ((n,) or (n, k))."""
        if self.backend == SCIKIT_SPARSE:
            with _one_blas_thread():
                return self._factor.solve_A(rhs)
        rhs = np.ascontiguousarray(rhs, dtype=np.float64)
        solution = np.zeros_like(rhs)
        self._factor.solve(rhs, solution)
        return solution

    __call__ = solve

    def modify(self, columns: sp.csc_matrix, subtract: bool = False) -> None:
        """A ± C Cᵀ, in place (scikit-sparse only; the factor becomes simplicial)."""
        if not self.can_modify:
            raise NotImplementedError(f"the {self.backend} back end cannot update or downdate a factor")
        self._factor.update_inplace(columns, subtract=subtract)

    def copy(self) -> "CholeskyFactor":
        """An independent copy (the cholespy factor is immutable, so it is shared)."""
        return CholeskyFactor(self.backend, self._factor.copy() if self.backend == SCIKIT_SPARSE else self._factor)


class SparseCholesky:
    """One symmetric sparsity pattern (analysed once where the back end can) and its current
    numeric factor (module docstring)."""

    def __init__(self, pattern: sp.spmatrix, backend: Optional[str] = None):
        self.backend = backend_name(backend)
        pattern = sp.csc_matrix(pattern)
        self.size = pattern.shape[0]
        self._current: Optional[CholeskyFactor] = None
        if self.backend == SCIKIT_SPARSE:
            # METIS nested dissection: ~20 % less fill than CHOLMOD's default AMD on face tet
            # meshes (4.1 M against 5.1 M factor entries at 35k tets), 15 % faster factorisations.
            self._analysis = _module(SCIKIT_SPARSE).analyze(pattern, mode="supernodal", ordering_method="metis")

    @property
    def can_modify(self) -> bool:
        return self.backend == SCIKIT_SPARSE

    @property
    def has_factor(self) -> bool:
        return self._current is not None

    def factorise(self, matrix: sp.spmatrix, shift: float = 0.0) -> None:
        """Factorise matrix + shift·I (same pattern as analysed) as the current factor; on
        NotPositiveDefinite there is no current factor."""
        self._current = None
        if self.backend == SCIKIT_SPARSE:
            cholmod = _module(SCIKIT_SPARSE)
            try:
                self._analysis.cholesky_inplace(matrix, beta=shift)
            except cholmod.CholmodNotPositiveDefiniteError as error:
                raise NotPositiveDefinite(str(error)) from None
            self._current = CholeskyFactor(self.backend, self._analysis)
            return
        lower = sp.tril(matrix + shift * sp.identity(self.size, format="csc") if shift else matrix, format="csc")
        lower.sort_indices()
        try:
            with _quiet_stderr():       # CHOLMOD prints a warning for each failed attempt of a shift search
                factor = _module(CHOLESPY).CholeskySolverD(
                    self.size, lower.indptr.astype(np.int32), lower.indices.astype(np.int32),
                    np.ascontiguousarray(lower.data, dtype=np.float64), _module(CHOLESPY).MatrixType.CSC)
        except ValueError as error:
            raise NotPositiveDefinite(str(error)) from None
        self._current = CholeskyFactor(self.backend, factor)

    def solve(self, rhs: np.ndarray) -> np.ndarray:
        return self.current.solve(rhs)

    @property
    def current(self) -> CholeskyFactor:
        """The current factor itself: on scikit-sparse the next factorisation refills it."""
        if self._current is None:
            raise RuntimeError("no numeric factor: call factorise first")
        return self._current

    def snapshot(self) -> CholeskyFactor:
        """An independent copy of the current factor, untouched by later factorisations."""
        return self.current.copy()


@lru_cache(maxsize=None)
def _system_openblas():
    """The system OpenBLAS that scikit-sparse's CHOLMOD calls (Linux packages), or None."""
    if backend_name() != SCIKIT_SPARSE:
        return None
    import ctypes
    try:
        library = ctypes.CDLL("libopenblas.so.0")
        library.openblas_get_num_threads()
    except (OSError, AttributeError):
        return None
    return library


@contextmanager
def _one_blas_thread():
    """BLAS on one thread for the duration: CHOLMOD's triangular solves are a chain of small
    matrix-vector products per supernode, too small to share, and a second BLAS thread only
    waits. ICT's factor (35,617 tets), 30 solves each way in turn: 17 ms (min) / 28 ms (median)
    a solve on one thread against 23 / 39 ms on two, on the 2-core machine at load 10
    (bench/newton_solve.py measures it idle). The factorisation keeps its threads."""
    library = _system_openblas()
    if library is None:
        yield
        return
    threads = library.openblas_get_num_threads()
    if threads <= 1:
        yield
        return
    library.openblas_set_num_threads(1)
    try:
        yield
    finally:
        library.openblas_set_num_threads(threads)


@contextmanager
def _quiet_stderr():
    """File descriptor 2 sent to the null device for the duration (C libraries write there)."""
    try:
        saved = os.dup(2)
    except OSError:             # no stderr at all (a windowed process): nothing to quiet
        yield
        return
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
