# Face Physics tissue preset "Firm lean face": a lean, athletic face with little subcutaneous fat.
# Order-of-magnitude reasoning, not a fit to measurements:
# * fat: 15 % slimmer where the fat map is 1 (paint the buccal and jowl fat pads); slimming never
#   softens, so the softening is 0 for clarity;
# * stiffness ×1.2 where the stiffness map is 0 up to ×1.6 where it is 1: fat is several times
#   softer than passive muscle and dermis (shear moduli of order 0.5-1 kPa against a few kPa), so
#   a face with less of it is stiffer as a whole; paint 1 over the masseters and cheeks;
# * density ×1 to ×1.1: lean tissue is denser than fat (muscle 1.06 against fat 0.9 g/cm³), a few
#   per cent more mass where muscle replaces fat;
# * a narrower diffusion spread (5 mm): a thin subcutaneous layer keeps what is painted on the
#   skin close to it.
import bpy

settings = bpy.context.active_object.face_physics
settings.fat_scale = 0.85
settings.fat_softening = 0.0
settings.stiffness_range = (1.2, 1.6)
settings.density_range = (1.0, 1.1)
settings.diffusion_spread_mm = 5.0
