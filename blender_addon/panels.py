"""The "Face Physics" tab of the 3D View sidebar. Panels only draw; operators do the work."""
from __future__ import annotations

import bpy

from . import fat_preview, muscle_overlay
from .lip_groups import draw_lips
from .muscle_controls import draw_muscles
from .preset_operators import draw_tissue_presets
from .preview_operators import draw_preview_legend
from .preferences import draw_solver_status
from .ui_text import wrap
from .job_runner import current_job

CATEGORY = "Face Physics"


def draw_job_status(layout, context) -> None:
    state = context.window_manager.face_physics_job
    if current_job() is not None and state.running:
        box = layout.box()
        box.label(text=f"{state.description}: {state.message}", icon='TIME')
        if current_job().frames_total:
            box.label(text=current_job().progress_text())
        row = box.row()
        row.prop(state, "progress", text="Progress", slider=True)
        row.operator("face_physics.cancel_job", icon='CANCEL')
    elif state.last_error:
        box = layout.box()
        box.alert = True
        for line in wrap(f"Last job failed: {state.last_error}", 48):
            box.label(text=line)


class _FacePhysicsPanel:
    bl_space_type = 'VIEW_3D'
    bl_region_type = 'UI'
    bl_category = CATEGORY

    @classmethod
    def poll(cls, context):
        obj = context.active_object
        return obj is not None and obj.type == 'MESH'


class FACE_PHYSICS_UL_names(bpy.types.UIList):
    def draw_item(self, context, layout, data, item, icon, active_data, active_property, index=0, flt_flag=0):
        row = layout.row(align=True)
        row.label(text=item.name)
        row.prop(item, "arkit_name", text="")


def _error_text(mean: float, p95: float, worst: float) -> str:
    return f"{mean:.2f} / {p95:.2f} / {worst:.2f}"


class FACE_PHYSICS_UL_fit_shapes(bpy.types.UIList):
    """Shape keys with a tick for Fit Selected and, once fitted, mean / 95th / max error in mm."""

    def draw_item(self, context, layout, data, item, icon, active_data, active_property, index=0, flt_flag=0):
        row = layout.row(align=True)
        row.alert = item.worst
        row.prop(item, "selected", text="")
        label = item.name if item.key_name in ("", item.name) else f"{item.name} ({item.key_name})"
        if item.context:
            label += f" on {item.context}"
        split = row.split(factor=0.58, align=True)
        # The mirror icon marks a fit started from its partner's fit, reflected.
        split.label(text=label, icon='MOD_MIRROR' if item.start.startswith("mirror:") else 'NONE')
        if not item.fitted:
            split.label(text="not fitted")
        elif item.status != "fitted":
            split.label(text="neutral", icon='INFO')
        else:
            split.label(text=_error_text(item.error_mean_mm, item.error_p95_mm, item.error_max_mm),
                        icon='ERROR' if item.worst else 'NONE')


class FACE_PHYSICS_UL_colliders(bpy.types.UIList):
    def draw_item(self, context, layout, data, item, icon, active_data, active_property, index=0, flt_flag=0):
        layout.prop(item, "collider", text="")


class VIEW3D_PT_face_physics_model(_FacePhysicsPanel, bpy.types.Panel):
    bl_label = "Model"

    @classmethod
    def poll(cls, context):
        return True

    def draw(self, context):
        layout = self.layout
        if draw_solver_status(layout, context):
            return
        draw_job_status(layout, context)
        obj = context.active_object
        if obj is None or obj.type != 'MESH':
            layout.label(text="Select the skin: a mesh with ARKit shape keys", icon='INFO')
            layout.operator("face_physics.import_rig", icon='IMPORT')
            return
        settings = obj.face_physics
        layout.label(text=f"Skin: {obj.name}", icon='MESH_DATA')
        column = layout.column(align=True)
        for name in ("teeth_object", "lower_teeth_object", "skull_object", "jaw_object", "head_object"):
            column.prop(settings, name)
        layout.prop(settings, "target_tets")
        row = layout.row(align=True)
        row.operator("face_physics.build", icon='MOD_PHYSICS')
        row.operator("face_physics.check", icon='VIEWZOOM', text="")
        if settings.model_path:
            box = layout.box()
            box.label(text=f"{settings.model_tets} tets, {settings.model_nodes} nodes, "
                           f"{len(settings.muscles)} muscles")
            box.label(text=settings.model_path, icon='FILE')
            shown = muscle_overlay.find_overlay(obj) is not None
            box.operator("face_physics.muscle_overlay", text="Hide Muscles" if shown else "Show Muscles",
                         icon='HIDE_OFF' if shown else 'HIDE_ON', depress=shown)
        else:
            layout.label(text="No model yet: press Build", icon='INFO')
        if obj.data.shape_keys is not None:
            layout.label(text="Shape-key name mapping (non-ARKit names):")
            layout.template_list("FACE_PHYSICS_UL_names", "", settings, "name_mappings", settings,
                                 "name_mapping_index", rows=2)
            row = layout.row(align=True)
            row.operator("face_physics.map_shape_key_names", icon='SORTALPHA')
            row.operator_menu_enum("face_physics.apply_naming_preset", "convention", text="Naming Preset",
                                   icon='PRESET')


class VIEW3D_PT_face_physics_fit(_FacePhysicsPanel, bpy.types.Panel):
    bl_label = "Fit"
    bl_options = {'DEFAULT_CLOSED'}

    def draw(self, context):
        layout = self.layout
        obj = context.active_object
        settings = obj.face_physics
        draw_job_status(layout, context)
        job = current_job()
        if job is not None and job.finished_shapes:
            box = layout.box()
            box.label(text=f"{job.description}: {len(job.finished_shapes)} done", icon='TIME')
            column = box.column(align=True)
            for shape in job.finished_shapes[-8:]:
                errors = shape.get("error_mm") or [0.0, 0.0, 0.0]
                column.label(text=f"{shape['shape']}: {_error_text(*errors)} mm")
        if obj.data.shape_keys is None:
            layout.label(text="The skin has no shape keys to fit", icon='INFO')
            return
        row = layout.row()
        row.label(text="Shape key")
        row.label(text="mean / 95th / max mm")
        row = layout.row()
        row.template_list("FACE_PHYSICS_UL_fit_shapes", "", settings, "fit_shapes", settings, "fit_index", rows=4)
        column = row.column(align=True)
        column.operator("face_physics.fit_list", text="", icon='FILE_REFRESH').action = 'UPDATE'
        column.operator("face_physics.fit_list", text="", icon='CHECKBOX_HLT').action = 'SELECT_ALL'
        column.operator("face_physics.fit_list", text="", icon='CHECKBOX_DEHLT').action = 'SELECT_NONE'
        row = layout.row(align=True)
        row.operator("face_physics.fit", text="Fit All", icon='CON_KINEMATIC').scope = 'ALL'
        row.operator("face_physics.fit", text="Fit Selected").scope = 'SELECTED'
        layout.prop(settings, "fit_processes")
        layout.operator("face_physics.fit_error_preview", icon='COLOR')
        draw_preview_legend(layout, obj)
        fitted = [item for item in settings.fit_shapes if item.fitted]
        if settings.fit_path:
            box = layout.box()
            box.label(text=f"{len(fitted)} shape keys fitted", icon='CHECKMARK')
            box.label(text=settings.fit_path, icon='FILE')
            worst = next((item for item in fitted if item.worst), None)
            if worst is not None:
                row = box.row()
                row.alert = worst.error_mean_mm > 1.0
                row.label(text=f"Worst: {worst.name}, mean {worst.error_mean_mm:.2f} mm")
        elif settings.model_path:
            layout.label(text="No fit: bakes follow the muscle sliders", icon='INFO')
        _draw_corrective_keys(layout, obj)


def _draw_corrective_keys(layout, obj) -> None:
    """Corrective shape keys from a CORR.npz (corrective_operators.py, docs/correctives.md)."""
    from .corrective_keys import our_key_names
    box = layout.box()
    count = len(our_key_names(obj))
    box.label(text=f"Corrective keys: {count}" if count else "Corrective keys: none", icon='SHAPEKEY_DATA')
    box.operator("face_physics.build_correctives", text="Build Correctives (ticked keys)", icon='MOD_PHYSICS')
    row = box.row(align=True)
    row.operator("face_physics.add_corrective_keys", text="Add…", icon='IMPORT')
    row.operator("face_physics.remove_corrective_keys", text="Remove", icon='X')


class VIEW3D_PT_face_physics_muscles(_FacePhysicsPanel, bpy.types.Panel):
    bl_label = "Muscles"

    def draw(self, context):
        layout = self.layout
        obj = context.active_object
        settings = obj.face_physics
        if not len(settings.muscles):
            layout.label(text="Build the model to list its muscles", icon='INFO')
            return
        draw_muscles(layout, settings)
        row = layout.row(align=True)
        row.label(text="Bell's palsy:")
        row.operator("face_physics.palsy_preset", text="Left").side = 'LEFT'
        row.operator("face_physics.palsy_preset", text="Right").side = 'RIGHT'
        row.operator("face_physics.palsy_preset", text="Clear").side = 'NONE'
        _map_row(layout, obj, "paralysis_group", 'paralysis_group')
        row = layout.row(align=True)
        row.operator("face_physics.map_preview", text="Preview Paralysis", icon='COLOR').kind = 'PARALYSIS'
        shown = muscle_overlay.find_overlay(obj) is not None
        row.operator("face_physics.muscle_overlay", text="Hide Muscles" if shown else "Show Muscles",
                     icon='HIDE_OFF' if shown else 'HIDE_ON', depress=shown)
        draw_preview_legend(layout, obj)


def _map_row(layout, obj, prop, field):
    row = layout.row(align=True)
    row.prop_search(obj.face_physics, prop, obj, "vertex_groups")
    create = row.operator("face_physics.paint_map", text="", icon='ADD')
    create.field, create.create = field, True
    edit = row.operator("face_physics.paint_map", text="", icon='BRUSH_DATA')
    edit.field, edit.create = field, False


class VIEW3D_PT_face_physics_fat(_FacePhysicsPanel, bpy.types.Panel):
    bl_label = "Fat"
    bl_options = {'DEFAULT_CLOSED'}

    def draw(self, context):
        layout = self.layout
        obj = context.active_object
        settings = obj.face_physics
        draw_job_status(layout, context)
        draw_tissue_presets(layout)
        _map_row(layout, obj, "fat_group", 'fat_group')
        layout.prop(settings, "fat_scale", slider=True)
        layout.prop(settings, "fat_softening", slider=True)
        layout.prop(settings, "diffusion_spread_mm")
        row = layout.row(align=True)
        row.operator("face_physics.fat_preview", icon='SHADING_RENDERED')
        preview = fat_preview.find_preview(obj)
        if preview is not None:
            row.prop(preview, "hide_viewport", text="", icon_only=True)
            row.operator("face_physics.fat_preview_remove", text="", icon='X')


class VIEW3D_PT_face_physics_stiffness(_FacePhysicsPanel, bpy.types.Panel):
    bl_label = "Stiffness & Mass"
    bl_options = {'DEFAULT_CLOSED'}

    def draw(self, context):
        layout = self.layout
        obj = context.active_object
        settings = obj.face_physics
        draw_tissue_presets(layout)
        _map_row(layout, obj, "stiffness_group", 'stiffness_group')
        layout.prop(settings, "stiffness_range")
        _map_row(layout, obj, "density_group", 'density_group')
        layout.prop(settings, "density_range")
        row = layout.row(align=True)
        row.operator("face_physics.map_preview", text="Preview Stiffness", icon='COLOR').kind = 'STIFFNESS'
        row.operator("face_physics.map_preview", text="Preview Density", icon='COLOR').kind = 'DENSITY'
        draw_preview_legend(layout, obj)


class VIEW3D_PT_face_physics_collisions(_FacePhysicsPanel, bpy.types.Panel):
    bl_label = "Collisions"
    bl_options = {'DEFAULT_CLOSED'}

    def draw(self, context):
        layout = self.layout
        settings = context.active_object.face_physics
        row = layout.row()
        row.prop(settings, "teeth_contact")
        row.prop(settings, "lip_contact")
        layout.label(text="Colliders (closed meshes):")
        row = layout.row()
        row.template_list("FACE_PHYSICS_UL_colliders", "", settings, "colliders", settings, "collider_index",
                          rows=2)
        column = row.column(align=True)
        column.operator("face_physics.collider_add", text="", icon='ADD').remove = False
        column.operator("face_physics.collider_add", text="", icon='REMOVE').remove = True
        row = layout.row()
        row.enabled = settings.teeth_contact
        row.prop(settings, "teeth_padding")
        layout.prop(settings, "contact_solver")
        column = layout.column()
        column.enabled = settings.lip_contact or settings.teeth_contact
        draw_lips(column, context.active_object)


class VIEW3D_PT_face_physics_dynamics(_FacePhysicsPanel, bpy.types.Panel):
    bl_label = "Dynamics"
    bl_options = {'DEFAULT_CLOSED'}

    def draw(self, context):
        layout = self.layout
        settings = context.active_object.face_physics
        layout.prop(settings, "dynamics", expand=True)
        column = layout.column()
        column.enabled = settings.dynamics == 'DYNAMIC'
        column.prop(settings, "substeps")
        layout.prop(settings, "gravity")
        layout.prop(settings, "wind_object")
        column = layout.column()
        column.enabled = settings.wind_object is None
        column.prop(settings, "wind_direction")
        column.prop(settings, "wind_speed")


class FACE_PHYSICS_UL_takes(bpy.types.UIList):
    _ICONS = {"finished": 'CHECKMARK', "running": 'TIME', "cancelled": 'PAUSE', "failed": 'ERROR'}

    def draw_item(self, context, layout, data, item, icon, active_data, active_property, index=0, flt_flag=0):
        shown = item.name == data.shown_take
        row = layout.row(align=True)
        row.label(text=item.name, icon='HIDE_OFF' if shown else self._ICONS.get(item.status, 'DOT'))
        done = item.frames if item.status == "finished" else item.frames_done
        row.label(text=f"{item.first_frame}–{item.last_frame}  {done}/{item.frames}")
        if item.warnings:
            row.label(text="", icon='ERROR')


class FACE_PHYSICS_UL_action_choices(bpy.types.UIList):
    def draw_item(self, context, layout, data, item, icon, active_data, active_property, index=0, flt_flag=0):
        layout.prop(item, "selected", text=item.name)


class VIEW3D_PT_face_physics_bake(_FacePhysicsPanel, bpy.types.Panel):
    bl_label = "Bake"

    def draw(self, context):
        layout = self.layout
        settings = context.active_object.face_physics
        draw_job_status(layout, context)
        layout.prop(settings, "use_scene_range")
        row = layout.row(align=True)
        row.enabled = not settings.use_scene_range
        row.prop(settings, "frame_start")
        row.prop(settings, "frame_end")
        layout.prop(settings, "animation_source")
        has_fit = bool(settings.fit_path)
        row = layout.row()
        row.enabled = has_fit and settings.animation_source == 'SHAPE_KEYS'
        row.prop(settings, "use_detail")
        row.prop(settings, "use_skin_filter")
        row = layout.row()
        row.enabled = has_fit and settings.animation_source == 'SHAPE_KEYS'
        row.prop(settings, "actuation")
        if settings.actuation == 'VOLUMETRIC_BLENDSHAPES':
            layout.label(text="Quasi-static shape keys only: no dynamics, maps, muscles", icon='INFO')
        if settings.animation_source == 'SHAPE_KEYS' and not has_fit:
            layout.label(text="No fit yet: the muscle sliders drive the bake", icon='INFO')
        layout.prop(settings, "bake_target")
        layout.operator("face_physics.bake", icon='RENDER_ANIMATION')
        _draw_takes(layout, settings)


def _draw_takes(layout, settings) -> None:
    """The Takes list with its actions, the selected take's details, and Bake All Actions."""
    header = layout.row()
    header.label(text="Takes", icon='SEQUENCE')
    header.operator("face_physics.refresh_takes", text="", icon='FILE_REFRESH')
    layout.template_list("FACE_PHYSICS_UL_takes", "", settings, "takes", settings, "take_index", rows=3)
    if 0 <= settings.take_index < len(settings.takes):
        item = settings.takes[settings.take_index]
        box = layout.box()
        box.label(text=f"{item.status} · {item.target} · {item.created.replace('T', ' ')[:16]}")
        if item.settings:
            box.label(text=item.settings)
        if item.seconds_per_frame:
            box.label(text=f"{item.seconds_per_frame:.2f} s per frame" + (f" · from {item.action}" if item.action
                                                                          else ""))
        for line in item.warnings.splitlines()[:3]:
            for wrapped in wrap(line, 48):
                box.label(text=wrapped, icon='ERROR')
        row = layout.row(align=True)
        row.operator("face_physics.show_take", text="Show", icon='HIDE_OFF')
        row.operator("face_physics.resume_take", text="Resume", icon='PLAY')
        row.operator("face_physics.rename_take", text="", icon='GREASEPENCIL')
        row.operator("face_physics.free_take", text="", icon='TRASH')
    if settings.bake_actions:
        layout.label(text="Actions to bake")
        layout.template_list("FACE_PHYSICS_UL_action_choices", "", settings, "bake_actions", settings,
                             "bake_action_index", rows=2)
        layout.operator("face_physics.bake_actions", icon='RENDER_ANIMATION')


CLASSES = (FACE_PHYSICS_UL_names, FACE_PHYSICS_UL_fit_shapes, FACE_PHYSICS_UL_colliders,
           FACE_PHYSICS_UL_takes, FACE_PHYSICS_UL_action_choices,
           VIEW3D_PT_face_physics_model, VIEW3D_PT_face_physics_fit, VIEW3D_PT_face_physics_muscles,
           VIEW3D_PT_face_physics_fat, VIEW3D_PT_face_physics_stiffness, VIEW3D_PT_face_physics_collisions,
           VIEW3D_PT_face_physics_dynamics, VIEW3D_PT_face_physics_bake)
