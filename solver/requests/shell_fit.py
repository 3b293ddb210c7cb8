"""One shell-fit request: a face rig turned into an interactive shell (SHELL.npz), checked once,
and the one way it runs (solver/shell/pipeline.py; docs/shell.md). Written atomically."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from . import fields as check

# Below a few hundred triangles the face is a handful of triangles across; above 20k the fit
# takes hours (paper 001 Table 2: 8k is already 25 minutes in C++).
TRIANGLES_RANGE = (500, 20_000)
DEFAULT_TRIANGLES = 4000
INPUT_FIELDS = ("rig",)


@dataclass(frozen=True)
class ShellFitRequest:
    rig: Path
    output: Path                    # SHELL.npz
    triangles: int = DEFAULT_TRIANGLES

    def __post_init__(self):
        object.__setattr__(self, "rig", check.input_file(self.rig, "rig", "RIG.npz"))
        object.__setattr__(self, "triangles", check.whole_number(self.triangles, "triangles", *TRIANGLES_RANGE))
        object.__setattr__(self, "output", check.output_file(self.output, "output", ".npz", (self.rig,)))


def run_shell_fit(request: ShellFitRequest, report) -> dict:
    """Build and fit the shell and write SHELL.npz; the summary: outputs, sizes, fit numbers, message."""
    from ..rig import load_rig
    from ..shell.pipeline import build_shell
    from ..shell.settings import ShellSettings
    from ..shell.shell_file import save_shell
    rig = load_rig(request.rig)
    if len(rig.shape_key_names) == 0:
        raise check.RequestError("rig", "the rig has no shape keys, so there is nothing to fit the stiffness to",
                                 "add shape keys (ARKit expressions) to the mesh")
    model, summary = build_shell(rig, settings=ShellSettings(triangles=request.triangles),
                                 progress=lambda message: report.progress(message))
    save_shell(request.output, model)
    return {"outputs": {"shell": str(request.output)}, **summary,
            "message": f"shell of {summary['coarse_triangles']} triangles fitted to {summary['fitted_shapes']} shape "
                       f"keys in {summary['seconds']['total']:.0f} s; largest deviation "
                       f"{summary['max_deviation_mm']:.2f} mm ({summary['fit_stop']})"}
