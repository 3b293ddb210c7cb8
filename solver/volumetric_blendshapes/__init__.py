"""Volumetric blendshapes (paper 002 §3.3–3.5): the second actuation model beside Phace.

Per-shape per-tet deformation-gradient targets from the rig's shape keys (targets.py), blended by
polar decomposition (blending.py), reached by minimising E_target + μ E_ARAP + λ E_volume
(energies.py: element kernels, whole mesh, convenience) with Projective Dynamics on one
prefactorised matrix per model (projective_dynamics.py). docs/volumetric_blendshapes.md.
"""
