"""Build Correctives from Blender: the `correctives` job on the active skin (docs/correctives.md).

The job simulates samples of the fitted model and fits corrective shapes to them; this module
exports the rig, hands the job the model, the fit and the samples solved by earlier builds, and
after the job keeps the samples (whatever the outcome: a cancelled or failed build leaves what it
solved for the next one) and, when it succeeded, installs CORR.npz beside the .blend and adds
its corrective keys (corrective_keys.py). No solver import: the solver runs in its own process.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

from . import corrective_keys, job_files, preferences, scene_export, solver_environment, storage, workflow
from .job_runner import Job
from .preflight import ERROR, Finding

DEFAULT_THRESHOLD_MM = 0.5          # the solver's default (solver/correctives/fitting.py)


def _preflight(context, obj):
    findings = workflow.fit_preflight(context, obj)
    if not workflow.fit_file(obj):
        findings.append(Finding(ERROR, "no fit: press Fit Shape Keys first (correctives are simulated through the "
                                       "fitted muscles and jaw)"))
    return findings


def pairs_from_text(text: str) -> list:
    """'jawOpen:mouthSmile_L, mouthFunnel:mouthPucker' as [[a, b], …]; the solver's request checks
    each pair (two different fitted keys, none twice) and names what is wrong."""
    return [[name.strip() for name in item.split(":")] for item in text.split(",") if item.strip()]


def start_correctives_job(operator, context, obj, scope: str = 'ALL', keys_text: str = "",
                          threshold_mm: float = DEFAULT_THRESHOLD_MM, processes: Optional[int] = None,
                          pairs: Sequence = ()):
    """Export the rig and start the correctives job; the scene is not changed here."""
    samples = storage.correctives_samples_path(obj)    # fails early, with the reason, when the .blend is unsaved
    if workflow.report_findings(operator, _preflight(context, obj)):
        return None
    rig, findings = scene_export.export_rig(context, obj)
    if workflow.report_findings(operator, findings):
        return None
    keys = workflow.fit_shape_selection(obj, scope, keys_text)
    fitted = set(job_files.read_fit_shape_names(workflow.fit_file(obj)))
    missing = sorted(set(keys or ()) - fitted)
    if missing:
        raise ValueError(f"{', '.join(missing)}: not in the fit; fit them first (Fit panel) or leave them out")
    job_dir = job_files.new_job_folder()
    job_files.write_correctives_job(job_dir, workflow.model_file(obj), workflow.fit_file(obj), rig, keys,
                                    obj.face_physics.fit_processes if processes is None else processes, threshold_mm,
                                    scene_export.collision_kinds(obj), stored_samples=samples,
                                    pairs=pairs)
    count = len(fitted) if keys is None else len(keys)
    return Job(f"correctives of {count} shape key{'s' * (count != 1)}",
               solver_environment.run_job_command(preferences.solver_python(), job_dir), job_dir)


def keep_samples(obj, job) -> None:
    """The job's samples become the object's stored ones (after any outcome, before the job
    folder is removed)."""
    solved = Path(job.job_dir) / job_files.CORRECTIVES_SAMPLES
    if solved.is_dir():
        job_files.mirror_folder(solved, storage.correctives_samples_path(obj))


def apply_correctives(context, obj, job) -> list:
    """Install the succeeded job's CORR.npz beside the .blend and add its keys; returns their names."""
    keep_samples(obj, job)
    destination = storage.correctives_path(obj)
    job_files.install_file(Path(job.job_dir) / job_files.CORRECTIVES_FILE, destination)
    names, _ = corrective_keys.add_from_file(context, obj, destination)
    return names
