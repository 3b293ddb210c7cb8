"""The painted lips, in the Collisions panel: the vertex groups FP_lip_upper and FP_lip_lower
tell lip contact which skin is which lip (weight above 0.5; scene_export.lip_vertex_arrays).
Without them the solver finds the lips by itself.

Start From Solver's Lips asks the solver for the lips it would find (`python -m solver lips`)
and writes them into the two groups (Replace With Solver's Lips, after a confirmation, when they
are painted already), to be corrected by hand: Assign / Remove / Select act on
the selected vertices in Edit Mode through Blender's own vertex-group operators, so undo and the
weight in the tool settings work as usual. Use Solver's Lips removes the two groups (after a
confirmation) and lip contact finds the lips again. Groups are replaced whole (new groups filled,
then the old ones removed and the new ones renamed), never edited vertex by vertex.
"""
from __future__ import annotations

import bpy
from bpy.props import BoolProperty, EnumProperty

from . import job_files, preferences, solver_environment
from .job_operator import SolverJobOperator, built_model_poll, first_refusal
from .job_runner import Job
from .scene_export import LOWER_LIP_GROUP, UPPER_LIP_GROUP
from .workflow import model_file, skin_object

GROUPS = {'UPPER': UPPER_LIP_GROUP, 'LOWER': LOWER_LIP_GROUP}


def lips_painted(obj) -> bool:
    """Whether either lip group exists (the solver then uses the painted lips, or refuses one alone)."""
    return any(obj.vertex_groups.get(name) is not None for name in GROUPS.values())


def replace_lip_groups(obj, upper, lower) -> None:
    """Make FP_lip_upper / FP_lip_lower hold exactly these vertices at weight 1."""
    made = []
    for name, vertices in ((UPPER_LIP_GROUP, upper), (LOWER_LIP_GROUP, lower)):
        group = obj.vertex_groups.new(name=name + ".new")
        group.add([int(v) for v in vertices], 1.0, 'REPLACE')
        made.append((name, group))
    for name, group in made:
        old = obj.vertex_groups.get(name)
        if old is not None:
            obj.vertex_groups.remove(old)
        group.name = name


def draw_lips(layout, obj) -> None:
    """The Lips box of the Collisions panel. It does not count the painted vertices: that reads
    every vertex's groups in Python, too slow for every redraw of the sidebar."""
    box = layout.box()
    present = {name: obj.vertex_groups.get(name) is not None for name in GROUPS.values()}
    painted = any(present.values())
    if not painted:
        box.label(text="Lips: found by the solver", icon='INFO')
    else:
        for name, exists in present.items():
            row = box.row()
            row.alert = not exists
            row.label(text=name if exists else f"{name}: missing (both are needed)", icon='GROUP_VERTEX')
    box.operator("face_physics.lips_replace" if painted else "face_physics.lips_from_solver", icon='IMPORT')
    if obj.mode == 'EDIT':
        for lip, label in (('UPPER', "Upper lip"), ('LOWER', "Lower lip")):
            row = box.row(align=True)
            row.label(text=label)
            for action, icon in (('ASSIGN', 'ADD'), ('REMOVE', 'REMOVE'), ('SELECT', 'RESTRICT_SELECT_OFF')):
                button = row.operator("face_physics.lip_group_edit", text="", icon=icon)
                button.lip, button.action = lip, action
    elif painted:
        box.label(text="Edit Mode: assign or remove selected vertices")
    if painted:
        box.operator("face_physics.lips_clear", icon='X')


class FACE_PHYSICS_OT_lips_from_solver(SolverJobOperator, bpy.types.Operator):
    """Paint FP_lip_upper and FP_lip_lower with the lips the solver finds by itself, to correct by
    hand (replaces those two groups after a confirmation; no other group is touched)"""
    bl_idname = "face_physics.lips_from_solver"
    bl_label = "Start From Solver's Lips"
    bl_options = {'UNDO'}             # not REGISTER: see SolverJobOperator

    replace: BoolProperty(name="Replace", options={'SKIP_SAVE'},
                          description="Replace lip groups painted before (Replace With Solver's Lips asks first)")

    @classmethod
    def poll(cls, context):
        return built_model_poll(cls, context) and first_refusal(cls, (
            (context.mode == 'OBJECT', "Leave Edit Mode first (the groups are written in Object Mode)"),))

    def start(self, context):
        obj = skin_object(context)
        if not self.replace and lips_painted(obj):
            raise ValueError(f"{UPPER_LIP_GROUP} / {LOWER_LIP_GROUP} are painted already: use Replace With "
                             f"Solver's Lips to replace them")
        self._object_name = obj.name
        job_dir = job_files.new_job_folder()
        job_files.write_lips_job(job_dir, model_file(obj))
        return Job("finding the lips", solver_environment.run_job_command(preferences.solver_python(), job_dir),
                   job_dir)

    def apply(self, context, job):
        obj = bpy.data.objects[self._object_name]
        upper, lower = job_files.read_lips(job.job_dir)
        if len(obj.data.vertices) <= max(upper.max(initial=0), lower.max(initial=0)):
            raise ValueError("the model was built from another mesh; build it again")
        replace_lip_groups(obj, upper, lower)
        self.report({'INFO'}, f"Face Physics: {len(upper)} upper and {len(lower)} lower lip vertices painted; "
                              f"correct them in Edit Mode (Collisions panel)")


class FACE_PHYSICS_OT_lips_replace(bpy.types.Operator):
    """Replace the painted lip groups with the lips the solver finds by itself (asks first)"""
    bl_idname = "face_physics.lips_replace"
    bl_label = "Replace With Solver's Lips"
    bl_options = {'INTERNAL'}

    @classmethod
    def poll(cls, context):
        return FACE_PHYSICS_OT_lips_from_solver.poll(context)

    def invoke(self, context, event):
        return context.window_manager.invoke_confirm(
            self, event, title="Replace the painted lips?",
            message=f"{UPPER_LIP_GROUP} and {LOWER_LIP_GROUP} are replaced by the solver's lips",
            confirm_text="Replace")

    def execute(self, context):
        return bpy.ops.face_physics.lips_from_solver('INVOKE_DEFAULT', replace=True)


class FACE_PHYSICS_OT_lip_group_edit(bpy.types.Operator):
    """Assign the selected vertices to a lip, remove them from it, or select the lip"""
    bl_idname = "face_physics.lip_group_edit"
    bl_label = "Edit Lip"
    bl_options = {'REGISTER', 'UNDO'}

    lip: EnumProperty(items=(('UPPER', "Upper", ""), ('LOWER', "Lower", "")))
    action: EnumProperty(items=(('ASSIGN', "Assign", "Put the selected vertices on this lip (and off the other)"),
                                ('REMOVE', "Remove", "Take the selected vertices off this lip"),
                                ('SELECT', "Select", "Select this lip's vertices")))

    @classmethod
    def description(cls, context, properties):
        return {'ASSIGN': "Put the selected vertices on this lip (and off the other one)",
                'REMOVE': "Take the selected vertices off this lip",
                'SELECT': "Select this lip's vertices"}[properties.action]

    @classmethod
    def poll(cls, context):
        obj = skin_object(context)
        return first_refusal(cls, ((obj is not None, "Select the skin"),
                                   (context.mode == 'EDIT_MESH', "Enter Edit Mode and select vertices")))

    def execute(self, context):
        obj = skin_object(context)
        name, other = GROUPS[self.lip], GROUPS['LOWER' if self.lip == 'UPPER' else 'UPPER']
        group = obj.vertex_groups.get(name)
        if group is None:
            if self.action != 'ASSIGN':
                self.report({'ERROR'}, f"{name} does not exist yet: assign vertices to it first")
                return {'CANCELLED'}
            group = obj.vertex_groups.new(name=name)
        active = obj.vertex_groups.active_index
        try:
            if self.action == 'ASSIGN' and obj.vertex_groups.get(other) is not None:
                obj.vertex_groups.active_index = obj.vertex_groups[other].index
                bpy.ops.object.vertex_group_remove_from()
            obj.vertex_groups.active_index = group.index
            operation = {'ASSIGN': bpy.ops.object.vertex_group_assign,
                         'REMOVE': bpy.ops.object.vertex_group_remove_from,
                         'SELECT': bpy.ops.object.vertex_group_select}[self.action]
            if self.action == 'ASSIGN':
                # A lip is a yes/no choice: full weight, whatever the brush weight is.
                weight, context.scene.tool_settings.vertex_group_weight = \
                    context.scene.tool_settings.vertex_group_weight, 1.0
                try:
                    operation()
                finally:
                    context.scene.tool_settings.vertex_group_weight = weight
            else:
                operation()
        finally:
            obj.vertex_groups.active_index = active
        return {'FINISHED'}


class FACE_PHYSICS_OT_lips_clear(bpy.types.Operator):
    """Delete FP_lip_upper and FP_lip_lower: lip contact finds the lips by itself again"""
    bl_idname = "face_physics.lips_clear"
    bl_label = "Use Solver's Lips"
    bl_options = {'REGISTER', 'UNDO'}

    @classmethod
    def poll(cls, context):
        obj = skin_object(context)
        return first_refusal(cls, (
            (obj is not None, "Select the skin"),
            (obj is not None and lips_painted(obj),
             "No painted lips: the solver finds the lips by itself"),
            (context.mode == 'OBJECT', "Leave Edit Mode first")))

    def invoke(self, context, event):
        return context.window_manager.invoke_confirm(self, event, title="Delete the painted lips?",
                                                     message="The two lip groups are deleted",
                                                     confirm_text="Delete")

    def execute(self, context):
        obj = skin_object(context)
        for name in GROUPS.values():
            group = obj.vertex_groups.get(name)
            if group is not None:
                obj.vertex_groups.remove(group)
        self.report({'INFO'}, "Face Physics: the lips are found by the solver again")
        return {'FINISHED'}


CLASSES = (FACE_PHYSICS_OT_lips_from_solver, FACE_PHYSICS_OT_lips_replace, FACE_PHYSICS_OT_lip_group_edit,
           FACE_PHYSICS_OT_lips_clear)
