"""Turns a face rig into a simulation-ready volumetric face model.

Pipeline (see docs/model-builder.md): head frame and landmarks from shape keys →
bones (supplied or estimated from forensic soft-tissue thickness) → tissue tet mesh →
muscle atlas, Monte-Carlo fractions, Laplace contraction directions → bone attachments,
jaw frame, lumped masses, skin embedding. The entry point is `builder.build_model`.
"""
