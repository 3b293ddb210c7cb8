# Face Physics tissue preset "Soft aged tissue": an older face whose tissue gives and sags more.
# Order-of-magnitude reasoning, not a fit to measurements:
# * stiffness ×0.6 where the stiffness map is 0 up to ×0.85 where it is 1: with age the dermis
#   loses collagen and elastin and the retaining ligaments slacken, so the face deforms more
#   under the same muscle pull. 15-40 % softer is a chosen, clearly visible change, not a
#   measured one (paint 1 where the face stays firmer, e.g. over the cheekbones and the nose);
# * density ×1 everywhere: the tissue's mass per volume barely changes with age (fat 0.9, muscle
#   1.06 g/cm³, both already in the model);
# * fat: 10 % fuller where the fat map is 1 (fat pads descend and pool along the jowls and under
#   the eyes), and full softening (Phace's levels), as fatty tissue is softer than the tissue it
#   replaces;
# * a wider diffusion spread (10 mm instead of 7.7): ageing is gradual over the face, not spots.
import bpy

settings = bpy.context.active_object.face_physics
settings.fat_scale = 1.1
settings.fat_softening = 1.0
settings.stiffness_range = (0.6, 0.85)
settings.density_range = (1.0, 1.0)
settings.diffusion_spread_mm = 10.0
