"""Quadratic corrective shape keys (paper 002 §4, Eq. 11): the physics baked into the rig.

samples.py plans and solves the simulated samples (pairs of shape keys played through the fitted
model with collisions, by the `animate` command itself), fitting.py prunes the pairs and fits
the terms by least squares, corr_file.py writes, reads and evaluates CORR.npz. docs/correctives.md
describes the basis, the file and the measured figures.
"""
