"""The Bake panel's operators: bake a take, resume one, bake a list of actions, and show,
rename or free takes (takes.py; the takes on disk: take_folders.py)."""

import bpy
from bpy.props import StringProperty

from . import takes, workflow
from .job_operator import SolverJobOperator, built_model_poll, first_refusal, solver_poll
from .job_runner import current_job
from .take_folders import TakeError
from .workflow import skin_object


class _BakeJobOperator(SolverJobOperator):
    """A bake's job: its frames show as they arrive, and a cancel or failure keeps them in the take."""

    def tick(self, context, job):
        workflow.follow_bake(job)

    def ended(self, context, job):
        workflow.end_bake(job)

    def apply(self, context, job):
        """Steps (stepwise.py): a shape-key take is put on the object a frame a step."""
        frames = yield from workflow.apply_bake_steps(job)
        self.report({'INFO'}, f"Face Physics: {job.take.name if job.take else 'bake'}: {frames} frames "
                              f"({job.result.get('message', '')})")


class FACE_PHYSICS_OT_bake(_BakeJobOperator, bpy.types.Operator):
    """Simulate the frame range into a new take and show it as the chosen target; the frames
    appear as they are solved, and a cancelled bake keeps them for Resume"""
    bl_idname = "face_physics.bake"
    bl_label = "Bake"
    bl_options = {'UNDO'}

    @classmethod
    def poll(cls, context):
        return built_model_poll(cls, context)

    def start(self, context):
        return workflow.start_bake_job_steps(self, context, skin_object(context))


class FACE_PHYSICS_OT_resume_take(_BakeJobOperator, bpy.types.Operator):
    """Continue the selected cancelled or failed take from its last solved frame, with the inputs
    and settings it was started with"""
    bl_idname = "face_physics.resume_take"
    bl_label = "Resume"
    bl_options = {'UNDO'}

    @classmethod
    def poll(cls, context):
        if not solver_poll(cls, context):
            return False
        settings = skin_object(context).face_physics
        item = settings.takes[settings.take_index] if 0 <= settings.take_index < len(settings.takes) else None
        return first_refusal(cls, ((item is not None, "Select a take in the Takes list"),
                                   (item is None or item.resumable,
                                    "Only a cancelled or failed take with solved frames can be resumed "
                                    "(a shell take has no resume: bake it again, it is quick)")))

    def start(self, context):
        obj = skin_object(context)
        return workflow.resume_bake_job(self, context, obj, takes.selected_take(obj))


class FACE_PHYSICS_OT_bake_actions(_BakeJobOperator, bpy.types.Operator):
    """Bake every ticked action of the list into a take of its own, one after the other (the
    shape keys play each action while it is sampled; their own action is kept)"""
    bl_idname = "face_physics.bake_actions"
    bl_label = "Bake All Actions"
    bl_options = {'UNDO'}

    @classmethod
    def poll(cls, context):
        if not built_model_poll(cls, context):
            return False
        ticked = [item for item in skin_object(context).face_physics.bake_actions if item.selected]
        return first_refusal(cls, ((bool(ticked), "Tick actions in the list (Refresh lists them)"),))

    def _next_action(self):
        while self._queue:
            action = bpy.data.actions.get(self._queue.pop(0))
            if action is not None:
                return action
            self.report({'WARNING'}, "an action of the list is gone; skipped")
        return None

    def start(self, context):
        obj = skin_object(context)
        self._object_name = obj.name
        self._queue = [item.name for item in obj.face_physics.bake_actions if item.selected]
        return self.next_job(context)

    def next_job(self, context):
        action = self._next_action()
        obj = bpy.data.objects.get(self._object_name)
        if action is None or obj is None:
            return None
        return workflow.start_bake_job_steps(self, context, obj, action=action)


class _TakeOperator:
    bl_options = {'REGISTER', 'UNDO'}

    @classmethod
    def poll(cls, context):
        obj = skin_object(context)
        settings = obj.face_physics if obj is not None else None
        return first_refusal(cls, (
            (obj is not None, "Select the skin: a mesh object"),
            (settings is None or 0 <= settings.take_index < len(settings.takes), "Select a take in the Takes list"),
            (current_job() is None, "A Face Physics job is running")))

    def execute(self, context):
        obj = skin_object(context)
        try:
            self.act(obj, takes.selected_take(obj))
        except (TakeError, OSError, KeyError) as error:
            self.report({'ERROR'}, str(error))
            return {'CANCELLED'}
        return {'FINISHED'}


class FACE_PHYSICS_OT_show_take(_TakeOperator, bpy.types.Operator):
    """Show the selected take on the object (its cache, or its shape keys when baked to shape keys)"""
    bl_idname = "face_physics.show_take"
    bl_label = "Show Take"

    def act(self, obj, take):
        frames = takes.show(obj, take)
        self.report({'INFO'}, f"Face Physics: showing {take.name} ({frames} frames, {take.status})")


class FACE_PHYSICS_OT_rename_take(_TakeOperator, bpy.types.Operator):
    """Rename the selected take (and its folder); a name another take has is refused"""
    bl_idname = "face_physics.rename_take"
    bl_label = "Rename Take"

    new_name: StringProperty(name="Name")

    def invoke(self, context, event):
        settings = skin_object(context).face_physics
        self.new_name = settings.takes[settings.take_index].name
        return context.window_manager.invoke_props_dialog(self)

    def act(self, obj, take):
        takes.rename(obj, take, self.new_name)


class FACE_PHYSICS_OT_free_take(_TakeOperator, bpy.types.Operator):
    """Delete the selected take from disk (Free Bake); if the object shows it, the bake is removed
    from the object too"""
    bl_idname = "face_physics.free_take"
    bl_label = "Free Take"

    def invoke(self, context, event):
        return context.window_manager.invoke_confirm(self, event)

    def act(self, obj, take):
        takes.free(obj, take)
        self.report({'INFO'}, f"Face Physics: {take.name} deleted")


class FACE_PHYSICS_OT_refresh_takes(bpy.types.Operator):
    """Read the takes again from the folder beside the .blend, and list the shape-key actions
    Bake All Actions can bake"""
    bl_idname = "face_physics.refresh_takes"
    bl_label = "Refresh"

    @classmethod
    def poll(cls, context):
        return first_refusal(cls, ((skin_object(context) is not None, "Select the skin: a mesh object"),))

    def execute(self, context):
        obj = skin_object(context)
        takes.refresh(obj)
        takes.refresh_action_list(obj)
        return {'FINISHED'}


CLASSES = (FACE_PHYSICS_OT_bake, FACE_PHYSICS_OT_resume_take, FACE_PHYSICS_OT_bake_actions, FACE_PHYSICS_OT_show_take,
           FACE_PHYSICS_OT_rename_take, FACE_PHYSICS_OT_free_take, FACE_PHYSICS_OT_refresh_takes)
