"""The interactive shell of paper 001: a coarse surface simulation that tracks the rig's shape
keys, takes contact, and finds its own stiffness from the shape keys (docs/shell.md)."""
