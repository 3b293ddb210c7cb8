"""Geometric queries on triangle meshes: generalized winding numbers and closest points.

Both queries share one array-based BVH (``bvh.TriangleBVH``) and run as parallel
numba kernels over the query points.
"""
from .bvh import TriangleBVH
from .closest_point import ClosestPointResult, ClosestPointTree
from .mesh_ops import icosphere, triangle_normals_areas, vertex_normals
from .winding import WindingNumberTree, winding_numbers

__all__ = [
    "ClosestPointResult",
    "ClosestPointTree",
    "TriangleBVH",
    "WindingNumberTree",
    "icosphere",
    "triangle_normals_areas",
    "vertex_normals",
    "winding_numbers",
]
