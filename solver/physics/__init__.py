"""Forward physics of the face model (docs/physics.md): energies, constraints and the solver.

Each energy offers the same three tiers: numba kernels on stacked per-element quantities,
a whole-mesh object (value, gradient, sparse Hessian in a fixed pattern) and a convenience
call. Every energy is listed in tests/energy_registry.py so one parametrised test checks all
derivatives the same way.
"""
