"""Numba kernels of the isotropic remesher (remesh.py): split, collapse and flip on a corner table.

Triangle t has half-edges 3t+k from corner k to corner k+1; ``twin[h]`` is the half-edge across
(−1 on a boundary) and ``out_edge[v]`` one half-edge leaving v — for a boundary vertex always
the one on the boundary, so that turning round a vertex from it covers the whole fan. Removed
triangles have −1 corners; arrays are allocated with room to grow and ``counts`` holds the
vertex and triangle counts in use. Every pass is a sequential loop in a fixed order, so the
result is deterministic.
"""
from __future__ import annotations

import numpy as np
from numba import njit

MIN_LOOP_VERTICES = 4
# A collapse or flip may turn a triangle's normal by at most acos(0.5) = 60° ...
_MIN_NORMAL_COSINE = 0.5
# ... and a flip is not made across a crease sharper than acos(0.3) between its two triangles.
_MIN_FLIP_DIHEDRAL_COSINE = 0.3
_MAX_RING = 64
# An angle flip must lower the largest corner cosine of the pair by this much (no flip-flopping).
_ANGLE_FLIP_GAIN = 1e-3


# --------------------------------------------------------------------------- corner table

@njit(cache=True)
def _next(h):
    return 3 * (h // 3) + (h % 3 + 1) % 3


@njit(cache=True)
def _prev(h):
    return 3 * (h // 3) + (h % 3 + 2) % 3


@njit(cache=True)
def _head(tri, h):
    return tri[h // 3, (h % 3 + 1) % 3]


@njit(cache=True)
def _tail(tri, h):
    return tri[h // 3, h % 3]


@njit(cache=True)
def _link(twin, a, b):
    if a >= 0:
        twin[a] = b
    if b >= 0:
        twin[b] = a


@njit(cache=True)
def _fix_out_edge(tri, twin, out_edge, v):
    """Turn backwards round v until the boundary half-edge leaving v, if there is one."""
    h = out_edge[v]
    start = h
    for _ in range(_MAX_RING * 4):
        if twin[h] < 0:
            out_edge[v] = h
            return
        h = _next(twin[h])
        if h == start:
            return


@njit(cache=True)
def _ring(tri, twin, out_edge, v, neighbours, edges):
    """Neighbours of v (and the half-edges leaving v) in fan order; returns their count, −1 if too many."""
    h = out_edge[v]
    start = h
    count = 0
    while True:
        if count >= neighbours.shape[0] - 1:
            return -1
        neighbours[count] = _head(tri, h)
        edges[count] = h
        count += 1
        p = _prev(h)
        if twin[p] < 0:
            neighbours[count] = _tail(tri, p)
            edges[count] = -1
            return count + 1
        h = twin[p]
        if h == start:
            return count


@njit(cache=True)
def _unit_normal(p, a, b, c):
    ux, uy, uz = p[b, 0] - p[a, 0], p[b, 1] - p[a, 1], p[b, 2] - p[a, 2]
    vx, vy, vz = p[c, 0] - p[a, 0], p[c, 1] - p[a, 1], p[c, 2] - p[a, 2]
    nx, ny, nz = uy * vz - uz * vy, uz * vx - ux * vz, ux * vy - uy * vx
    length = np.sqrt(nx * nx + ny * ny + nz * nz)
    if length <= 0.0:
        return 0.0, 0.0, 0.0, 0.0
    return nx / length, ny / length, nz / length, length


@njit(cache=True)
def _distance(p, a, b):
    dx, dy, dz = p[a, 0] - p[b, 0], p[a, 1] - p[b, 1], p[a, 2] - p[b, 2]
    return np.sqrt(dx * dx + dy * dy + dz * dz)


@njit(cache=True)
def loop_point(loop_offsets, loop_points, loop_arc, loop, s, out, v):
    """Position of arc length s (wrapped) on boundary loop `loop`, written to out[v]. A loop's
    points run loop_offsets[loop] .. loop_offsets[loop+1]-1, the last repeating the first."""
    first, last = loop_offsets[loop], loop_offsets[loop + 1] - 1
    s = s % loop_arc[last]
    lo, hi = first, last
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if loop_arc[mid] <= s:
            lo = mid
        else:
            hi = mid
    span = loop_arc[lo + 1] - loop_arc[lo]
    t = 0.0 if span <= 0.0 else (s - loop_arc[lo]) / span
    for axis in range(3):
        out[v, axis] = (1.0 - t) * loop_points[lo, axis] + t * loop_points[lo + 1, axis]


@njit(cache=True)
def _arc_midpoint(s0, s1, perimeter):
    offset = (s1 - s0) % perimeter
    if offset > 0.5 * perimeter:
        offset -= perimeter
    return (s0 + 0.5 * offset) % perimeter


# --------------------------------------------------------------------------- split / collapse / flip

@njit(cache=True)
def _split(h, tri, twin, out_edge, valence, pos, loop_of, arc, counts, loop_offsets, loop_points, loop_arc):
    """Split the edge of half-edge h at its midpoint; False when the arrays are full."""
    vn, tn = counts[0], counts[1]
    g = twin[h]
    if vn >= pos.shape[0] or tn + 2 > tri.shape[0]:
        return False
    t, k = h // 3, h % 3
    a, b, c = tri[t, k], tri[t, (k + 1) % 3], tri[t, (k + 2) % 3]
    m = vn
    counts[0] = vn + 1
    for axis in range(3):
        pos[m, axis] = 0.5 * (pos[a, axis] + pos[b, axis])
    if g < 0:
        loop = loop_of[a]
        loop_of[m] = loop
        perimeter = loop_arc[loop_offsets[loop + 1] - 1]
        arc[m] = _arc_midpoint(arc[a], arc[b], perimeter)
        loop_point(loop_offsets, loop_points, loop_arc, loop, arc[m], pos, m)
    else:
        loop_of[m] = -1
        arc[m] = 0.0
    # t = (a, b, c) -> (a, m, c); t1 = (m, b, c)
    t1 = tn
    outer_bc = twin[_next(h)]
    tri[t, (k + 1) % 3] = m
    tri[t1, 0], tri[t1, 1], tri[t1, 2] = m, b, c
    _link(twin, 3 * t1 + 1, outer_bc)
    _link(twin, _next(h), 3 * t1 + 2)
    if out_edge[b] == _next(h):
        out_edge[b] = 3 * t1 + 1
    out_edge[m] = 3 * t1
    valence[c] += 1
    if g >= 0:
        # s = (b, a, d) -> (b, m, d); s1 = (m, a, d)
        s, j = g // 3, g % 3
        d = tri[s, (j + 2) % 3]
        s1 = tn + 1
        outer_ad = twin[_next(g)]
        tri[s, (j + 1) % 3] = m
        tri[s1, 0], tri[s1, 1], tri[s1, 2] = m, a, d
        _link(twin, 3 * s1 + 1, outer_ad)
        _link(twin, _next(g), 3 * s1 + 2)
        if out_edge[a] == _next(g):
            out_edge[a] = 3 * s1 + 1
        _link(twin, h, 3 * s1)
        _link(twin, g, 3 * t1)
        valence[m] = 4
        valence[d] += 1
        counts[1] = tn + 2
    else:
        twin[3 * t1] = -1
        twin[h] = -1
        valence[m] = 3
        counts[1] = tn + 1
    return True


@njit(cache=True)
def _can_collapse(h, tri, twin, out_edge, valence, pos, loop_of, loop_size, high, ring_a, edges_a, ring_b, edges_b):
    a, b = _tail(tri, h), _head(tri, h)
    g = twin[h]
    if loop_of[a] >= 0:
        if g >= 0 or loop_size[loop_of[a]] <= MIN_LOOP_VERTICES:
            return False
    c = _head(tri, _next(h))
    d = _head(tri, _next(g)) if g >= 0 else -1
    for x in (c, d):
        if x >= 0 and valence[x] <= (3 if loop_of[x] < 0 else 2):
            return False
    count_a = _ring(tri, twin, out_edge, a, ring_a, edges_a)
    count_b = _ring(tri, twin, out_edge, b, ring_b, edges_b)
    if count_a < 0 or count_b < 0 or count_a + count_b > _MAX_RING:
        return False
    shared = 0
    for i in range(count_a):
        x = ring_a[i]
        if x != b and _distance(pos, x, b) > high:
            return False
        for j in range(count_b):
            if ring_b[j] == x:
                if x != c and x != d:
                    return False
                shared += 1
    if shared != (2 if g >= 0 else 1):
        return False
    # No triangle round a may fold or collapse when a moves onto b.
    for i in range(count_a):
        e = edges_a[i]
        if e < 0:
            continue
        x, y = _head(tri, e), _head(tri, _next(e))
        if x == b or y == b:
            continue
        nx, ny, nz, area = _unit_normal(pos, a, x, y)
        mx, my, mz, new_area = _unit_normal(pos, b, x, y)
        if new_area <= 1e-12 * high * high or nx * mx + ny * my + nz * mz < _MIN_NORMAL_COSINE:
            return False
    return True


@njit(cache=True)
def _collapse(h, tri, twin, out_edge, valence, loop_of, loop_size, ring_a, edges_a):
    """Collapse half-edge h = a→b: a disappears into b (checked by _can_collapse)."""
    a, b = _tail(tri, h), _head(tri, h)
    g = twin[h]
    c = _head(tri, _next(h))
    count_a = _ring(tri, twin, out_edge, a, ring_a, edges_a)
    for i in range(count_a):
        e = edges_a[i]
        if e >= 0:
            tri[e // 3, e % 3] = b
    outer_1 = twin[_next(h)]   # c→b beyond t
    outer_2 = twin[_prev(h)]   # a→c beyond t, now b→c
    _link(twin, outer_1, outer_2)
    tri[h // 3, 0] = tri[h // 3, 1] = tri[h // 3, 2] = -1
    out_edge[b] = outer_2 if outer_2 >= 0 else (-1)
    out_edge[c] = outer_1 if outer_1 >= 0 else _next(outer_2)
    new_valence = valence[a] + valence[b] - 3
    valence[c] -= 1
    if g >= 0:
        d = _head(tri, _next(g))
        outer_3 = twin[_next(g)]   # d→a beyond s, now d→b
        outer_4 = twin[_prev(g)]   # b→d beyond s
        _link(twin, outer_3, outer_4)
        tri[g // 3, 0] = tri[g // 3, 1] = tri[g // 3, 2] = -1
        if out_edge[b] < 0:
            out_edge[b] = outer_4
        out_edge[d] = outer_3 if outer_3 >= 0 else _next(outer_4)
        new_valence -= 1
        valence[d] -= 1
        _fix_out_edge(tri, twin, out_edge, d)
    else:
        loop_size[loop_of[a]] -= 1
    if out_edge[b] < 0:
        out_edge[b] = _next(outer_1)
    valence[b] = new_valence
    _fix_out_edge(tri, twin, out_edge, b)
    _fix_out_edge(tri, twin, out_edge, c)
    out_edge[a] = -1
    valence[a] = 0


@njit(cache=True)
def _valence_target(loop_of, v):
    return 6 if loop_of[v] < 0 else 4


@njit(cache=True)
def _smallest_cosine_gap(pos, p, q, r):
    """The largest cosine of the triangle's three angles (1 for a degenerate one): the smallest
    angle's cosine, which a better-shaped triangle lowers."""
    worst = -1.0
    for k in range(3):
        o = p if k == 0 else (q if k == 1 else r)
        u = q if k == 0 else (r if k == 1 else p)
        w = r if k == 0 else (p if k == 1 else q)
        ux, uy, uz = pos[u, 0] - pos[o, 0], pos[u, 1] - pos[o, 1], pos[u, 2] - pos[o, 2]
        wx, wy, wz = pos[w, 0] - pos[o, 0], pos[w, 1] - pos[o, 1], pos[w, 2] - pos[o, 2]
        lengths = np.sqrt((ux * ux + uy * uy + uz * uz) * (wx * wx + wy * wy + wz * wz))
        if lengths <= 0.0:
            return 1.0
        worst = max(worst, (ux * wx + uy * wy + uz * wz) / lengths)
    return worst


@njit(cache=True)
def _try_flip(h, tri, twin, out_edge, valence, pos, loop_of, ring, edges, by_angle):
    """Flip the edge of h when that evens the valences (or, `by_angle`, raises the smallest angle
    of the two triangles) without folding them; True when flipped."""
    g = twin[h]
    if g < 0:
        return False
    a, b = _tail(tri, h), _head(tri, h)
    c, d = _head(tri, _next(h)), _head(tri, _next(g))
    if c == d:
        return False
    if valence[a] <= (3 if loop_of[a] < 0 else 2) or valence[b] <= (3 if loop_of[b] < 0 else 2):
        return False
    if by_angle:
        before_cosine = max(_smallest_cosine_gap(pos, a, b, c), _smallest_cosine_gap(pos, b, a, d))
        after_cosine = max(_smallest_cosine_gap(pos, c, a, d), _smallest_cosine_gap(pos, d, b, c))
        if after_cosine >= before_cosine - _ANGLE_FLIP_GAIN:
            return False
    else:
        before = 0
        after = 0
        for v, change in ((a, -1), (b, -1), (c, 1), (d, 1)):
            target = _valence_target(loop_of, v)
            before += (valence[v] - target) ** 2
            after += (valence[v] + change - target) ** 2
        if after >= before:
            return False
    count = _ring(tri, twin, out_edge, c, ring, edges)
    if count < 0:
        return False
    for i in range(count):
        if ring[i] == d:
            return False
    n1x, n1y, n1z, area1 = _unit_normal(pos, a, b, c)
    n2x, n2y, n2z, area2 = _unit_normal(pos, b, a, d)
    if n1x * n2x + n1y * n2y + n1z * n2z < _MIN_FLIP_DIHEDRAL_COSINE:
        return False
    sx, sy, sz = n1x + n2x, n1y + n2y, n1z + n2z
    length = np.sqrt(sx * sx + sy * sy + sz * sz)
    for p, q, r in ((c, a, d), (d, b, c)):
        mx, my, mz, area = _unit_normal(pos, p, q, r)
        if area <= 0.0 or (mx * sx + my * sy + mz * sz) < _MIN_NORMAL_COSINE * length:
            return False
    # t = (a, b, c) -> (c, a, d); s = (b, a, d) -> (d, b, c)
    t, s = h // 3, g // 3
    outer_bc, outer_ca = twin[_next(h)], twin[_prev(h)]
    outer_ad, outer_db = twin[_next(g)], twin[_prev(g)]
    tri[t, 0], tri[t, 1], tri[t, 2] = c, a, d
    tri[s, 0], tri[s, 1], tri[s, 2] = d, b, c
    _link(twin, 3 * t, outer_ca)
    _link(twin, 3 * t + 1, outer_ad)
    _link(twin, 3 * t + 2, 3 * s + 2)
    _link(twin, 3 * s, outer_db)
    _link(twin, 3 * s + 1, outer_bc)
    out_edge[a], out_edge[b], out_edge[c], out_edge[d] = 3 * t + 1, 3 * s + 1, 3 * t, 3 * s
    for v in (a, b, c, d):
        _fix_out_edge(tri, twin, out_edge, v)
    valence[a] -= 1
    valence[b] -= 1
    valence[c] += 1
    valence[d] += 1
    return True


@njit(cache=True)
def _edge_length(tri, pos, h):
    return _distance(pos, _tail(tri, h), _head(tri, h))


@njit(cache=True)
def split_pass(high, tri, twin, out_edge, valence, pos, loop_of, arc, loop_size, counts,
                loop_offsets, loop_points, loop_arc, limit):
    """Split edges longer than `high` (each edge seen from its lower half-edge), until the
    triangle count reaches `limit`."""
    t = 0
    while t < counts[1]:
        if tri[t, 0] >= 0:
            for k in range(3):
                h = 3 * t + k
                if twin[h] >= 0 and twin[h] < h:
                    continue
                if counts[1] >= limit:
                    return
                if _edge_length(tri, pos, h) > high:
                    if twin[h] < 0:
                        loop_size[loop_of[_tail(tri, h)]] += 1
                    if not _split(h, tri, twin, out_edge, valence, pos, loop_of, arc, counts,
                                  loop_offsets, loop_points, loop_arc):
                        return
        t += 1


@njit(cache=True)
def _orient_collapse(tri, twin, loop_of, h):
    """Collapse towards the boundary: a boundary vertex never moves into the interior."""
    a, b = _tail(tri, h), _head(tri, h)
    if loop_of[a] >= 0 and loop_of[b] < 0 and twin[h] >= 0:
        return twin[h]
    return h


@njit(cache=True)
def collapse_pass(low, high, tri, twin, out_edge, valence, pos, loop_of, loop_size, counts):
    ring_a = np.empty(_MAX_RING + 2, np.int64)
    edges_a = np.empty(_MAX_RING + 2, np.int64)
    ring_b = np.empty(_MAX_RING + 2, np.int64)
    edges_b = np.empty(_MAX_RING + 2, np.int64)
    removed = 0
    for t in range(counts[1]):
        for k in range(3):
            if tri[t, 0] < 0:
                break
            h = 3 * t + k
            if _edge_length(tri, pos, h) >= low:
                continue
            h = _orient_collapse(tri, twin, loop_of, h)
            if _can_collapse(h, tri, twin, out_edge, valence, pos, loop_of, loop_size, high,
                             ring_a, edges_a, ring_b, edges_b):
                removed += 2 if twin[h] >= 0 else 1
                _collapse(h, tri, twin, out_edge, valence, loop_of, loop_size, ring_a, edges_a)
    return removed


@njit(cache=True)
def flip_pass(tri, twin, out_edge, valence, pos, loop_of, counts, by_angle):
    ring = np.empty(_MAX_RING + 2, np.int64)
    edges = np.empty(_MAX_RING + 2, np.int64)
    flips = 0
    for t in range(counts[1]):
        for k in range(3):
            if tri[t, 0] < 0:
                break
            h = 3 * t + k
            if twin[h] > h and _try_flip(h, tri, twin, out_edge, valence, pos, loop_of, ring, edges, by_angle):
                flips += 1
    return flips


@njit(cache=True)
def collapse_listed(candidates, wanted_removal, tri, twin, out_edge, valence, pos, loop_of, loop_size, high):
    """Collapse the listed half-edges in order until `wanted_removal` triangles are gone."""
    ring_a = np.empty(_MAX_RING + 2, np.int64)
    edges_a = np.empty(_MAX_RING + 2, np.int64)
    ring_b = np.empty(_MAX_RING + 2, np.int64)
    edges_b = np.empty(_MAX_RING + 2, np.int64)
    removed = 0
    for h in candidates:
        if removed >= wanted_removal:
            break
        if tri[h // 3, 0] < 0:
            continue
        h = _orient_collapse(tri, twin, loop_of, h)
        loss = 2 if twin[h] >= 0 else 1
        if _can_collapse(h, tri, twin, out_edge, valence, pos, loop_of, loop_size, high,
                         ring_a, edges_a, ring_b, edges_b):
            removed += loss
            _collapse(h, tri, twin, out_edge, valence, loop_of, loop_size, ring_a, edges_a)
    return removed


@njit(cache=True)
def split_listed(candidates, wanted_addition, tri, twin, out_edge, valence, pos, loop_of, arc, loop_size, counts,
                  loop_offsets, loop_points, loop_arc):
    """Split the listed half-edges in order until `wanted_addition` triangles are new; an edge
    whose triangles an earlier split changed is skipped (its half-edge now names another edge)."""
    start = counts[1]
    touched = np.zeros(tri.shape[0], np.bool_)
    for h in candidates:
        if counts[1] - start >= wanted_addition:
            break
        if touched[h // 3] or (twin[h] >= 0 and touched[twin[h] // 3]):
            continue
        touched[h // 3] = True
        if twin[h] >= 0:
            touched[twin[h] // 3] = True
        if twin[h] < 0:
            loop_size[loop_of[_tail(tri, h)]] += 1
        if not _split(h, tri, twin, out_edge, valence, pos, loop_of, arc, counts,
                      loop_offsets, loop_points, loop_arc):
            break
    return counts[1] - start
