"""Headless pictures of face models: a small software rasteriser and the standard views.

``raster`` draws triangle meshes and point markers into numpy images and composes them
with titles and legends; ``views`` turns a face model into the PNGs an artist checks.
Nothing here needs a display or Blender.
"""
