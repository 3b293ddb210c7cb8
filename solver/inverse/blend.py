"""Animation from shape-key weights (paper 000 §6 "Animation"; detail correction of paper 001 Eq. 13–14).

WEIGHTS.npz: `names` (K,) str shape-key names, `weights` (T, K), optional `fps` and
`head_transforms` (T, 4, 4). Per frame

    a = a_neut + Σ_j w_j (a_j − a_neut)        (symmetric matrices carry no rotation: linear blend)
    b = Σ_j w_j b_j
    detail = Σ_j w_j (t_j − s_j)               (the fit's residual on the rig's vertices)

The detail is added to the simulated skin afterwards, so a rig played without external
effects reproduces its shape keys exactly where the coarse tet mesh cannot; it is switchable.
Names in the weights that the fit does not have are an error (a typo would silently drop a
shape); shapes of the fit missing from the weights get weight 0.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .fit_file import shape_contexts
from ..physics.inputs import (DEFAULT_FPS, ActivationInput, AnimationInputError, check_positive_definite,
                              numeric_array, read_head_transforms, read_npz)

WEIGHT_KEYS = ("names", "weights", "fps", "head_transforms")


@dataclass(frozen=True)
class BlendedAnimation:
    activations: ActivationInput      # per-frame activations (T, A, 6), jaw, head transforms, fps
    detail: np.ndarray                # (T, V, 3) m, added to the simulated skin


def load_weights(path, fit) -> tuple[np.ndarray, np.ndarray, float, np.ndarray]:
    """(weights (T, K) in the fit's shape order, names, fps, head_transforms (T,4,4)) from WEIGHTS.npz."""
    arrays = read_npz(path, WEIGHT_KEYS, "WEIGHTS")
    for key in ("names", "weights"):
        if key not in arrays:
            raise AnimationInputError(f"{key}: missing. WEIGHTS.npz needs `names` (K,) shape-key names and "
                                      f"`weights` (T, K), one row per frame.")
    names = arrays["names"]
    if names.dtype.kind not in "US" or names.ndim != 1:
        raise AnimationInputError(f"names: expected a 1-D array of strings, found dtype {names.dtype}, "
                                  f"shape {names.shape}.")
    names = [str(name) for name in names]
    if len(set(names)) != len(names):
        raise AnimationInputError("names: a shape key is named twice; give each one column of weights.")
    weights = numeric_array(arrays, "weights", (None, len(names)),
                            f"Give one row per frame and one column per name ({len(names)} names).")
    if len(weights) == 0:
        raise AnimationInputError("weights: no frames; give at least one row.")
    fit_names = [str(name) for name in fit["shape_key_names"]]
    unknown = [name for name in names if name not in fit_names]
    if unknown:
        raise AnimationInputError(f"names: {', '.join(unknown)} not in the fit (it has {', '.join(fit_names)}); "
                                  f"fit those shapes or fix the names.")
    in_fit_order = np.zeros((len(weights), len(fit_names)))
    in_fit_order[:, [fit_names.index(name) for name in names]] = weights
    fps = float(arrays["fps"]) if "fps" in arrays else DEFAULT_FPS
    if not np.isfinite(fps) or fps <= 0.0:
        raise AnimationInputError(f"fps: must be a positive number, found {fps}.")
    return in_fit_order, np.array(fit_names), fps, read_head_transforms(arrays, len(weights))


def blend(fit, weights: np.ndarray, fps: float, head_transforms: np.ndarray, detail: bool = True) -> BlendedAnimation:
    neutral = fit["neutral_activations"]
    offsets = fit["activations"] - neutral                                    # (K, A, 6)
    activations = neutral + np.einsum("tk,kav->tav", weights, offsets)
    check_positive_definite(activations, "blended activations",
                            _context_advice(fit, weights)
                            + "Weights far outside [0, 1] (or strongly negative) extrapolate the fitted "
                              "activations past what tissue can do; keep weights within [0, 1].")
    jaw = weights @ fit["jaw"]
    residual = np.einsum("tk,kvd->tvd", weights, fit["detail_residual"]) if detail else \
        np.zeros((len(weights),) + fit["detail_residual"].shape[1:])
    return BlendedAnimation(ActivationInput(jaw=jaw, head_transforms=head_transforms, activations=activations, fps=fps),
                            residual)


def _context_advice(fit, weights: np.ndarray) -> str:
    """What to key when frames weight a shape fitted on top of another (mouthClose on jawOpen,
    FIT.npz `fit_context`) above that other: its activations are a difference, which alone
    need not be an activation at all; '' when no frame does."""
    if "fit_context" not in fit:
        return ""
    names = [str(name) for name in fit["shape_key_names"]]
    contexts = shape_contexts(fit)
    advice = []
    for shape, context in enumerate(contexts):
        if context not in names:
            continue
        frames = np.flatnonzero(weights[:, shape] > weights[:, names.index(context)] + 1e-9)
        if len(frames):
            listed = ", ".join(str(frame) for frame in frames[:5]) + (", …" if len(frames) > 5 else "")
            advice.append(f"{names[shape]} is fitted on top of {context} (its activations are the difference to "
                          f"{context}'s) and alone may be no pose the tissue can take; frames {listed} weight it "
                          f"above {context}: key {context} at least as high. ")
    return "".join(advice)
