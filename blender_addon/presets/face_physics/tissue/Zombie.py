# Face Physics tissue preset "Zombie" (Phace, paper 000 §8, Fig. 13-e): stiffness ×0.7–5.7 and
# density ×1–3 over the painted stiffness and density maps (paint stiffness high round the lips
# and eyes, density high on the cheeks), the other settings at their defaults. The ranges are
# read from the solver's own copy (solver/physics/settings.json "presets"/"zombie"), so the
# add-on and the solver have one source of them.
import bpy

settings = bpy.context.active_object.face_physics
for name in ("fat_scale", "fat_softening", "stiffness_range", "density_range", "diffusion_spread_mm"):
    settings.property_unset(name)
zombie = bpy.types.FACE_PHYSICS_MT_tissue_presets.solver_preset("zombie")
settings.stiffness_range = zombie["stiffness_range"]
settings.density_range = zombie["density_range"]
