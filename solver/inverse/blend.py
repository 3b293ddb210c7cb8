"""Animation from shape-key weights (paper 000 §6 "Animation"; detail correction of paper 001 Eq. 13–14).

WEIGHTS.npz: `names` (K,) str shape-key names, `weights` (T, K), optional `fps` and
`head_transforms` (T, 4, 4). Per frame

    a = a_neut + Σ_j w_j (a_j − a_neut)        (symmetric matrices carry no rotation: linear blend)
    b = Σ_j w_j b_j
    detail = Σ_j w_j (t_j − s_j)               (the fit's residual on the rig's vertices)

The detail is added to the simulated skin afterwards, so a rig played without external
effects reproduces its shape keys exactly where the coarse tet mesh cannot; it is switchable.
The plain rig's own offset Σ_j w_j Δ_j (FIT.npz `shape_key_deltas`, fits made since issue 37) is
what the skin filter (physics/skin_filter.py) measures the simulation's deviation against.
These, and the activations themselves (`FrameActivations`), are evaluated frame by frame, so a
long shot holds neither a (T, V, 3) nor a (T, A, 6) array (the latter 240 KB a frame on ICT).
Names in the weights that the fit does not have are an error (a typo would silently drop a
shape); shapes of the fit missing from the weights get weight 0.

Blends past the fitted range. Every fitted S keeps its eigenvalues within [0.5, 2]
(fit.MIN_ACTIVATION_EIGENVALUE), but the linear blend adds offsets: two shapes that each halve
a tet along one direction ask, keyed together at weight 1, for nothing at all (1 − ½ − ½ = 0),
and S is no longer an activation. On ICT one blend of four shapes at weights 0.55–0.95 did.
Where a blended S has an eigenvalue below BLEND_MIN_EIGENVALUE = 0.5² (what two fitted shapes
at their limit compose to), that eigenvalue is raised to it, the eigenvectors kept; raising is
continuous in the weights, so an animation keyed through such a blend does not pop, and every
blend of single shapes at weights in [0, 1] plays. `BlendedAnimation.held_tets` counts them per
frame for a warning. A frame whose S is not positive definite at all still refuses when it
weights a shape outside [0, 1] (an extrapolation) or a context shape above its context (its
activations are a difference; keying it alone is a keying mistake the message names).
"""
from __future__ import annotations

import operator
from dataclasses import dataclass, replace
from typing import Callable, Iterator, Optional

import numpy as np

from .fit import MIN_ACTIVATION_EIGENVALUE
from .fit_file import shape_contexts
from ..physics.activation import symmetric_from_vector, vector_from_symmetric
from ..physics.inputs import (DEFAULT_FPS, ActivationInput, AnimationInputError, below_eigenvalue, numeric_array,
                              read_head_transforms, read_npz, refuse_not_positive_definite)

WEIGHT_KEYS = ("names", "weights", "fps", "head_transforms")
BLEND_MIN_EIGENVALUE = MIN_ACTIVATION_EIGENVALUE ** 2
CHUNK_FRAMES = 64     # frames a whole-take check blends at once: 15 MB on ICT's 5,003 muscle tets


class FrameActivations:
    """(T, A, 6) activation vectors made when frames are asked for: `make(start, stop)` gives
    frames start … stop − 1. `activations[t]` is one frame, `activations[a:b]` a run, `chunks()`
    walks the take CHUNK_FRAMES at a time, `np.asarray(activations)` makes all of them."""

    def __init__(self, frame_count: int, active_count: int, make: Callable[[int, int], np.ndarray]):
        self.shape = (frame_count, active_count, 6)
        self._make = make

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, index):
        if isinstance(index, slice):
            start, stop, step = index.indices(len(self))
            if step != 1:
                raise IndexError("activation frames are made in runs; step through them one by one")
            return self._make(start, max(start, stop))
        frame = operator.index(index)
        frame += len(self) if frame < 0 else 0
        if not 0 <= frame < len(self):
            raise IndexError(f"frame {index} of {len(self)}")
        return self._make(frame, frame + 1)[0]

    def chunks(self) -> Iterator[tuple[int, np.ndarray]]:
        """(first frame, frames (n, A, 6)) over the whole take."""
        for start in range(0, len(self), CHUNK_FRAMES):
            yield start, self[start:start + CHUNK_FRAMES]

    def __array__(self, dtype=None, copy=None):
        frames = self[:]
        return frames if dtype is None else frames.astype(dtype)


class ShapeKeyFrames:
    """Σ_k w_tk A_k for frame t of weights (T, K) and per-shape arrays A (K, V, 3), computed when a
    frame is asked for (`frames[t]`); `np.asarray(frames)` gives all of them."""

    def __init__(self, weights: np.ndarray, per_shape: np.ndarray):
        self.weights, self.per_shape = np.asarray(weights, dtype=np.float64), per_shape

    def __len__(self) -> int:
        return len(self.weights)

    def __getitem__(self, frame: int) -> np.ndarray:
        return np.tensordot(self.weights[frame], self.per_shape, axes=1)

    def __array__(self, dtype=None, copy=None):
        frames = np.einsum("tk,kvd->tvd", self.weights, self.per_shape)
        return frames if dtype is None else frames.astype(dtype)


@dataclass(frozen=True)
class BlendedAnimation:
    activations: ActivationInput      # per-frame activations (T, A, 6), jaw, head transforms, fps
    detail: ShapeKeyFrames            # (T, V, 3) m, added to the simulated skin
    held_tets: np.ndarray             # (T,) int: muscle tets raised to BLEND_MIN_EIGENVALUE per frame
    rig_offset: Optional[ShapeKeyFrames] = None   # (T, V, 3) m: Σ w Δ of the plain rig; None: not in the fit

    def held_warning(self) -> str:
        """A sentence for the user when the blend held tets at BLEND_MIN_EIGENVALUE; '' otherwise."""
        frames = np.flatnonzero(self.held_tets)
        if len(frames) == 0:
            return ""
        listed = ", ".join(str(frame) for frame in frames[:5]) + (", …" if len(frames) > 5 else "")
        return (f"{len(frames)} frame{'s' * (len(frames) != 1)} of the shape-key blend (frames {listed}) ask up to "
                f"{int(self.held_tets.max())} muscle tets to shrink below {BLEND_MIN_EIGENVALUE:g} of their length "
                f"in some direction, more than two fitted shapes at their limit do together; those tets are held "
                f"at {BLEND_MIN_EIGENVALUE:g}. Lower the weights of shapes that squeeze the same muscles if the "
                f"pose looks strained.")


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
    weights = np.array(weights, dtype=np.float64)      # a copy: the frames are made later, from these
    neutral = fit["neutral_activations"]
    offsets = fit["activations"] - neutral                                    # (K, A, 6)

    def linear(start: int, stop: int) -> np.ndarray:
        return neutral + np.einsum("tk,kav->tav", weights[start:stop], offsets)

    held = _held_at_blend_floor(fit, weights, FrameActivations(len(weights), len(neutral), linear))
    activations = FrameActivations(len(weights), len(neutral),
                                   lambda start, stop: _raised_to_blend_floor(linear(start, stop)))
    jaw = weights @ fit["jaw"]
    residual = fit["detail_residual"] if detail else np.zeros((1,) + fit["detail_residual"].shape[1:])
    rig_offset = ShapeKeyFrames(weights, fit["shape_key_deltas"]) if "shape_key_deltas" in fit else None
    return BlendedAnimation(ActivationInput(jaw=jaw, head_transforms=head_transforms, activations=activations, fps=fps),
                            ShapeKeyFrames(weights if detail else np.zeros((len(weights), 1)), residual),
                            held, rig_offset)


def skin_filter_for(model, blended: BlendedAnimation, enabled: bool = True):
    """(the SkinFilter a played blend is shown through, or None, and a warning for the user, or '').
    The filter needs the plain rig frame, so a fit made before FIT.npz kept the rig's deltas plays
    unfiltered, and says how to get it."""
    if not enabled:
        return None, ""
    if blended.rig_offset is None:
        return None, ("this fit was made before fits kept the rig's shape-key deltas, so the skin filter "
                      "(which keeps creases finer than the tet mesh off the skin) is off; fit the shapes again "
                      "to play them with it.")
    from ..physics.skin_filter import SkinFilter
    return SkinFilter.for_model(model), ""


def _held_at_blend_floor(fit, weights: np.ndarray, linear: FrameActivations) -> np.ndarray:
    """(T,) int: the muscle tets of each frame of the linear blend with an eigenvalue below
    BLEND_MIN_EIGENVALUE (raised to it when played); refuses the frames whose blend is not positive
    definite because they extrapolate or key a context shape above its context (module docstring)."""
    refusable_frames = ((weights < 0.0) | (weights > 1.0) | _context_keyed_above(fit, weights)).any(axis=1)
    held = np.zeros(len(weights), dtype=np.int64)
    refused, first_refused = [], None
    for start, activations in linear.chunks():
        frames = slice(start, start + len(activations))
        refusable = below_eigenvalue(activations) & refusable_frames[frames, None]
        if refusable.any():
            refused.extend(start + np.flatnonzero(refusable.any(axis=1)))
            first_refused = (start, refusable) if first_refused is None else first_refused
        held[frames] = below_eigenvalue(activations, BLEND_MIN_EIGENVALUE).sum(axis=1)
    if first_refused is not None:
        refused = np.array(refused)
        refuse_not_positive_definite(first_refused[1], "blended activations",
                                     _context_advice(fit, weights[refused], refused)
                                     + "Weights far outside [0, 1] (or strongly negative) extrapolate the fitted "
                                       "activations past what tissue can do; keep weights within [0, 1].",
                                     first_frame=first_refused[0])
    return held


def _raised_to_blend_floor(activations: np.ndarray) -> np.ndarray:
    """The (n, A, 6) activations with every eigenvalue below BLEND_MIN_EIGENVALUE raised to it,
    the eigenvectors kept."""
    held = below_eigenvalue(activations, BLEND_MIN_EIGENVALUE)
    if held.any():
        eigenvalues, eigenvectors = np.linalg.eigh(symmetric_from_vector(activations[held]))
        raised = np.einsum("nij,nj,nkj->nik", eigenvectors, np.maximum(eigenvalues, BLEND_MIN_EIGENVALUE),
                           eigenvectors)
        activations[held] = vector_from_symmetric(raised)
    return activations


def _context_keyed_above(fit, weights: np.ndarray) -> np.ndarray:
    """(T, K) bool: frames that weight a shape fitted on top of another above that other."""
    above = np.zeros(weights.shape, dtype=bool)
    if "fit_context" not in fit:
        return above
    names = [str(name) for name in fit["shape_key_names"]]
    for shape, context in enumerate(shape_contexts(fit)):
        if context in names:
            above[:, shape] = weights[:, shape] > weights[:, names.index(context)] + 1e-9
    return above


def _context_advice(fit, weights: np.ndarray, frame_numbers: np.ndarray) -> str:
    """What to key when frames (weights (n, K) of the frames numbered `frame_numbers`) weight a
    shape fitted on top of another (mouthClose on jawOpen, FIT.npz `fit_context`) above that
    other: its activations are a difference, which alone need not be an activation at all; ''
    when no frame does."""
    names = [str(name) for name in fit["shape_key_names"]] if "fit_context" in fit else []
    contexts = shape_contexts(fit) if names else []
    above = _context_keyed_above(fit, weights)
    advice = []
    for shape, context in enumerate(contexts):
        frames = frame_numbers[above[:, shape]]
        if len(frames):
            listed = ", ".join(str(frame) for frame in frames[:5]) + (", …" if len(frames) > 5 else "")
            advice.append(f"{names[shape]} is fitted on top of {context} (its activations are the difference to "
                          f"{context}'s) and alone may be no pose the tissue can take; frames {listed} weight it "
                          f"above {context}: key {context} at least as high. ")
    return "".join(advice)


def with_muscle_layer(model, blended, layer: ActivationInput):
    """The shape-key blend (an ActivationInput) with muscle contractions added on top, the way
    the blend itself adds shapes: a = a_blend + (a_muscles − a_neut), jaw added likewise. A
    contraction of 1 adds nothing. `layer` is an ACTIVATIONS.npz of `muscle_contraction`."""
    from ..physics.activation import NEUTRAL_ACTIVATION, active_tet_indices, tet_activations
    if layer.muscle_contraction is None:
        raise AnimationInputError("muscle layer: on top of shape-key weights the activations file may only hold "
                                  "muscle_contraction (raw activations cannot be added to a blend). Fix: write "
                                  "muscle_contraction and muscle_names.")
    if layer.frame_count != blended.frame_count:
        raise AnimationInputError(f"muscle layer: {layer.frame_count} frames, but the weights have "
                                  f"{blended.frame_count}. Fix: give both the same frames.")
    if not np.allclose(layer.head_transforms, np.eye(4)):
        raise AnimationInputError("muscle layer: head_transforms belong in WEIGHTS.npz when a fit drives the "
                                  "animation. Fix: move them there.")
    active = active_tet_indices(model)
    base = blended.activations

    def layered(start: int, stop: int) -> np.ndarray:
        activations = np.array(base[start:stop], dtype=np.float64)
        for frame, contraction in enumerate(layer.muscle_contraction[start:stop]):
            if np.any(contraction != 1.0):
                activations[frame] += vector_from_symmetric(tet_activations(model, contraction)[active]) - \
                    NEUTRAL_ACTIVATION
        return activations

    activations = FrameActivations(len(base), base.shape[1], layered)
    for start, frames in activations.chunks():
        refuse_not_positive_definite(below_eigenvalue(frames), "muscle contractions on top of the shape-key blend",
                                     "Contractions this far from 1 on top of these shape keys flatten tissue; "
                                     "bring the contractions closer to 1.", first_frame=start)
    return replace(blended, activations=activations, jaw=blended.jaw + layer.jaw)
