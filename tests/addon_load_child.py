"""Child process of tests/test_addon_blender.py: a job is running when another file is opened,
then when the add-on is disabled; writes whether its process was left behind to a JSON report."""
import json
import os
import sys

import bpy
import addon_utils  # noqa: E402  (only importable once bpy is)

report = sys.argv[1]
sys.path.insert(0, os.getcwd())
addon_utils.enable("blender_addon", default_set=True, handle_error=None)
from blender_addon import job_runner  # noqa: E402

SLEEPER = [sys.executable, "-c", "import time; time.sleep(120)"]


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


results = {}
job = job_runner.Job("sleeping solver", SLEEPER)
pid = job.process.process.pid
results["alive_before"] = alive(pid)
bpy.ops.wm.read_homefile(use_empty=True)                 # another file: load_pre stops the job
results["alive_after_load"] = alive(pid)
results["job_after_load"] = job_runner.current_job() is not None
results["running_flag_after_load"] = bool(bpy.context.window_manager.face_physics_job.running)
job = job_runner.Job("sleeping solver", SLEEPER)
pid = job.process.process.pid
addon_utils.disable("blender_addon", default_set=True)   # disabling stops it too
results["alive_after_disable"] = alive(pid)
with open(report, "w") as stream:
    json.dump(results, stream)
