# Face Physics tissue preset "Default": every tissue setting at the add-on's default, which is
# the solver's default (solver/physics/settings.json, read by the add-on): nothing is repeated here.
import bpy

settings = bpy.context.active_object.face_physics
for name in ("fat_scale", "fat_softening", "stiffness_range", "density_range", "diffusion_spread_mm"):
    settings.property_unset(name)
