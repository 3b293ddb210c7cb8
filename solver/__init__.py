"""Face Physics solver: volumetric face models, Phace-style physics, inverse fitting.

Pure Python (numpy, scipy, numba, CHOLMOD, IPOPT). Never imports bpy: the Blender
add-on talks to it through files and a subprocess.
"""

__version__ = "0.1.0"
