"""The muscle sliders of the Muscles panel: the list filtered by side, Mirror and Reset.

Each muscle's `activation` (0 = rest, 1 = full contraction; solver_numbers converts it to the
solver's contraction) is an ordinary animatable property, addressed by the muscle's name, so
keyframes, drivers and control rigs use it like any other:
    obj.face_physics.muscles["zygomaticus_major_L"].activation
(right-click a slider → Add Driver / Copy Data Path). A bake samples it on every frame.

Mirror and Reset set the current values. A slider that is keyframed or driven keeps what its
animation says on the next frame change, so those are left alone and named in the report.
"""
from __future__ import annotations

import bpy
from bpy.props import EnumProperty

from . import solver_numbers
from .bake import action_fcurve_collections
from .job_operator import first_refusal
from .workflow import skin_object

SIDES = ('LEFT', 'RIGHT')


def muscle_side(name: str) -> str:
    """'LEFT', 'RIGHT' (the subject's sides, by the atlas's _L/_R suffixes) or 'MIDDLE'."""
    for side in SIDES:
        if name.endswith(solver_numbers.PALSY_SUFFIXES[side]):
            return side
    return 'MIDDLE'


def mirror_name(name: str) -> str:
    """The name of the muscle on the other side (a middle muscle is its own mirror)."""
    side = muscle_side(name)
    if side == 'MIDDLE':
        return name
    other = 'RIGHT' if side == 'LEFT' else 'LEFT'
    return name[: -len(solver_numbers.PALSY_SUFFIXES[side])] + solver_numbers.PALSY_SUFFIXES[other]


def shown_on_side(name: str, side_filter: str) -> bool:
    return side_filter == 'ALL' or muscle_side(name) == side_filter


def _animated_paths(obj) -> set:
    """Data paths of obj.face_physics properties that keyframes or drivers set."""
    animation = obj.animation_data
    if animation is None:
        return set()
    paths = {driver.data_path for driver in animation.drivers}
    if animation.action is not None:
        for fcurves in action_fcurve_collections(animation.action):
            paths.update(fcurve.data_path for fcurve in fcurves)
    return {path for path in paths if path.startswith("face_physics.muscles[")}


def activation_paths(muscle, index: int) -> tuple:
    """The two spellings of a slider's data path: by name (what a driver added by hand or a
    script uses, stable when the list is rebuilt) and by index (what Insert Keyframe writes)."""
    return (f'face_physics.muscles["{muscle.name}"].activation', f'face_physics.muscles[{index}].activation')


def set_activations(obj, values: dict) -> list:
    """Set {muscle name: activation}; the names of animated sliders, left unchanged, are returned."""
    animated = _animated_paths(obj)
    skipped = []
    for index, muscle in enumerate(obj.face_physics.muscles):
        if muscle.name not in values:
            continue
        if animated.intersection(activation_paths(muscle, index)):
            skipped.append(muscle.name)
            continue
        muscle.activation = values[muscle.name]
    return skipped


def _report_skipped(operator, skipped, done: str) -> None:
    if skipped:
        operator.report({'WARNING'}, f"Face Physics: {done}; {len(skipped)} keyframed or driven sliders left to "
                                     f"their animation: {', '.join(skipped[:4])}{'…' if len(skipped) > 4 else ''}")
    else:
        operator.report({'INFO'}, f"Face Physics: {done}")


def _has_muscles(cls, context) -> bool:
    obj = skin_object(context)
    return first_refusal(cls, ((obj is not None and len(obj.face_physics.muscles) > 0,
                                "Build the model first: the muscles come from it"),))


class FACE_PHYSICS_UL_muscles(bpy.types.UIList):
    """Muscles with their paralysis toggle and activation slider, filtered by the Side choice
    (and by name with the list's own search field)."""

    def draw_item(self, context, layout, data, item, icon, active_data, active_property, index=0, flt_flag=0):
        row = layout.row(align=True)
        row.prop(item, "paralysed", text="", icon='CANCEL' if item.paralysed else 'CHECKBOX_DEHLT', emboss=False)
        row.label(text=item.name)
        row.prop(item, "activation", text="", slider=True)

    def filter_items(self, context, data, propname):
        muscles = getattr(data, propname)
        flags = bpy.types.UI_UL_list.filter_items_by_name(self.filter_name, self.bitflag_filter_item, muscles,
                                                          "name", reverse=False) or \
            [self.bitflag_filter_item] * len(muscles)
        side = data.muscle_side
        flags = [flag if shown_on_side(muscle.name, side) else 0 for flag, muscle in zip(flags, muscles)]
        order = bpy.types.UI_UL_list.sort_items_by_name(muscles, "name") if self.use_filter_sort_alpha else []
        return flags, order


class FACE_PHYSICS_OT_muscles_mirror(bpy.types.Operator):
    """Copy the sliders of one side's muscles to their partners on the other side"""
    bl_idname = "face_physics.muscles_mirror"
    bl_label = "Mirror Muscles"
    bl_options = {'REGISTER', 'UNDO'}

    direction: EnumProperty(items=(('LEFT_TO_RIGHT', "Left → Right", "The left muscles' values onto the right"),
                                   ('RIGHT_TO_LEFT', "Right → Left", "The right muscles' values onto the left")))

    @classmethod
    def poll(cls, context):
        return _has_muscles(cls, context)

    def execute(self, context):
        obj = skin_object(context)
        source = 'LEFT' if self.direction == 'LEFT_TO_RIGHT' else 'RIGHT'
        muscles = obj.face_physics.muscles
        values = {mirror_name(muscle.name): muscle.activation for muscle in muscles
                  if muscle_side(muscle.name) == source and muscles.get(mirror_name(muscle.name)) is not None}
        skipped = set_activations(obj, values)
        _report_skipped(self, skipped, f"{len(values) - len(skipped)} muscles mirrored "
                                       f"{'left → right' if source == 'LEFT' else 'right → left'}")
        return {'FINISHED'}


class FACE_PHYSICS_OT_muscles_reset(bpy.types.Operator):
    """Put the listed muscles' sliders back to rest (0): all of them, or the side the list shows"""
    bl_idname = "face_physics.muscles_reset"
    bl_label = "Reset Muscles"
    bl_options = {'REGISTER', 'UNDO'}

    @classmethod
    def poll(cls, context):
        return _has_muscles(cls, context)

    def execute(self, context):
        obj = skin_object(context)
        side = obj.face_physics.muscle_side
        values = {muscle.name: 0.0 for muscle in obj.face_physics.muscles if shown_on_side(muscle.name, side)}
        skipped = set_activations(obj, values)
        _report_skipped(self, skipped, f"{len(values) - len(skipped)} muscles at rest")
        return {'FINISHED'}


def draw_muscles(layout, settings) -> None:
    """The list with its side filter, Mirror and Reset (Muscles panel)."""
    layout.row().prop(settings, "muscle_side", expand=True)
    layout.template_list("FACE_PHYSICS_UL_muscles", "", settings, "muscles", settings, "muscle_index", rows=6)
    row = layout.row(align=True)
    row.operator("face_physics.muscles_mirror", text="L → R", icon='MOD_MIRROR').direction = 'LEFT_TO_RIGHT'
    row.operator("face_physics.muscles_mirror", text="R → L").direction = 'RIGHT_TO_LEFT'
    row.operator("face_physics.muscles_reset", text="Reset", icon='LOOP_BACK')


CLASSES = (FACE_PHYSICS_UL_muscles, FACE_PHYSICS_OT_muscles_mirror, FACE_PHYSICS_OT_muscles_reset)
