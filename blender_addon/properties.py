"""Settings stored in the .blend: one `face_physics` group per object (the skin), plus the
running job's state on the window manager (not saved)."""

import bpy
from bpy.props import (BoolProperty, CollectionProperty, EnumProperty, FloatProperty, FloatVectorProperty,
                       IntProperty, PointerProperty, StringProperty)

from . import muscle_overlay, solver_numbers
from .solver_numbers import default, limits

MULTIPLIER_LOW, MULTIPLIER_HIGH = solver_numbers.PAINTED_MULTIPLIER_LIMITS


def _is_mesh(self, obj):
    return obj.type == 'MESH'


def _record_map_groups(settings, context):
    """A map was chosen: remember the object's groups, so a later rename is followed (map_groups.py)."""
    from . import map_groups
    obj = settings.id_data
    if getattr(obj, "type", None) == 'MESH':
        map_groups.resolve(obj)


class FACE_PHYSICS_PG_muscle(bpy.types.PropertyGroup):
    # `name` (built in) is the atlas muscle name, e.g. zygomaticus_major_L.
    # Drivers and keyframes address it by the muscle's name:
    # face_physics.muscles["zygomaticus_major_L"].activation
    activation: FloatProperty(
        name="Activation", default=0.0, min=0.0, max=solver_numbers.MAX_MUSCLE_ACTIVATION, soft_max=1.0,
        subtype='FACTOR', options={'ANIMATABLE'},
        description="How hard this muscle pulls, added on top of the shape keys in a bake: 0 = at rest, "
                    "1 = full contraction (the fibre shortened to half). Keyframe it, or drive it from a "
                    "control rig")
    paralysed: BoolProperty(name="Paralysed", description="This muscle cannot activate")


class FACE_PHYSICS_PG_name_mapping(bpy.types.PropertyGroup):
    # `name` (built in) is the shape key in the mesh.
    arkit_name: StringProperty(name="ARKit name", description="The ARKit name to export this shape key as "
                                                              "(e.g. mouthSmile_L); empty = export as is")


class FACE_PHYSICS_PG_collider(bpy.types.PropertyGroup):
    collider: PointerProperty(name="Collider", type=bpy.types.Object, poll=_is_mesh,
                              description="A closed mesh the skin may not enter (a hand, a headset, a pillow). "
                                          "Its evaluated shape (modifiers, bones, shape keys) is followed frame by "
                                          "frame; it must keep the same vertices and faces over the baked range")


class FACE_PHYSICS_PG_fit_shape(bpy.types.PropertyGroup):
    # `name` (built in) is the shape key as the solver spells it (mouthSmile_L).
    key_name: StringProperty(description="The shape key in the mesh")
    selected: BoolProperty(name="Fit", description="Fit this shape key with Fit Selected")
    fitted: BoolProperty(description="The current fit has this shape key")
    error_mean_mm: FloatProperty(name="Mean (mm)", description="Mean distance between the physics fit and the "
                                                              "shape key on the face region, mm")
    error_p95_mm: FloatProperty(name="95th (mm)", description="95th percentile of that distance, mm")
    error_max_mm: FloatProperty(name="Max (mm)", description="Largest distance, mm")
    status: StringProperty(description="'fitted', or why the shape was left neutral")
    context: StringProperty(description="The shape key this one was fitted on top of (jawOpen for mouthClose)")
    start: StringProperty(description="Where the fit began: 'neutral', or 'mirror:<shape>' when it started "
                                      "from the mirror image of its partner's fit")
    worst: BoolProperty(description="The shape key with the largest mean error")


class FACE_PHYSICS_PG_take(bpy.types.PropertyGroup):
    """One row of the Takes list, read from the take's take.json (take_folders.py); the name is
    the take's folder name."""
    status: StringProperty(description="running, cancelled, failed or finished")
    frames_done: IntProperty()
    frames: IntProperty()
    first_frame: IntProperty()
    last_frame: IntProperty()
    target: StringProperty()
    created: StringProperty()
    seconds_per_frame: FloatProperty()
    warnings: StringProperty(description="The solver's warnings, one per line")
    action: StringProperty(description="The shape-key action the take was baked from")
    resumable: BoolProperty()
    settings: StringProperty(description="What the take was simulated with")


class FACE_PHYSICS_PG_action_choice(bpy.types.PropertyGroup):
    """An action Bake All Actions can bake (name = the action's name)."""
    selected: BoolProperty(name="Bake", default=True)


class FACE_PHYSICS_PG_object(bpy.types.PropertyGroup):
    # Model
    teeth_object: PointerProperty(name="Teeth", type=bpy.types.Object, poll=_is_mesh,
                                  description="Optional upper teeth (rigid with the skull)")
    lower_teeth_object: PointerProperty(name="Lower teeth", type=bpy.types.Object, poll=_is_mesh,
                                        description="Optional lower teeth (rigid with the jaw)")
    skull_object: PointerProperty(name="Skull", type=bpy.types.Object, poll=_is_mesh,
                                  description="Optional skull surface; estimated when empty")
    jaw_object: PointerProperty(name="Jaw", type=bpy.types.Object, poll=_is_mesh,
                                description="Optional mandible surface; estimated when empty")
    head_object: PointerProperty(name="Head", type=bpy.types.Object,
                                 description="Object whose motion moves the skull (e.g. the head bone's "
                                             "empty); empty = the skull stays still relative to the skin")
    target_tets: IntProperty(name="Resolution", default=35000, min=500, soft_max=150000,
                             description="Approximate number of tetrahedra of the volumetric model")
    name_mappings: CollectionProperty(type=FACE_PHYSICS_PG_name_mapping)
    name_mapping_index: IntProperty()
    # No FILE_PATH subtype: that would need PATH_SUPPORTS_BLEND_RELATIVE, which 4.2 lacks.
    model_path: StringProperty(name="Model", description="The built MODEL.npz ('//' = beside the .blend)")
    model_tets: IntProperty(name="Tets")
    model_nodes: IntProperty(name="Nodes")
    model_topology: StringProperty(description="Fingerprint of the mesh the model was built from")
    metres_per_unit: FloatProperty(default=1.0, description="Rig metres per local unit at build time")
    # Fit
    fit_path: StringProperty(name="Fit", description="The FIT.npz of the model's shape keys ('//' = beside the "
                                                     ".blend)")
    fit_shapes: CollectionProperty(type=FACE_PHYSICS_PG_fit_shape)
    fit_index: IntProperty()
    fit_processes: IntProperty(name="Processes", default=2, min=1, max=64,
                               description="Shape keys fitted at the same time, each in a process of its own "
                                           "using one core")
    # Muscles
    muscles: CollectionProperty(type=FACE_PHYSICS_PG_muscle)
    muscle_index: IntProperty(update=muscle_overlay.on_muscle_index_changed)
    muscle_side: EnumProperty(name="Side", description="Which muscles the list shows and the buttons act on",
                              items=(('ALL', "All", "Every muscle"), ('LEFT', "Left", "The face's left muscles (_L)"),
                                     ('RIGHT', "Right", "The face's right muscles (_R)"),
                                     ('MIDDLE', "Middle", "Muscles on the midline (no side)")))
    paralysis_group: StringProperty(name="Paralysis map", description="Vertex group: 1 = fully paralysed",
                                    update=_record_map_groups)
    # Fat
    fat_group: StringProperty(name="Fat map", description="Vertex group: where fat grows (1) or stays (0)",
                              update=_record_map_groups)
    fat_scale: FloatProperty(name="Slim ↔ Fat", default=default("fat_scale"), min=limits("fat_scale")[0],
                             max=limits("fat_scale")[1],
                             description="Local growth where the fat map is 1 (1 = unchanged)")
    fat_softening: FloatProperty(
        name="Stiffness reduction", default=default("fat_softening"), min=limits("fat_softening")[0],
        max=limits("fat_softening")[1], subtype='FACTOR',
        description="How much grown fat softens the tissue: 1 = Phace's levels (stiffness ×0.8, ×0.5, ×0.3 at "
                    "10, 20, 30 % growth), 0 = fat grows but stays as stiff as the tissue was. Slimming never "
                    "softens")
    # In mm, whatever the scene's units: it is a size on the face, like the Phace paper's.
    diffusion_spread_mm: FloatProperty(
        name="Spread (mm)", default=1000.0 * default("diffusion_spread_m"),
        min=1000.0 * limits("diffusion_spread_m")[0], max=1000.0 * limits("diffusion_spread_m")[1], precision=1,
        description="How far a painted map reaches from the skin into the tissue under it, in millimetres "
                    "(all maps: fat, stiffness, density, paralysis). 0 = only the tets the skin lies in")
    # Stiffness & mass
    stiffness_group: StringProperty(name="Stiffness map", update=_record_map_groups)
    # Defaults: unpainted tissue stays as fitted, fully painted twice as stiff (or heavy), so a
    # freshly painted map does something visible and never undoes the fit where nothing is painted.
    stiffness_range: FloatVectorProperty(name="Stiffness ×", size=2, default=(1.0, 2.0),
                                         min=MULTIPLIER_LOW, max=MULTIPLIER_HIGH, description="Multiplier where the map is 0 and where it is 1")
    density_group: StringProperty(name="Density map", update=_record_map_groups)
    # The object's vertex group names by index when the maps were last resolved (map_groups.py).
    map_group_record: StringProperty(options={'HIDDEN'})
    density_range: FloatVectorProperty(name="Density ×", size=2, default=(1.0, 2.0),
                                       min=MULTIPLIER_LOW, max=MULTIPLIER_HIGH, description="Multiplier where the map is 0 and where it is 1")
    # Collisions
    teeth_contact: BoolProperty(name="Teeth contact", default=True,
                                description="Keep the lips and cheeks out of the teeth (the model's teeth, or an "
                                            "arch estimated from the lips when it has none)")
    lip_contact: BoolProperty(name="Lip contact", default=True,
                              description="Keep each lip out of the other")
    colliders: CollectionProperty(type=FACE_PHYSICS_PG_collider)
    collider_index: IntProperty()
    # The solver pads only the teeth proxies; props are used as they are (docs/collisions.md).
    teeth_padding: FloatProperty(
        name="Teeth padding", default=0.001, min=0.0001, max=0.01, subtype='DISTANCE', unit='LENGTH', precision=4,
        description="Thickness added around the teeth meshes before contact: the gum and lip lining between "
                    "skin and enamel. Colliders get no padding: the solver uses their surface as it is, so grow "
                    "the mesh (e.g. a Displace modifier) to pad one. The arch estimated for a model without "
                    "teeth is not padded either")
    contact_solver: EnumProperty(name="Contact solver", items=(
        ('NEWTON', "Newton", "Contacts as an augmented Lagrangian inside Newton's method (faster)"),
        ('IPOPT', "IPOPT", "Contacts as exact linear inequalities solved by IPOPT (slower)")))
    # Dynamics
    dynamics: EnumProperty(name="Mode", items=(('QUASI_STATIC', "Quasi-static", "Each frame at rest"),
                                               ('DYNAMIC', "Dynamic", "Backward-Euler dynamics: inertia, jiggle")))
    gravity: BoolProperty(name="Gravity")
    wind_object: PointerProperty(name="Wind field", type=bpy.types.Object,
                                 description="A Wind force field: its Z axis is the direction, its strength "
                                             "the speed in m/s")
    wind_direction: FloatVectorProperty(name="Wind direction", size=3, default=(0.0, -1.0, 0.0),
                                        subtype='DIRECTION')
    wind_speed: FloatProperty(name="Wind speed (m/s)", default=0.0, min=0.0, max=30.0)
    substeps: IntProperty(name="Substeps", default=1, min=1, max=100)
    # Bake
    animation_source: EnumProperty(name="Drive", items=(
        ('SHAPE_KEYS', "Shape keys", "The skin's shape-key values on each frame (keyframes, drivers), played through "
                                     "the fit; the muscle contraction sliders add on top. Without a fit, the muscle "
                                     "contractions alone"),
        ('MUSCLES', "Muscles only", "Only the muscle contraction sliders; the shape keys are ignored")))
    actuation: EnumProperty(name="Actuation", items=(
        ('PHACE', "Phace", "Muscles and flesh simulated (paper 000): contact, dynamics, maps and the muscle "
                           "sliders all take part"),
        ('VOLUMETRIC_BLENDSHAPES', "Volumetric blendshapes",
         "Each tet's shape blended from the shape keys' and solved by Projective Dynamics (paper 002): "
         "quasi-static, shape keys only, no contact, dynamics, maps or muscle sliders. The comparison model: "
         "it squashes tissue a prop pushes where Phace lets it swing away")))
    use_detail: BoolProperty(name="Detail correction", default=True,
                             description="Add back what the tet mesh cannot show of each shape key (the fit's "
                                         "residual, weighted like the shape keys); off = physics only")
    use_skin_filter: BoolProperty(name="Skin filter", default=True,
                                  description="Show the shape keys plus what the physics changes about them, smoothed "
                                              "to what the tet mesh can resolve: no creases or folds finer than the "
                                              "tets, contact kept; off = the simulated skin as it is")
    use_scene_range: BoolProperty(name="Scene range", default=True)
    frame_start: IntProperty(name="Start", default=1)
    frame_end: IntProperty(name="End", default=24)
    bake_target: EnumProperty(name="Target", items=(
        ('PC2', "Mesh Cache (.pc2)", "A point cache next to the .blend, played by a Mesh Cache modifier"),
        ('SHAPE_KEYS', "Shape key per frame", "One shape key per frame, keyed on at its frame in the "
                                              "shape keys' current action"),
        ('ACTION', "New action", "One shape key per frame, keyed in a new action of their own; the shape keys' "
                                 "previous action comes back when the bake is replaced")))
    previous_key_action: PointerProperty(type=bpy.types.Action, description="The shape keys' action before an "
                                                                             "action bake")
    baked_target: StringProperty(description="What the last bake made (for replacing it)")
    takes: CollectionProperty(type=FACE_PHYSICS_PG_take)
    take_index: IntProperty(name="Take")
    shown_take: StringProperty(description="The take the object shows now")
    bake_actions: CollectionProperty(type=FACE_PHYSICS_PG_action_choice)
    bake_action_index: IntProperty()
    # Previews: what the colour attribute shown last means (viewport_previews.py)
    preview_legend: StringProperty(description="The colour scale of the preview shown on the skin")


class FACE_PHYSICS_PG_job(bpy.types.PropertyGroup):
    running: BoolProperty()
    description: StringProperty()
    progress: FloatProperty(subtype='FACTOR', min=0.0, max=1.0)
    message: StringProperty()
    last_error: StringProperty()


CLASSES = (FACE_PHYSICS_PG_muscle, FACE_PHYSICS_PG_name_mapping, FACE_PHYSICS_PG_collider,
           FACE_PHYSICS_PG_fit_shape, FACE_PHYSICS_PG_take, FACE_PHYSICS_PG_action_choice, FACE_PHYSICS_PG_object,
           FACE_PHYSICS_PG_job)


def register():
    for cls in CLASSES:
        bpy.utils.register_class(cls)
    bpy.types.Object.face_physics = PointerProperty(type=FACE_PHYSICS_PG_object)
    bpy.types.WindowManager.face_physics_job = PointerProperty(type=FACE_PHYSICS_PG_job)


def unregister():
    del bpy.types.WindowManager.face_physics_job
    del bpy.types.Object.face_physics
    for cls in reversed(CLASSES):
        bpy.utils.unregister_class(cls)
