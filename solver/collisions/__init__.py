"""Collisions of the skin with the teeth, the other lip and external props (issue 5).

Detection side: collider geometry (``teeth``, ``lips``, ``mesh_collider``), the numba
kernels (``detection``) and ``CollisionScene``, which hands ``ContactPlanes`` (``contacts``)
to the solvers. See docs/collisions.md.
"""
from .contacts import BonePose, Collider, ContactPlanes
from .lips import LipCollider, LipSurfaceError, LipSurfaces, find_lip_surfaces, lip_vertices_from_groups
from .mesh_collider import MeshCollider, MeshColliderError, load_mesh_collider, validate_collider_mesh
from .scene import CollisionMeasure, CollisionScene
from .teeth import TeethCollider, TeethProxy, TeethProxyError, teeth_proxies

__all__ = [
    "BonePose", "Collider", "ContactPlanes",
    "CollisionMeasure", "CollisionScene",
    "LipCollider", "LipSurfaceError", "LipSurfaces", "find_lip_surfaces", "lip_vertices_from_groups",
    "MeshCollider", "MeshColliderError", "load_mesh_collider", "validate_collider_mesh",
    "TeethCollider", "TeethProxy", "TeethProxyError", "teeth_proxies",
]
