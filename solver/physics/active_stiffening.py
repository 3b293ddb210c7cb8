"""Active muscle stiffens as it contracts: the active term's μ grows with the activation.

Phace's active energy (paper 000 §4, activation.py) asks a muscle tet's deformation gradient to
reach R S with the tissue's own μ, so a contracting muscle pulls no harder than the relaxed fat
and skin around it resist. Measured on the generic ICT face (bench/muscles.py), the zygomaticus
major alone at full contraction (γ = 2) then moved the mouth corner 1.9 mm against the 14.8 mm of
the rig's mouthSmile_L key; making every muscle tet five times stiffer did not help (2.3 mm),
because the relaxed muscles around it stiffened too. Real muscle is the other way round: relaxed
it is about as soft as the tissue around it, contracted it is many times stiffer (the active
stiffness of a Hill-type muscle scales with its activation). So the active term uses

    μ_active = μ k(S),   k(S) = 1 + c q / (1 + q / q_sat),   q = ‖S − I‖²_F,

which is 1 at the neutral activation (a relaxed muscle is the tissue it sits in), flat there
(dk/dS = 0 at S = I, so small activations behave as before), reaches STIFFENING_AT_FULL at full
contraction S = diag(1/2, √2, √2) (q = 0.593) and saturates at 1 + c q_sat for the extreme
activations inverse physics can fit.

Every tet with any muscle is wholly active (corotated.TetMaterial.from_model), and stiffens
with it. With 12 at full contraction the zygomaticus alone moves ICT's mouth corner 7.98 mm
(ratio 0.54 to mouthSmile_L), the depressor 0.91 of mouthFrown_L, and the orbicularis narrows the
mouth as mouthPucker does and pushes the lips forward (bench/muscles.py). Taking k in proportion
to a tet's muscle fraction instead (fully from a quarter) stiffened less of the demo head's
zygomaticus: its pull turned from the ear (0.33 mm toward it) to straight up (0.07 mm). A
stiffly contracting muscle crushes soft tissue beside it harder than the relaxed one did; the
volume floor's barrier (volume_floor.py) keeps those tets from inverting.

k depends on S only, so in a forward frame it is a per-tet constant; inverse physics, which
varies S, gets its derivative dk/dS = 2 (dk/dq) (S − I) in activation_derivatives.py. A fit
records the STIFFENING_AT_FULL it was made with (FIT.npz `muscle_stiffening`).

numba compiles these constants into its cached callers (corotated.py, activation_derivatives.py),
whose cache is keyed by their own files: after changing one here, clear solver/physics/__pycache__.
"""
from __future__ import annotations

import numpy as np
from numba import njit

# k at full contraction, S = diag(1/2, √2, √2): q = (1/2 − 1)² + 2 (√2 − 1)².
STIFFENING_AT_FULL = 12.0
FULL_CONTRACTION_Q = 0.25 + 2.0 * (np.sqrt(2.0) - 1.0) ** 2
SATURATION_Q = 1.0
STIFFENING_SLOPE = (STIFFENING_AT_FULL - 1.0) * (1.0 + FULL_CONTRACTION_Q / SATURATION_Q) / FULL_CONTRACTION_Q


@njit(cache=True)
def stiffening_and_slope(S):
    """(k(S), dk/dq) for one symmetric activation S (3×3); dk/dS = 2 (dk/dq) (S − I)."""
    q = 0.0
    for a in range(3):
        for b in range(3):
            deviation = S[a, b] - (1.0 if a == b else 0.0)
            q += deviation * deviation
    denominator = 1.0 + q / SATURATION_Q
    return 1.0 + STIFFENING_SLOPE * q / denominator, STIFFENING_SLOPE / (denominator * denominator)


def active_stiffening(activations) -> np.ndarray:
    """k(S) for stacked activations (M,3,3) → (M,)."""
    S = np.asarray(activations, dtype=np.float64)
    q = ((S - np.eye(3)) ** 2).sum(axis=(-2, -1))
    return 1.0 + STIFFENING_SLOPE * q / (1.0 + q / SATURATION_Q)

