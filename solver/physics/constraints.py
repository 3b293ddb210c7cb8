"""Pin and sliding bone constraints as a linear reduction of the unknowns, x = P q + c.

Every node gets its own block of P (docs/physics.md, "Constraints"):

* a **pinned** node has no unknowns: its position is its bone's rigid transform applied to
  its rest position, held in c;
* a **sliding** node has two: its offset in the bone's tangent plane at its anchor. The plane
  goes through the transformed rest position with the rotated rest normal, and its orthonormal
  basis (3×2) turns with the bone, so x = anchor + B q_s. This is paper 000 §4's point-on-plane
  approximation of sliding on the curved bone, fine for the small sliding distances of a face;
* a **free** node has three: its position itself (c = 0, identity block).

The reduced coordinates are ordered node by node (node-major, skipping pinned nodes), x is
the node-major 3N vector of docs/physics.md. Because P is block diagonal with orthonormal
columns per node, q_from_x(x) = Pᵀ (x − c) is the orthogonal projection onto the constraints.

The sparsity patterns never depend on the bone transforms: P keeps an entry for every
basis component of a sliding node even when a rotation makes it exactly zero, and Pᵀ H P is
assembled block by block on a pattern computed once from H's pattern, so CHOLMOD's symbolic
analysis of the reduced Hessian stays valid across Newton iterations and frames.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from numba import njit

PINNED_DOFS, SLIDING_DOFS, FREE_DOFS = 0, 2, 3
BONE_COUNT = 2          # bone labels: 0 skull, 1 jaw (docs/model-format.md)


def tangent_bases(normals: np.ndarray) -> np.ndarray:
    """Orthonormal bases (K, 3, 2) of the planes perpendicular to unit normals (K, 3).

    The first basis vector is the normal crossed with the coordinate axis it is least aligned
    with, which keeps the cross product well away from zero."""
    least_aligned_axis = np.eye(3)[np.argmin(np.abs(normals), axis=1)]
    first = np.cross(normals, least_aligned_axis)
    first /= np.linalg.norm(first, axis=1, keepdims=True)
    second = np.cross(normals, first)
    return np.stack([first, second], axis=2)


def _index_dtype(largest: int):
    return np.int32 if largest < np.iinfo(np.int32).max else np.int64


class BoneConstraints:
    """The reduction x = P q + c of a model's pins and sliding nodes, frame by frame.

    Built once per model; ``reduction(skull_T, jaw_T)`` moves it to a frame (4×4 world
    transforms of the two bones) and returns that frame's P and c. ``q_from_x``, ``x_from_q``,
    ``reduce_gradient`` and ``reduce_hessian`` act on the current frame, which starts at rest
    (identity transforms).

    Per model: ``node_count``, ``reduced_size`` (n), ``dofs_per_node`` (0 pinned, 2 sliding,
    3 free), ``dof_offset`` (first reduced coordinate of each node). Per frame: ``P``, ``c``,
    ``slide_basis`` (S, 3, 2), ``skull_transform``, ``jaw_transform``.
    """

    def __init__(self, model: dict):
        rest = np.array(model["rest_positions"], dtype=float)      # its own: `repin` writes into it
        node_count = len(rest)
        pin_nodes = np.asarray(model["pin_nodes"], dtype=np.int64)
        pin_bone = np.asarray(model["pin_bone"], dtype=np.int64)
        slide_nodes = np.asarray(model["slide_nodes"], dtype=np.int64)
        slide_bone = np.asarray(model["slide_bone"], dtype=np.int64)
        slide_normals = np.asarray(model["slide_normals"], dtype=float).reshape(-1, 3)
        self._check(node_count, pin_nodes, pin_bone, slide_nodes, slide_bone, slide_normals)

        self.node_count = node_count
        self.pin_nodes, self.pin_bone = pin_nodes, pin_bone
        self.slide_nodes, self.slide_bone = slide_nodes, slide_bone
        self.rest_positions = rest
        self.slide_rest_normals = slide_normals / np.linalg.norm(slide_normals, axis=1, keepdims=True)
        self.slide_rest_basis = tangent_bases(self.slide_rest_normals)

        self.dofs_per_node = np.full(node_count, FREE_DOFS, dtype=np.int64)
        self.dofs_per_node[pin_nodes] = PINNED_DOFS
        self.dofs_per_node[slide_nodes] = SLIDING_DOFS
        self.dof_offset = np.concatenate([[0], np.cumsum(self.dofs_per_node)[:-1]])
        self.reduced_size = int(self.dofs_per_node.sum())
        self.slide_index_of_node = np.full(node_count, -1, dtype=np.int64)
        self.slide_index_of_node[slide_nodes] = np.arange(len(slide_nodes))

        self._build_projection_pattern()
        self._hessian_reduction = None
        self.reduction(np.eye(4), np.eye(4))

    @staticmethod
    def _check(node_count, pin_nodes, pin_bone, slide_nodes, slide_bone, slide_normals):
        if pin_nodes.shape != pin_bone.shape:
            raise ValueError("pin_nodes and pin_bone differ in length")
        if not (len(slide_nodes) == len(slide_bone) == len(slide_normals)):
            raise ValueError("slide_nodes, slide_bone and slide_normals differ in length")
        attached = np.concatenate([pin_nodes, slide_nodes])
        if attached.size and (attached.min() < 0 or attached.max() >= node_count):
            raise ValueError("pin_nodes / slide_nodes hold node indices out of range")
        if len(np.unique(attached)) != len(attached):
            raise ValueError("a node is pinned or sliding more than once (pin_nodes and slide_nodes must be disjoint)")
        labels = np.concatenate([pin_bone, slide_bone])
        if labels.size and (labels.min() < 0 or labels.max() >= BONE_COUNT):
            raise ValueError("pin_bone / slide_bone must be bone labels 0 (skull) or 1 (jaw)")
        if len(slide_normals) and np.linalg.norm(slide_normals, axis=1).min() < 1e-12:
            raise ValueError("slide_normals contains a zero vector")

    def _build_projection_pattern(self):
        """CSR pattern of P (3N × n), fixed for the model; only sliding entries change values."""
        dofs = self.dofs_per_node
        # A free node's row a holds one entry (column offset + a); each row of a sliding node
        # holds both basis coefficients; a pinned node's rows are empty.
        entries_per_row = np.repeat(np.where(dofs == FREE_DOFS, 1, dofs), 3)
        indptr = np.concatenate([[0], np.cumsum(entries_per_row)])
        index_dtype = _index_dtype(max(int(indptr[-1]), self.reduced_size))
        indices = np.empty(indptr[-1], dtype=index_dtype)
        data = np.zeros(indptr[-1])

        free_nodes = np.flatnonzero(dofs == FREE_DOFS)
        free_rows = (3 * free_nodes[:, None] + np.arange(3)).ravel()
        indices[indptr[free_rows]] = (self.dof_offset[free_nodes, None] + np.arange(3)).ravel()
        data[indptr[free_rows]] = 1.0

        # Entry positions of sliding node s, component a (row), basis vector k (column): (S, 3, 2).
        slide_rows = 3 * self.slide_nodes[:, None] + np.arange(3)
        self._slide_entry_positions = indptr[slide_rows][:, :, None] + np.arange(2)
        indices[self._slide_entry_positions] = self.dof_offset[self.slide_nodes, None, None] + np.arange(2)

        self._projection_indptr = indptr.astype(index_dtype)
        self._projection_indices = indices
        self._projection_data_template = data

    # ------------------------------------------------------------------ frames

    def reduction(self, skull_transform: np.ndarray, jaw_transform: np.ndarray):
        """Move to a frame; returns (P (3N × n) CSR, c (3N,)) for it.

        P's indptr/indices arrays are the same objects every frame; a new data array is made
        each call, so a P returned earlier keeps its values."""
        transforms = np.stack([np.asarray(skull_transform, dtype=float), np.asarray(jaw_transform, dtype=float)])
        if transforms.shape != (BONE_COUNT, 4, 4):
            raise ValueError("skull and jaw transforms must be 4×4 matrices")
        rotations, translations = transforms[:, :3, :3], transforms[:, :3, 3]

        offset = np.zeros((self.node_count, 3))
        offset[self.pin_nodes] = (np.einsum("nij,nj->ni", rotations[self.pin_bone], self.rest_positions[self.pin_nodes])
                                  + translations[self.pin_bone])
        slide_rotations = rotations[self.slide_bone]
        offset[self.slide_nodes] = (np.einsum("nij,nj->ni", slide_rotations, self.rest_positions[self.slide_nodes])
                                    + translations[self.slide_bone])
        self.slide_basis = slide_rotations @ self.slide_rest_basis               # (S, 3, 2)

        data = self._projection_data_template.copy()
        data[self._slide_entry_positions] = self.slide_basis
        self.P = sp.csr_matrix((data, self._projection_indices, self._projection_indptr),
                               shape=(3 * self.node_count, self.reduced_size))
        self.c = offset.ravel()
        self.skull_transform, self.jaw_transform = transforms
        return self.P, self.c

    def repin(self, nodes: np.ndarray, rest_positions: np.ndarray) -> None:
        """Pin the given pinned nodes at new rest places (bone-local), keeping everything that
        depends only on which nodes are pinned or sliding: P's pattern and the Pᵀ H P reduction.
        Takes effect at the next `use_frame` / `reduction`."""
        nodes = np.asarray(nodes, dtype=np.int64)
        if np.any(self.dofs_per_node[nodes] != PINNED_DOFS):
            raise ValueError("repin: only pinned nodes can be given new rest places")
        self.rest_positions[nodes] = np.asarray(rest_positions, dtype=float).reshape(len(nodes), 3)

    def use_frame(self, skull_transform: np.ndarray | None, jaw_transform: np.ndarray | None):
        """Move to the frame of the given bone transforms; with neither given, keep the current
        frame (the solvers' convention for "the caller has already set it")."""
        if (skull_transform is None) != (jaw_transform is None):
            raise ValueError("give both skull_transform and jaw_transform, or neither (keep the current frame)")
        if skull_transform is not None:
            self.reduction(skull_transform, jaw_transform)

    def sliding_planes(self) -> tuple[np.ndarray, np.ndarray]:
        """Anchors (S, 3) and unit normals (S, 3) of the sliding nodes' planes in the current frame."""
        rotations = np.stack([self.skull_transform[:3, :3], self.jaw_transform[:3, :3]])[self.slide_bone]
        anchors = self.c.reshape(-1, 3)[self.slide_nodes]
        return anchors, np.einsum("nij,nj->ni", rotations, self.slide_rest_normals)

    # ------------------------------------------------------------------ mapping

    def x_from_q(self, q: np.ndarray) -> np.ndarray:
        """Full configuration (3N,) of reduced coordinates q (n,) in the current frame."""
        return self.P @ np.asarray(q, dtype=float) + self.c

    def q_from_x(self, x: np.ndarray) -> np.ndarray:
        """Reduced coordinates of the closest configuration that satisfies the current frame's
        constraints: pinned nodes jump to their bone, sliding nodes are projected onto their
        plane. Used to warm-start a frame from the previous one after the bones moved."""
        return self.P.T @ (np.asarray(x, dtype=float).ravel() - self.c)

    def reduce_gradient(self, gradient: np.ndarray) -> np.ndarray:
        """Pᵀ ∇E: the force components the reduced unknowns feel (n,)."""
        return self.P.T @ np.asarray(gradient, dtype=float).ravel()

    def reduce_hessian(self, hessian) -> sp.csc_matrix:
        """Pᵀ H P (n × n CSC) on a pattern that depends only on H's pattern.

        H is the 3N × 3N Hessian (CSR; other formats are converted). Every reduced node keeps
        its diagonal block, so the diagonal is always in the pattern (for shifts). The returned
        matrix shares its indptr/indices arrays across calls while H's pattern is unchanged."""
        if not (sp.issparse(hessian) and hessian.format == "csr"):
            hessian = sp.csr_matrix(hessian)
        if hessian.shape != (3 * self.node_count, 3 * self.node_count):
            raise ValueError(f"Hessian has shape {hessian.shape}, expected {(3 * self.node_count,) * 2}")
        if self._hessian_reduction is None or not self._hessian_reduction.matches(hessian):
            self._hessian_reduction = _HessianReduction(hessian, self)
        return self._hessian_reduction.reduce(hessian.data, self.slide_basis)


class _HessianReduction:
    """Pᵀ H P for one pattern of H, as dense node blocks.

    P is block diagonal (one 3×d block per node), so block (r, s) of Pᵀ H P is
    P_rᵀ H_rs P_s. H's entries are gathered into 3×3 node blocks, the blocks touching a sliding
    node are multiplied by its basis, and the valid d_r × d_s part of each block is scattered
    into a CSC pattern computed here once."""

    def __init__(self, hessian: sp.csr_matrix, constraints: BoneConstraints):
        self.indptr, self.indices = hessian.indptr, hessian.indices
        node_count, dofs, offset = constraints.node_count, constraints.dofs_per_node, constraints.dof_offset

        rows = np.repeat(np.arange(hessian.shape[0]), np.diff(hessian.indptr))
        cols = hessian.indices.astype(np.int64)
        row_node, col_node = rows // 3, cols // 3
        kept = (dofs[row_node] > 0) & (dofs[col_node] > 0)
        self.kept_entries = np.flatnonzero(kept)
        reduced_nodes = np.flatnonzero(dofs > 0)
        entry_keys = row_node[kept] * node_count + col_node[kept]
        diagonal_keys = reduced_nodes * node_count + reduced_nodes
        block_keys, block_of = np.unique(np.concatenate([entry_keys, diagonal_keys]), return_inverse=True)
        self.block_count = len(block_keys)
        self.entry_targets = block_of[:len(entry_keys)] * 9 + (rows[kept] % 3) * 3 + cols[kept] % 3
        block_row, block_col = block_keys // node_count, block_keys % node_count

        slide_row = constraints.slide_index_of_node[block_row]
        slide_col = constraints.slide_index_of_node[block_col]
        self.blocks_with_sliding_row = np.flatnonzero(slide_row >= 0)
        self.sliding_row_ids = slide_row[self.blocks_with_sliding_row]
        self.blocks_with_sliding_col = np.flatnonzero(slide_col >= 0)
        self.sliding_col_ids = slide_col[self.blocks_with_sliding_col]

        component = np.arange(3)
        valid = ((component[None, :, None] < dofs[block_row, None, None])
                 & (component[None, None, :] < dofs[block_col, None, None]))
        block, i, j = np.nonzero(valid)
        reduced_row = offset[block_row[block]] + i
        reduced_col = offset[block_col[block]] + j
        column_major = np.lexsort((reduced_row, reduced_col))
        size = constraints.reduced_size
        index_dtype = _index_dtype(max(len(block), size))
        self.value_source = (block * 9 + i * 3 + j)[column_major]
        self.reduced_indices = reduced_row[column_major].astype(index_dtype)
        self.reduced_indptr = np.concatenate([[0], np.cumsum(np.bincount(reduced_col, minlength=size))]).astype(index_dtype)
        self.size = size
        self._blocks: np.ndarray | None = None

    def matches(self, hessian: sp.csr_matrix) -> bool:
        if hessian.indptr is self.indptr and hessian.indices is self.indices:
            return True
        return np.array_equal(hessian.indptr, self.indptr) and np.array_equal(hessian.indices, self.indices)

    def reduce(self, hessian_data: np.ndarray, slide_basis: np.ndarray) -> sp.csc_matrix:
        if self._blocks is None:
            self._blocks = np.empty(9 * self.block_count)    # scratch, refilled every call
        data = np.empty(len(self.value_source))
        _reduce_into(np.ascontiguousarray(hessian_data, dtype=np.float64), self.kept_entries, self.entry_targets,
                     self.blocks_with_sliding_row, self.sliding_row_ids, self.blocks_with_sliding_col,
                     self.sliding_col_ids, np.ascontiguousarray(slide_basis, dtype=np.float64), self.value_source,
                     self._blocks, data)
        return sp.csc_matrix((data, self.reduced_indices, self.reduced_indptr), shape=(self.size, self.size),
                             copy=False)


@njit(cache=True)
def _reduce_into(hessian_data, kept_entries, entry_targets, sliding_row_blocks, sliding_row_ids, sliding_col_blocks,
                 sliding_col_ids, slide_basis, value_source, blocks, data):
    """data = the reduced Hessian's values (``_HessianReduction``): H's kept entries summed into
    3×3 node blocks (duplicates of a non-canonical H add up), the blocks of a sliding row node
    turned by Bᵀ, of a sliding column node by B, and the valid entries gathered in CSC order.
    Written out: the numpy version (bincount, batched matmuls, fancy indexing) took 17.5 ms a
    call on ICT's 1.1 million entries (this 4.9 ms), 6-7 % of a frame."""
    blocks[:] = 0.0
    for k in range(len(kept_entries)):
        blocks[entry_targets[k]] += hessian_data[kept_entries[k]]
    turned = np.empty(9)
    for k in range(len(sliding_row_blocks)):
        start, basis = 9 * sliding_row_blocks[k], slide_basis[sliding_row_ids[k]]
        for i in range(3):
            for j in range(3):
                turned[3 * i + j] = (basis[0, i] * blocks[start + j] + basis[1, i] * blocks[start + 3 + j]
                                     + basis[2, i] * blocks[start + 6 + j]) if i < 2 else 0.0
        blocks[start:start + 9] = turned
    for k in range(len(sliding_col_blocks)):
        start, basis = 9 * sliding_col_blocks[k], slide_basis[sliding_col_ids[k]]
        for i in range(3):
            for j in range(3):
                turned[3 * i + j] = (blocks[start + 3 * i] * basis[0, j] + blocks[start + 3 * i + 1] * basis[1, j]
                                     + blocks[start + 3 * i + 2] * basis[2, j]) if j < 2 else 0.0
        blocks[start:start + 9] = turned
    for k in range(len(value_source)):
        data[k] = blocks[value_source[k]]
