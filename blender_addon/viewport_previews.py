"""Previews painted on the skin as colour attributes: the stiffness, density and paralysis maps
as the solver will use them, and the fit error of one shape key.

Each preview is a point-domain colour attribute of our own on the skin's mesh — `FP_stiffness`,
`FP_density`, `FP_paralysis`, `FP_fit_error` — made the active colour attribute so that Solid
view with Color ▸ Attribute shows it, and removed by **Clear Previews**. On the skin rather than
on a copy because the colours belong exactly where the artist paints and compares (Weight Paint
and the preview on one mesh, no second head to line up); an attribute changes no vertex, shape
key or vertex group, the mesh's render colour attribute is left as it was, and nothing the
add-on exports reads colour attributes. The colours are computed in numpy (`preview_colours`,
`map_values`, `vertex_fit_error_mm`: no bpy) and written with foreach_set.

The colour scale is viridis (dark violet = low, yellow = high), the one of
solver/pictures/fit_errors.py; vertices where a value is not defined (outside the fit's face
region) are grey. What the colours span is kept in `face_physics.preview_legend` for the panel.
"""
from __future__ import annotations

from typing import Optional, Tuple

import numpy as np

MAP_KINDS = {
    # kind: (vertex group setting, multiplier range setting or None, attribute)
    'STIFFNESS': ("stiffness_group", "stiffness_range", "FP_stiffness"),
    'DENSITY': ("density_group", "density_range", "FP_density"),
    'PARALYSIS': ("paralysis_group", None, "FP_paralysis"),
}
FIT_ERROR_ATTRIBUTE = "FP_fit_error"
# viridis at 9 even steps (matplotlib's, sRGB), as solver/pictures/fit_errors.py draws errors.
_VIRIDIS_SRGB = np.array([[0.267, 0.0049, 0.3294], [0.2788, 0.1755, 0.4834], [0.2297, 0.3224, 0.5457],
                          [0.1727, 0.4488, 0.5579], [0.1276, 0.5669, 0.5506], [0.1579, 0.6838, 0.5017],
                          [0.3692, 0.7889, 0.3829], [0.6785, 0.8637, 0.1895], [0.9932, 0.9062, 0.1439]])
UNDEFINED_SRGB = (0.74, 0.74, 0.72)     # solver/pictures/fit_errors.py OUTSIDE_REGION_COLOUR


def _linear(srgb) -> np.ndarray:
    """sRGB → linear: float colour attributes are stored linear and shown through the view transform."""
    srgb = np.asarray(srgb, dtype=np.float64)
    return np.where(srgb <= 0.04045, srgb / 12.92, ((srgb + 0.055) / 1.055) ** 2.4)


def preview_colours(values, low: float, high: float, defined=None) -> np.ndarray:
    """(V, 4) linear RGBA: `values` from `low` (violet) to `high` (yellow), clamped; grey where
    `defined` is False. A flat range (low == high) is all the middle colour."""
    values = np.asarray(values, dtype=np.float64)
    span = high - low
    position = np.full(len(values), 0.5) if span <= 0 else np.clip((values - low) / span, 0.0, 1.0)
    steps = np.linspace(0.0, 1.0, len(_VIRIDIS_SRGB))
    srgb = np.stack([np.interp(position, steps, _VIRIDIS_SRGB[:, channel]) for channel in range(3)], axis=1)
    if defined is not None:
        srgb[~np.asarray(defined, dtype=bool)] = UNDEFINED_SRGB
    return np.concatenate([_linear(srgb), np.ones((len(values), 1))], axis=1)


def map_values(weights, value_range: Optional[Tuple[float, float]]) -> Tuple[np.ndarray, float, float]:
    """(values, low, high) of a painted map as the solver uses it: a stiffness or density
    weight w becomes the multiplier low + w (high − low) (solver/physics/maps.py
    painted_multiplier), the scale spanning the panel's two multipliers; a paralysis weight is
    used as it is, on 0–1."""
    weights = np.clip(np.asarray(weights, dtype=np.float64), 0.0, 1.0)
    if value_range is None:
        return weights, 0.0, 1.0
    low, high = (float(value) for value in value_range)
    return low + weights * (high - low), min(low, high), max(low, high)


def vertex_fit_error_mm(fit_path, shape_name: str) -> Tuple[np.ndarray, np.ndarray]:
    """(per-vertex error in mm, face region mask) of one fitted shape of FIT.npz: the length of
    its `detail_residual` row (target minus fitted skin, with its context's for a shape fitted on
    top of another), as the fit measured its error; the
    mask is the fit's `face_region` (all vertices in fits that lack it)."""
    with np.load(fit_path, allow_pickle=False) as fit:
        names = [str(name) for name in fit["shape_key_names"]]
        if shape_name not in names:
            raise ValueError(f"{shape_name} is not in the fit ({fit_path}); fit it first (Fit panel)")
        row = names.index(shape_name)
        status = str(fit["status"][row])
        if status != "fitted":
            raise ValueError(f"{shape_name} was not fitted ({status}): it has no error to show")
        residual = np.asarray(fit["detail_residual"][row], dtype=np.float64)
        # A shape fitted on top of another (mouthClose on jawOpen) is stored relative to it, but
        # its error was measured on the two together: the context's residual adds back.
        context = str(fit["fit_context"][row]) if "fit_context" in fit.files else ""
        if context in names:
            residual = residual + np.asarray(fit["detail_residual"][names.index(context)], dtype=np.float64)
        region = (np.asarray(fit["face_region"], dtype=bool) if "face_region" in fit.files
                  else np.ones(len(residual), dtype=bool))
    return 1e3 * np.linalg.norm(residual, axis=1), region


# --------------------------------------------------------------------------- bpy side

def write_preview_attribute(obj, name: str, colours: np.ndarray) -> None:
    """Write (V, 4) linear colours as the point colour attribute `name` of the skin's mesh
    (replacing an earlier one) and make it the active colour attribute; the render colour
    attribute stays the one the mesh had."""
    mesh = obj.data
    if colours.shape != (len(mesh.vertices), 4):
        raise ValueError(f"the preview has {len(colours)} colours but '{obj.name}' has {len(mesh.vertices)} "
                         f"vertices; build the model again")
    attributes = mesh.color_attributes
    render_name = attributes.default_color_name
    old = attributes.get(name)
    if old is not None:
        attributes.remove(old)
    attribute = attributes.new(name, 'FLOAT_COLOR', 'POINT')
    attribute.data.foreach_set("color", colours.astype(np.float32).ravel())
    attributes.active_color = attribute
    # A mesh without colours makes its first attribute the render one: give that back.
    attributes.default_color_name = render_name if render_name and render_name in attributes else ""
    mesh.update()


def show_map_preview(obj, kind: str) -> str:
    """Colour the skin by its stiffness, density or paralysis map (`MAP_KINDS`); returns the legend."""
    from .scene_export import vertex_group_weights
    group_setting, range_setting, attribute = MAP_KINDS[kind]
    settings = obj.face_physics
    group = getattr(settings, group_setting)
    weights = vertex_group_weights(obj, group)
    if weights is None:
        raise ValueError(f"no {kind.lower()} map: choose its vertex group in the panel first"
                         if not group else f"'{obj.name}' has no vertex group '{group}'")
    value_range = tuple(getattr(settings, range_setting)) if range_setting else None
    values, low, high = map_values(weights, value_range)
    write_preview_attribute(obj, attribute, preview_colours(values, low, high))
    legend = (f"{attribute}: ×{low:g} → ×{high:g}" if value_range else f"{attribute}: 0 (moves) → 1 (paralysed)")
    settings.preview_legend = legend
    return legend


def show_fit_error(obj, fit_path: str, shape_name: str) -> str:
    """Colour the skin by the fit error of `shape_name` (mm, 0 → the shape's largest error on
    the face region; grey outside it); returns the legend."""
    errors, region = vertex_fit_error_mm(fit_path, shape_name)
    largest = float(errors[region].max()) if region.any() else 0.0
    write_preview_attribute(obj, FIT_ERROR_ATTRIBUTE, preview_colours(errors, 0.0, largest, defined=region))
    legend = f"{FIT_ERROR_ATTRIBUTE}: {shape_name}, 0 → {largest:.2f} mm (grey: outside the face region)"
    obj.face_physics.preview_legend = legend
    return legend


PREVIEW_ATTRIBUTES = tuple(attribute for _, _, attribute in MAP_KINDS.values()) + (FIT_ERROR_ATTRIBUTE,)


def preview_attribute_names(obj) -> list:
    """Our preview attributes on the skin (only these names: a user's own FP_… attribute stays)."""
    return [name for name in PREVIEW_ATTRIBUTES if name in obj.data.color_attributes]


def clear_previews(obj) -> int:
    """Remove our preview attributes from the skin's mesh; returns how many."""
    names = preview_attribute_names(obj)
    for name in names:
        obj.data.color_attributes.remove(obj.data.color_attributes[name])
    obj.face_physics.preview_legend = ""
    return len(names)
