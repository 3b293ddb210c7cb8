"""The numbers the add-on shares with the solver: each map setting's default and range, the
multipliers a stiffness or density map may reach, the muscle contraction range (and the one
conversion of a muscle slider to a contraction), and the zombie and Bell's-palsy presets.

They are read from `solver/physics/settings.json` in the solver source the add-on ships
with (`solver_bundle/`, written by `build.py addon`) or sits beside in a checkout — the one file
the solver reads them from too — because the add-on never imports the solver (it runs in a
child process). Panels take their slider limits from here, so no value the artist can set is
one the solver refuses.
"""
import json
import math

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
# The contraction γ a muscle slider at 1 asks for (S = diag(1/γ, √γ, √γ) along the fibre).
FULL_MUSCLE_CONTRACTION = float(NUMBERS["full_muscle_contraction"])
# A slider may go past full contraction up to the solver's limit.
MAX_MUSCLE_ACTIVATION = math.log(MUSCLE_CONTRACTION_LIMITS[1]) / math.log(FULL_MUSCLE_CONTRACTION)
PALSY_SUFFIXES = {'LEFT': NUMBERS["presets"]["bells_palsy"]["left_suffix"],
                  'RIGHT': NUMBERS["presets"]["bells_palsy"]["right_suffix"]}


def contraction_from_activation(activation):
    """A muscle slider (0 = rest, 1 = full contraction) as the solver's contraction γ.

    γ = γ_full ** slider: equal slider steps are equal steps in log γ, the variable the fit works
    in, so the slider feels even from rest to full. Takes a float or a numpy array."""
    return FULL_MUSCLE_CONTRACTION ** activation


def activation_from_contraction(contraction: float) -> float:
    """The slider value of a contraction γ (> 0): the inverse of `contraction_from_activation`."""
    return math.log(contraction) / math.log(FULL_MUSCLE_CONTRACTION)
