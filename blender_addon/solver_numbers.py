"""The numbers the add-on shares with the solver: each map setting's default and range, the
multipliers a stiffness or density map may reach, the muscle contraction range, and the zombie
and Bell's-palsy presets.

They are read from `solver/physics/settings.json` in the solver source the add-on ships
with (`solver_bundle/`, written by `build.py addon`) or sits beside in a checkout — the one file
the solver reads them from too — because the add-on never imports the solver (it runs in a
child process). Panels take their slider limits from here, so no value the artist can set is
one the solver refuses.
"""
import json

from . import solver_environment

NUMBERS_FILE = ("solver", "physics", "settings.json")


def _read_numbers() -> dict:
    source = solver_environment.solver_source_dir()
    if source is None:
        raise RuntimeError("Face Physics: the solver source is missing from the add-on (solver_bundle/); "
                           "reinstall the add-on from its zip")
    return json.loads(source.joinpath(*NUMBERS_FILE).read_text(encoding="utf-8"))


NUMBERS = _read_numbers()


def default(setting: str):
    """The solver's default of a map setting (fat_scale, fat_softening, diffusion_steps, …)."""
    return NUMBERS["settings"][setting]["default"]


def limits(setting: str) -> tuple:
    """(low, high): the range the solver accepts for a map setting."""
    return tuple(NUMBERS["settings"][setting]["range"])


PAINTED_MULTIPLIER_LIMITS = tuple(NUMBERS["painted_multiplier_range"])
MUSCLE_CONTRACTION_LIMITS = tuple(NUMBERS["muscle_contraction_range"])
PALSY_SUFFIXES = {'LEFT': NUMBERS["presets"]["bells_palsy"]["left_suffix"],
                  'RIGHT': NUMBERS["presets"]["bells_palsy"]["right_suffix"]}
