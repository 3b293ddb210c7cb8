"""Parameters of the interactive shell: paper 001 Tables 3 and 4, unchanged, because the shell
runs in face units (the face is 1 unit tall, as in the paper's §5; ShellModel converts metres in
one place). Stiffness is then N per face unit, pressure N per face unit², density kg per face
unit²."""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields

# Settings for which 0 means "off".
MAY_BE_ZERO = frozenset({"warp_smoothing"})


@dataclass(frozen=True)
class ShellSettings:
    triangles: int = 4000                     # coarse shell size (user-set)
    # Table 3: stiffness reconstruction
    optimisation_tolerance: float = 1e-3      # ε_opt, relative
    newton_tolerance: float = 1e-3            # ε_sim, N
    reproducibility: float = 1e-2             # ε_r, face units
    max_pressure: float = 1e2                 # p_max
    target_strain_stiffness: float = 1e2      # κ_ts
    target_bending_stiffness: float = 1e2     # κ_tb
    barrier: float = 0.002                    # λ_r
    target_scaling: float = 1.0               # λ_ts = λ_tb
    smoothness: float = 5e-7                  # λ_l
    initial_stiffness: float = 1e-4           # §5.1: L-BFGS starts soft
    log_step_cap: float = 0.5                 # §5.1: largest step in log stiffness
    lbfgs_history: int = 10
    # Table 4: forward simulation
    time_step_s: float = 0.01                 # Δt
    substep_s: float = 0.002                  # Δt^s
    density: float = 0.1                      # ρ
    damping: float = 0.01                     # ν
    thin_depth: float = 0.05                  # δ_thin, face units
    max_strain: float = 1.0                   # ε_max
    lag_blend: float = 0.5                    # α_e of Eq. 12
    detail_clip: float = 1e-4                 # Eq. 13 corrections below this (face units) are dropped
    warp_smoothing: float = 0.5               # warp averaged over this share of the median coarse edge (transfer.py)

    def __post_init__(self):
        for field in fields(self):
            value = getattr(self, field.name)
            if not (value > 0 or (field.name in MAY_BE_ZERO and value == 0)):
                kind = "zero or positive" if field.name in MAY_BE_ZERO else "positive"
                raise ValueError(f"shell settings: {field.name} must be {kind}, found {value!r}")
        if self.triangles < 100:
            raise ValueError(f"shell settings: triangles must be at least 100, found {self.triangles}")
        if self.substep_s > self.time_step_s:
            raise ValueError("shell settings: substep_s must not exceed time_step_s")

    def as_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> "ShellSettings":
        known = {field.name for field in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"shell settings: unknown names {unknown}; known: {sorted(known)}")
        return cls(**values)
