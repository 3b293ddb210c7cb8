"""A lattice finer around the mouth: the BCC lattice is laid out in a warped space.

Why: a uniform lattice of ~35k tets over a whole head and neck (the ICT face) has a 9.6 mm
spacing, so each lip is one tet thick, the cut between the lips is a one-tet staircase and the
lip tissue is glued straight to the gums. Phace's 35k tets cover only a face template. Rather
than hanging nodes or a second mesher, the uniform lattice is built in "lattice space" u and
every node is moved along its ray from the mouth centre c (head frame):

    x = c + (u − c) · g(ρ) / ρ,   ρ = |(u − c) / r|  (elliptic radius, half-axes r),
    g'(ρ) = 1 − (1 − s₀) exp(−ρ⁴),   g(0) = 0,   i.e. g(ρ) = ρ − (1 − s₀) Γ(5/4) P(1/4, ρ⁴)

(P the regularised lower incomplete gamma function). The fourth power gives a plateau: the
whole fine zone (ρ ≲ 0.7) has nearly the finest spacing, where a Gaussian would coarsen
steadily from the centre out.

Radially the lattice shrinks by g' — s₀ (the fine factor) at the centre, 1 far away — and
tangentially by g/ρ, which also starts at s₀ and tends to 1 like 1/ρ. Both stretches are ≤ 1
(for an elliptic zone oblique directions can pass 1 by a few per cent), so the lattice is
nowhere coarser than the uniform one: the refinement costs extra tets
(a map that is the identity far away would pay for the fine centre with a coarse ring, since
it keeps the total volume). The map is one-to-one (g' > 0), tets stay conforming, and the
ratio of radial to tangential stretch, g'ρ/g, stays below ~1.6 for s₀ ≥ 0.4, so the BCC
tets' good shape survives. c lies on the midplane, so the lattice stays left–right symmetric.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import gamma

import numpy as np
from scipy.special import gammainc

# Local spacing at the mouth centre as a fraction of the far-field spacing.
DEFAULT_MOUTH_FINE_FACTOR = 0.45
# Half-axes of the fine zone (right, up, forward) in metres for a face of scale 1, in lattice
# space: the lips, mouth corners and the tissue between lips and teeth.
MOUTH_ZONE_RADII_M = (0.07, 0.045, 0.04)
# The zone's centre sits this far behind the lip surface (towards the teeth), in metres at scale 1.
MOUTH_ZONE_DEPTH_M = 0.005
_INVERSE_BISECTIONS = 60
PLATEAU_EXPONENT = 4


@dataclass(frozen=True)
class RadialGrading:
    """The warp lattice space → head frame described in the module docstring."""
    centre: np.ndarray           # (3,) head-frame
    radii: np.ndarray            # (3,) half-axes of the fine zone in lattice space
    fine_factor: float           # s₀

    @property
    def _shrink(self) -> float:
        """g(ρ) → ρ − this as ρ → ∞."""
        return (1.0 - self.fine_factor) * gamma(1.0 + 1.0 / PLATEAU_EXPONENT)

    def _radius(self, points):
        offset = np.asarray(points, float) - self.centre
        return offset, np.sqrt(np.sum((offset / self.radii) ** 2, axis=-1))

    def _g(self, rho):
        return rho - self._shrink * gammainc(1.0 / PLATEAU_EXPONENT, rho ** PLATEAU_EXPONENT)

    def map(self, u):
        offset, rho = self._radius(u)
        # g(ρ)/ρ → s₀ as ρ → 0; the guard only avoids 0/0 at the centre itself
        ratio = np.where(rho > 1e-12, self._g(rho) / np.maximum(rho, 1e-12), self.fine_factor)
        return self.centre + offset * ratio[..., None]

    def spacing_factor(self, u):
        """The map's largest stretch at u, the radial one g'(ρ): the local lattice spacing is
        this times the far-field spacing (tangentially it is finer still)."""
        _, rho = self._radius(u)
        return 1.0 - (1.0 - self.fine_factor) * np.exp(-rho ** PLATEAU_EXPONENT)

    def inverse(self, x):
        """Lattice-space points that map to head-frame points x: along each ray from c the
        elliptic radius goes from ρ to g(ρ), monotonically, so bisect for ρ."""
        offset, target = self._radius(np.atleast_2d(x))
        low = target.copy()                                   # g(ρ) ≤ ρ
        high = np.minimum(target / self.fine_factor, target + self._shrink)   # g(ρ) ≥ s₀ρ and ≥ ρ − shrink
        for _ in range(_INVERSE_BISECTIONS):
            middle = 0.5 * (low + high)
            too_far = self._g(middle) > target
            high = np.where(too_far, middle, high)
            low = np.where(too_far, low, middle)
        rho = 0.5 * (low + high)
        ratio = np.where(target > 1e-12, rho / np.maximum(target, 1e-12), 1.0 / self.fine_factor)
        return self.centre + offset * ratio[:, None]

    def world_spacing_factor(self, x):
        """spacing_factor at the lattice point that lands on head-frame point x."""
        return self.spacing_factor(self.inverse(x))

    def covering_box(self, low, high):
        """A lattice-space box whose image covers the head-frame box [low, high]: the map pulls
        every point at most `shrink` elliptic radii, i.e. shrink × max(r), towards c."""
        margin = self._shrink * float(np.max(self.radii)) * 1.01
        return np.asarray(low, float) - margin, np.asarray(high, float) + margin

    def describe(self) -> dict:
        return {"centre_head_frame_m": [round(float(v), 5) for v in self.centre],
                "radii_m": [round(float(v), 5) for v in self.radii], "fine_factor": float(self.fine_factor)}


def mouth_grading(frame, landmarks, fine_factor=DEFAULT_MOUTH_FINE_FACTOR):
    """The grading centred behind the lips, on the midplane, sized by the face scale; None when
    the fine factor is 1 (a uniform lattice)."""
    if fine_factor >= 1.0:
        return None
    if not 0.2 <= fine_factor < 1.0:
        raise ValueError(f"the mouth refinement factor must lie in [0.2, 1], got {fine_factor}")
    lips = frame.local(np.array([landmarks["upper_lip"], landmarks["lower_lip"]])).mean(0)
    scale = landmarks.scale
    centre = np.array([0.0, lips[1], lips[2] - MOUTH_ZONE_DEPTH_M * scale])
    return RadialGrading(centre=centre, radii=np.asarray(MOUTH_ZONE_RADII_M) * scale, fine_factor=float(fine_factor))
