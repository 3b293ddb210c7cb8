"""Reference implementations the shipped solver is measured and cross-checked against: the
paper's full-space IPOPT fit (full_space.py), the 1-DoF fibre-model fit (fibre_fit.py) and Newton
with scipy's sparse LU (spsolve_newton.py). Used by tests/ and bench/; never packed into the add-on."""
