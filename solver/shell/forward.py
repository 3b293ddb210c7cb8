"""The interactive shell's forward simulation: paper 001 Algorithm 1 with Table 4's numbers.

Each frame the coarse rig gives the frame's target x^f = X + Σ_b w_b u_b (face units). The
frame is cut into sub-steps of Δt^s (settings.substep_s); in sub-step k the target is
interpolated between the last frame's target and this one's, each component's pull is capped
at ε_r (Eq. 6), the spring and bending directions are lagged at the blend
x̂ = x^n + α_e Δt^s v^n of the current and explicitly integrated positions (Eq. 12), and one
solve of the constant system (Eq. 11) gives the new positions. The positional constraints
(colliders, the maximum depth along the negative target normal, prescribed eyelids, grabbed
vertices) then correct them, and the velocities come from the corrected positions.

The potentials (Eq. 3, 5, 7–10), with h = Δt^s, m_i = ρ A_i and k_i = p_max A_i / ε_r:
  inertia   Σ m_i/(2h²) |x_i − x̃_i|²,   x̃ = x^n + h v^n
  damping   Σ ν m_i/(2h) |x_i − x^n_i|²
  actuation Σ k_i/2 |x̄^t_i − x_i|²
  strain    Σ_e l_e κ_e/2 |x_a − x_b − d_e|²,             d_e = l_e (x̂_a − x̂_b)/|x̂_a − x̂_b|
  bending   Σ_d c_d κ_d/2 |Σ_k w_dk x_k − d_d|²,          d_d = |q_d⁰| q̂_d/|q̂_d|, q̂_d = Σ_k w_dk x̂_k
with κ_e, κ_d the mean of the element's per-vertex stiffness and c_d = ‖e⁰‖/h̄. All are
quadratic in x with a constant Hessian K ⊗ I₃, so the minimiser of one sub-step is x = K⁻¹ b
with b = K x^n − ∇Ψ(x^n), assembled directly by one compiled pass over the elements
(`substep_rhs`) and solved with the factor made once (linear.py).

Sub-steps. The Hessian holds 1/h², so h never changes: a frame of dt seconds runs as many
whole sub-steps as fit in the time owed, the remainder carried to the next frame (at 30 fps
frames alternate between 16 and 17 sub-steps of 2 ms). Algorithm 1 blends the targets with
β = k/n_sub; here β = (k+1)/n_sub so a frame's last sub-step aims at the frame's own target
rather than one sub-step behind it (a held pose converges to it within the frame).

Face units throughout (ShellModel converts metres once): colliders and grabs are given in
metres and scaled by 1/face_height here; the contact force is reported at unit face height.
`coarse_positions` and `velocities` are updated in place (copy them to keep a frame).

Speed. Without mesh colliders a frame's sub-steps run in one compiled call
(`simulate_substeps`); each sub-step is one right-hand side pass and one substitution, the two
costs that matter (bench/shell.py; at 4k ICT triangles on the shared 2-core machine of
2026-11-28 about 110 µs and 210 µs at best). Numba caches each function on its own: after
editing linear.py's `substitute`, delete solver/shell/__pycache__/*.nb[ic] so that the cached
`simulate_substeps`, which compiled it in, is rebuilt.
"""
from __future__ import annotations

import time
from typing import Sequence

import numpy as np
import scipy.sparse as sp
from numba import njit

from .colliders import Grab, MeshCollider, Placement, press_out_fine, project_analytic
from .energies import bending_springs, strain_springs
from .linear import ConstantFactor, substitute
from .topology import ShellTopology

# energies.py's shortest spring vector with a direction.
SHORTEST = 1e-14


class ShellSimulator:
    """One shell in motion (module docstring). `model` is a ShellModel (shell_file.py)."""

    def __init__(self, model, settings=None):
        self.model = model
        self.settings = settings if settings is not None else model.settings
        s = self.settings
        self.face_height_m = float(model.face_height_m)
        self.rest = np.ascontiguousarray(model.coarse_rest, dtype=np.float64)
        self.topology = ShellTopology.from_triangles(self.rest, model.coarse_triangles)
        topology = self.topology
        n = topology.vertex_count
        self.vertex_count = n
        self.deltas = np.ascontiguousarray(np.asarray(model.coarse_deltas, dtype=np.float64).reshape(
            len(model.coarse_deltas), 3 * n))
        self.shape_count = len(self.deltas)
        h = float(s.substep_s)
        self.substep_s = h
        area = topology.vertex_area
        self.mass = s.density * area
        self.inertia = self.mass / h ** 2
        self.damping = s.damping * self.mass / h
        self.actuation = s.max_pressure * area / s.reproducibility
        strain, bending = (np.asarray(model.strain_stiffness, dtype=np.float64),
                           np.asarray(model.bending_stiffness, dtype=np.float64))
        self.strain_springs, self.bending_springs = strain_springs(topology), bending_springs(topology)
        self.edge_weight = self.strain_springs.coefficients(strain)          # l_e κ̄_e
        self.bend_weight = self.bending_springs.coefficients(bending)        # (‖e⁰‖/h̄) κ̄_d
        # The constant Hessian from energies.py (K ⊗ I₃): inertia, damping and actuation on the
        # diagonal, the lagged springs' K.
        self.matrix = sp.csc_matrix(self.strain_springs.scalar_hessian(strain)
                                    + self.bending_springs.scalar_hessian(bending)
                                    + sp.diags(self.inertia + self.damping + self.actuation))
        self.factor = ConstantFactor(self.matrix)
        self.factorisations = 1
        self.max_depth = np.ascontiguousarray(model.max_depth, dtype=np.float64)
        self.prescribed = np.flatnonzero(np.asarray(model.prescribed, dtype=bool)).astype(np.int64)
        self.fine_from_coarse = sp.csr_matrix(model.fine_from_coarse)
        self.fine_rest_m = np.ascontiguousarray(model.fine_rest_m, dtype=np.float64)
        self.detail = sp.csr_matrix(model.detail)                  # (K, 3V) metres
        self.detail.sort_indices()
        # Unsigned copies of the element and map indices: compiled loops then skip numba's
        # negative-index wraparound test on every access (the same 1.5× as in linear.py).
        index = np.uint16 if n < 2 ** 16 else np.uint32
        self._edges = np.ascontiguousarray(topology.edges, dtype=index)
        self._dihedrals = np.ascontiguousarray(topology.dihedrals, dtype=index)
        self._warp = (np.ascontiguousarray(self.fine_from_coarse.indptr, dtype=np.int64),
                      np.ascontiguousarray(self.fine_from_coarse.indices, dtype=index),
                      np.ascontiguousarray(self.fine_from_coarse.data, dtype=np.float64))
        self._detail = (np.ascontiguousarray(self.detail.indptr, dtype=np.int64),
                        np.ascontiguousarray(self.detail.indices, dtype=np.uint32),
                        np.ascontiguousarray(self.detail.data, dtype=np.float64))
        self._rhs = np.zeros((n, 3))
        self._lagged = np.zeros((n, 3))
        self._sub_target = np.zeros((n, 3))
        self._solved = np.zeros((n, 3))
        self._normals = np.zeros((n, 3))
        self.timings = {"coarse_rig": 0.0, "simulate": 0.0, "warp_detail": 0.0}
        self.contact_force_n = 0.0
        self.contacts = 0
        self._grab: Grab | None = None
        self._previous_colliders: dict = {}
        self.reset()

    # ------------------------------------------------------------------ state
    def reset(self, weights=None) -> None:
        """Rest (or the rig pose of `weights`) with zero velocity."""
        self.weights = self._weights(weights)
        target = self.coarse_rig(self.weights)
        self.coarse_positions = target.copy()
        self.velocities = np.zeros_like(target)
        self.target = target
        self.time_owed_s = 0.0
        self.substeps_taken = 0
        self._fine_cache = None
        self._previous_colliders = {}
        self._placement = Placement.of(())

    def _weights(self, weights) -> np.ndarray:
        if weights is None:
            return np.zeros(self.shape_count)
        weights = np.asarray(weights, dtype=np.float64).reshape(-1)
        if weights.shape != (self.shape_count,) or not np.all(np.isfinite(weights)):
            raise ValueError(f"weights: expected {self.shape_count} finite numbers (one per shape key), "
                             f"found shape {weights.shape}")
        return weights

    def coarse_rig(self, weights: np.ndarray) -> np.ndarray:
        """X + Σ_b w_b u_b (n, 3) face units; only the shapes with a non-zero weight are read."""
        out = np.empty(3 * self.vertex_count)
        blend_shapes(self.rest.reshape(-1), self.deltas, weights, out)
        return out.reshape(-1, 3)

    # ------------------------------------------------------------------ grab (the Poke tool's pull)
    def grab(self, centre_m, radius_m) -> int:
        """Pin the coarse vertices within `radius_m` of `centre_m` (metres) to follow the centre;
        the nearest vertex when none is that close. Returns how many are pinned."""
        centre = np.asarray(centre_m, dtype=np.float64).reshape(3) / self.face_height_m
        radius = float(radius_m) / self.face_height_m
        distance = np.linalg.norm(self.coarse_positions - centre, axis=1)
        vertices = np.flatnonzero(distance <= radius)
        if len(vertices) == 0:
            vertices = np.array([int(np.argmin(distance))])
        self._grab = Grab(vertices=vertices, offsets=self.coarse_positions[vertices] - centre, centre=centre)
        return len(vertices)

    def move_grab(self, centre_m) -> None:
        if self._grab is not None:
            self._grab.centre = np.asarray(centre_m, dtype=np.float64).reshape(3) / self.face_height_m

    def release(self) -> None:
        self._grab = None

    @property
    def grabbed_vertices(self) -> np.ndarray:
        return np.zeros(0, np.int64) if self._grab is None else self._grab.vertices

    # ------------------------------------------------------------------ one frame
    def step(self, weights, colliders: Sequence = (), dt: float = 1.0 / 30.0) -> int:
        """Advance one frame of `dt` seconds towards the rig pose of `weights`, with `colliders`
        (shell colliders, metres) placed as they are now. Returns the sub-steps taken."""
        started = time.perf_counter()
        weights = self._weights(weights)
        previous_target = self.target
        target = self.coarse_rig(weights)
        rigged = time.perf_counter()
        self.time_owed_s += float(dt)
        substeps = int(np.floor(self.time_owed_s / self.substep_s + 1e-9))
        self.time_owed_s = max(self.time_owed_s - substeps * self.substep_s, 0.0)
        kinds, packed_end, packed_start, meshes = self._collider_frame(colliders)
        if substeps > 0:
            vertex_normals(target, self.topology.triangles, self._normals)
        force = np.zeros(3)
        grab = self._grab
        if meshes:
            contacts = self._substeps_in_python(substeps, previous_target, target, kinds, packed_start, packed_end,
                                                meshes, force)
        else:
            contacts = self._substeps_compiled(substeps, previous_target, target, kinds, packed_start, packed_end,
                                               force)
        if grab is not None:
            grab.previous_centre = grab.centre.copy()
        self.target = target
        self.weights = weights
        self.substeps_taken = substeps
        self.contacts = contacts            # collider corrections in the frame's last sub-step
        # The collider's push on the shell, m Δx / h² per sub-step, averaged over the frame and
        # turned around: the force on the collider (N at unit face height).
        self.contact_force_n = float(np.linalg.norm(force)) / (self.substep_s ** 2 * max(substeps, 1))
        self._placement = Placement.of(colliders)
        self._fine_cache = None
        finished = time.perf_counter()
        self.timings = {"coarse_rig": rigged - started, "simulate": finished - rigged, "warp_detail": 0.0}
        return substeps

    def _grab_arrays(self):
        grab = self._grab
        if grab is None:
            return np.zeros(0, np.int64), np.zeros((0, 3)), np.zeros(3), np.zeros(3)
        return grab.vertices.astype(np.int64), grab.offsets, grab.previous_centre, grab.centre

    def _substeps_compiled(self, substeps, previous_target, target, kinds, packed_start, packed_end, force) -> int:
        """All sub-steps of a frame in one compiled call (no mesh colliders)."""
        s, top, factor = self.settings, self.topology, self.factor
        grab_vertices, grab_offsets, grab_start, grab_end = self._grab_arrays()
        return simulate_substeps(
            self.coarse_positions, self.velocities, previous_target, target, substeps, self.substep_s, s.lag_blend,
            s.reproducibility, self.inertia, self.damping, self.actuation, self.mass, self._edges, self.edge_weight,
            top.edge_rest_length, self._dihedrals, top.bend_weights, self.bend_weight, top.bend_rest_length,
            *factor.arrays(), kinds, packed_start,
            packed_end, self._normals, self.max_depth, self.prescribed, grab_vertices, grab_offsets, grab_start,
            grab_end, self._sub_target, self._rhs, self._lagged, factor.work, self._solved, force)

    def _substeps_in_python(self, substeps, previous_target, target, kinds, packed_start, packed_end, meshes,
                            force) -> int:
        """The same sub-steps as `simulate_substeps`, with the mesh colliders' projection (which
        queries the collisions package's hierarchy) between the compiled parts."""
        s, top = self.settings, self.topology
        grab_vertices, grab_offsets, grab_start, grab_end = self._grab_arrays()
        x, v = self.coarse_positions, self.velocities
        contacts = 0
        for k in range(substeps):
            beta = (k + 1) / substeps
            sub_target = previous_target + beta * (target - previous_target)
            substep_rhs(x, v, sub_target, self.substep_s, s.lag_blend, s.reproducibility, self.inertia,
                        self.damping, self.actuation, self._edges, self.edge_weight, top.edge_rest_length,
                        self._dihedrals, top.bend_weights, self.bend_weight, top.bend_rest_length, self._rhs,
                        self._lagged)
            solved = self.factor.solve(self._rhs)
            contacts = 0
            if len(kinds):
                packed = packed_start + beta * (packed_end - packed_start)
                contacts += project_analytic(solved, kinds, packed, self.mass, force)
            for collider, start, end in meshes:
                transform = end.copy()
                transform[:3, 3] = start[:3, 3] + beta * (end[:3, 3] - start[:3, 3])
                moved, correction = collider.project(solved, 1.0 / self.face_height_m, transform)
                force += self.mass[moved] @ correction
                contacts += len(moved)
            limit_depth(solved, sub_target, self._normals, self.max_depth)
            solved[self.prescribed] = sub_target[self.prescribed]
            solved[grab_vertices] = grab_start + beta * (grab_end - grab_start) + grab_offsets
            v[:] = (solved - x) / self.substep_s
            x[:] = solved
        return contacts

    def _collider_frame(self, colliders):
        """Packed analytic colliders at the frame's end and start (the previous frame's
        placement, or the end for a new one), and the mesh colliders with their two transforms.
        A collider is the same as last frame's when it has the same place in the list and the
        same type, so a caller may build new collider objects every frame (the live session)."""
        scale = 1.0 / self.face_height_m
        kinds, end, start, meshes, seen = [], [], [], [], {}
        for index, collider in enumerate(colliders):
            key = (index, type(collider))
            previous = self._previous_colliders.get(key)
            if isinstance(collider, MeshCollider):
                current = collider.transform.copy()
                meshes.append((collider, current if previous is None else previous, current))
                seen[key] = current
                continue
            kind, values = collider.packed(scale)
            kinds.append(kind)
            end.append(values)
            before = values.copy() if previous is None else previous.copy()
            if kind == 2:       # a box's axes are not interpolated, only its centre
                before[3:] = values[3:]
            start.append(before)
            seen[key] = values
        self._previous_colliders = seen
        kinds = np.array(kinds, dtype=np.int64)
        end = np.array(end, dtype=np.float64).reshape(-1, 16)
        start = np.array(start, dtype=np.float64).reshape(-1, 16)
        return kinds, end, start, meshes

    # ------------------------------------------------------------------ output
    def fine_positions_m(self) -> np.ndarray:
        """(V, 3) metres: the rig's vertices warped by the coarse displacement plus the
        weighted per-shape detail (Eq. 14), pushed out of the last frame's colliders as far as
        the coarse shell is (colliders.press_out_fine)."""
        if self._fine_cache is None:
            started = time.perf_counter()
            displacement = (self.coarse_positions - self.rest) * self.face_height_m
            fine = np.empty_like(self.fine_rest_m)
            warp_and_detail(self.fine_rest_m, *self._warp, displacement, *self._detail, self.weights, fine.reshape(-1))
            if self._placement:
                press_out_fine(fine, self.coarse_positions * self.face_height_m, self.fine_from_coarse,
                               self._placement)
            self._fine_cache = fine
            self.timings["warp_detail"] = time.perf_counter() - started
        return self._fine_cache


# --------------------------------------------------------------------------- assembly

@njit(cache=True)
def simulate_substeps(x, v, previous_target, target, substeps, h, alpha, cap, inertia, damping, actuation, mass,
                      edges, edge_weight, edge_length, dihedrals, bend_weights, bend_weight, bend_length,
                      perm, row_start, row_columns, row_values, column_start, column_rows, column_values,
                      inverse_diagonal, kinds, packed_start, packed_end, normals,
                      max_depth, prescribed, grab_vertices, grab_offsets, grab_start, grab_end,
                      sub_target, rhs, lagged, work, solved, force):
    """A frame's sub-steps (module docstring) on x, v in place; returns the collider corrections
    of the last sub-step and adds Σ m Δx of all into `force`."""
    n = x.shape[0]
    contacts = 0
    packed = packed_start.copy()
    for k in range(substeps):
        beta = (k + 1) / substeps
        for i in range(n):
            for c in range(3):
                sub_target[i, c] = previous_target[i, c] + beta * (target[i, c] - previous_target[i, c])
        substep_rhs(x, v, sub_target, h, alpha, cap, inertia, damping, actuation, edges, edge_weight, edge_length,
                    dihedrals, bend_weights, bend_weight, bend_length, rhs, lagged)
        substitute(perm, row_start, row_columns, row_values, column_start, column_rows, column_values,
                   inverse_diagonal, rhs, work, solved)
        contacts = 0
        if kinds.shape[0] > 0:
            for a in range(packed.shape[0]):
                for b in range(packed.shape[1]):
                    packed[a, b] = packed_start[a, b] + beta * (packed_end[a, b] - packed_start[a, b])
            contacts = project_analytic(solved, kinds, packed, mass, force)
        limit_depth(solved, sub_target, normals, max_depth)
        for p in prescribed:
            for c in range(3):
                solved[p, c] = sub_target[p, c]
        for g in range(grab_vertices.shape[0]):
            for c in range(3):
                solved[grab_vertices[g], c] = grab_start[c] + beta * (grab_end[c] - grab_start[c]) + grab_offsets[g, c]
        for i in range(n):
            for c in range(3):
                v[i, c] = (solved[i, c] - x[i, c]) / h
                x[i, c] = solved[i, c]
    return contacts


@njit(cache=True, fastmath=True)
def substep_rhs(x, v, target, h, alpha, cap, inertia, damping, actuation, edges, edge_weight, edge_length,
                dihedrals, bend_weights, bend_weight, bend_length, out, lagged):
    """b = K x^n − ∇Ψ(x^n) of one sub-step (module docstring), written into `out` (n, 3): the
    gradients of energies.py fused into one pass (tests/test_shell_forward.py checks they
    agree). A lagged direction whose vector has vanished is zero, as there. `lagged` (n, 3) is
    scratch for x̂, computed once per vertex rather than once per element."""
    n = x.shape[0]
    blend = alpha * h
    for i in range(n):
        for c in range(3):
            pull = target[i, c] - x[i, c]
            pull = min(max(pull, -cap), cap)
            out[i, c] = (inertia[i] * (x[i, c] + h * v[i, c]) + damping[i] * x[i, c]
                         + actuation[i] * (x[i, c] + pull))
            lagged[i, c] = x[i, c] + blend * v[i, c]
    for e in range(edges.shape[0]):
        a, b = edges[e, 0], edges[e, 1]
        d0 = lagged[a, 0] - lagged[b, 0]
        d1 = lagged[a, 1] - lagged[b, 1]
        d2 = lagged[a, 2] - lagged[b, 2]
        length = np.sqrt(d0 * d0 + d1 * d1 + d2 * d2)
        if not length > SHORTEST:
            continue
        scale = edge_weight[e] * edge_length[e] / length
        out[a, 0] += scale * d0
        out[a, 1] += scale * d1
        out[a, 2] += scale * d2
        out[b, 0] -= scale * d0
        out[b, 1] -= scale * d1
        out[b, 2] -= scale * d2
    for d in range(dihedrals.shape[0]):
        if bend_length[d] == 0.0:
            continue            # a flat rest dihedral: its target vector is zero
        q0 = 0.0
        q1 = 0.0
        q2 = 0.0
        for k in range(4):
            j = dihedrals[d, k]
            w = bend_weights[d, k]
            q0 += w * lagged[j, 0]
            q1 += w * lagged[j, 1]
            q2 += w * lagged[j, 2]
        length = np.sqrt(q0 * q0 + q1 * q1 + q2 * q2)
        if not length > SHORTEST:
            continue
        scale = bend_weight[d] * bend_length[d] / length
        for k in range(4):
            j = dihedrals[d, k]
            w = scale * bend_weights[d, k]
            out[j, 0] += w * q0
            out[j, 1] += w * q1
            out[j, 2] += w * q2


@njit(cache=True, fastmath=True)
def blend_shapes(rest, deltas, weights, out):
    """out = rest + Σ_b w_b deltas_b over the keys with a non-zero weight (flat arrays)."""
    out[:] = rest
    for b in range(weights.shape[0]):
        w = weights[b]
        if w != 0.0:
            for j in range(out.shape[0]):
                out[j] += w * deltas[b, j]


@njit(cache=True)
def warp_and_detail(fine_rest, warp_indptr, warp_indices, warp_data, displacement, detail_indptr, detail_indices,
                    detail_data, weights, out):
    """Eq. 14 into `out` (3V,): the rig's rest vertices plus the coarse displacement carried by
    the warp's CSR rows, plus each active key's sparse detail (CSR rows of 3V) times its weight."""
    for j in range(fine_rest.shape[0]):
        s0, s1, s2 = fine_rest[j, 0], fine_rest[j, 1], fine_rest[j, 2]
        for p in range(warp_indptr[j], warp_indptr[j + 1]):
            i = warp_indices[p]
            w = warp_data[p]
            s0 += w * displacement[i, 0]
            s1 += w * displacement[i, 1]
            s2 += w * displacement[i, 2]
        out[3 * j] = s0
        out[3 * j + 1] = s1
        out[3 * j + 2] = s2
    for k in range(weights.shape[0]):
        w = weights[k]
        if w == 0.0:
            continue
        for p in range(detail_indptr[k], detail_indptr[k + 1]):
            out[detail_indices[p]] += w * detail_data[p]


@njit(cache=True)
def vertex_normals(positions, triangles, out):
    """Area-weighted unit vertex normals (n, 3) into `out`."""
    out[:] = 0.0
    for t in range(triangles.shape[0]):
        a, b, c = triangles[t, 0], triangles[t, 1], triangles[t, 2]
        u0, u1, u2 = positions[b, 0] - positions[a, 0], positions[b, 1] - positions[a, 1], positions[b, 2] - positions[a, 2]
        w0, w1, w2 = positions[c, 0] - positions[a, 0], positions[c, 1] - positions[a, 1], positions[c, 2] - positions[a, 2]
        n0, n1, n2 = u1 * w2 - u2 * w1, u2 * w0 - u0 * w2, u0 * w1 - u1 * w0
        for j in (a, b, c):
            out[j, 0] += n0
            out[j, 1] += n1
            out[j, 2] += n2
    for i in range(out.shape[0]):
        length = np.sqrt(out[i, 0] ** 2 + out[i, 1] ** 2 + out[i, 2] ** 2)
        if length > 0.0:
            out[i, 0] /= length
            out[i, 1] /= length
            out[i, 2] /= length


@njit(cache=True)
def limit_depth(positions, target, normals, max_depth):
    """Paper 001 §3.1 / §4.4: a vertex may sink at most max_depth along the negative normal
    of the target; deeper ones are moved back out along it. Returns the number moved."""
    moved = 0
    for i in range(positions.shape[0]):
        depth = -((positions[i, 0] - target[i, 0]) * normals[i, 0] + (positions[i, 1] - target[i, 1]) * normals[i, 1]
                  + (positions[i, 2] - target[i, 2]) * normals[i, 2])
        excess = depth - max_depth[i]
        if excess > 0.0:
            positions[i, 0] += excess * normals[i, 0]
            positions[i, 1] += excess * normals[i, 1]
            positions[i, 2] += excess * normals[i, 2]
            moved += 1
    return moved
