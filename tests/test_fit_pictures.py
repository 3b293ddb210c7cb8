"""The fit-error heat-map picture (solver/pictures/fit_errors.py) and its `fit-pictures` command.

The fit is crafted, not fitted: a small demo model and a FIT.npz-shaped dict whose residuals
are known fields (none, a bump at the left mouth corner, a uniform 0.1 mm offset, an error
only outside the face region, and a large one on a shape marked neutral), so every colour in
the picture has a known cause.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from matplotlib import colormaps
from PIL import Image

from solver.demo_head import make_demo_rig
from solver.inverse.fit_file import save_fit
from solver.model_builder.builder import BuildOptions, build_model
from solver.model_file import save_model
from solver.physics.activation import active_tet_indices
from solver.pictures.fit_errors import (COLOUR_MAP, OUTSIDE_REGION_COLOUR, PANEL_HEIGHT, fit_error_sheet,
                                        picture_fit_errors)

ROOT = Path(__file__).resolve().parents[1]
BUMP_PEAK = 0.005          # m, at the left mouth corner
BUMP_WIDTH = 0.012         # m, standard deviation
UNIFORM = 0.0001           # m
NEUTRAL_STATUS = "neutral: the shape moves the skin at most 0.10 mm"
NAMES = ["zero_error", "bump_mouth_corner_L", "uniform_small", "back_of_head_only", "eyeLook_neutral"]


@pytest.fixture(scope="module")
def model() -> dict:
    return build_model(make_demo_rig(), BuildOptions(target_tets=3000))


def _local(model, points):
    return (np.asarray(points) - model["head_origin"]) @ np.asarray(model["head_frame"]).T


def _face_region(model) -> np.ndarray:
    """In front of the condyles and above the menton (the fitter's rule without a vertex group)."""
    local = _local(model, model["skin_vertices"])
    hinge_forward = _local(model, model["condyles"])[:, 2].mean()
    landmarks = dict(zip([str(name) for name in model["landmark_names"]], model["landmark_positions"]))
    menton_up = _local(model, landmarks["menton"])[1]
    return (local[:, 2] > hinge_forward) & (local[:, 1] > menton_up - 0.01)


def craft_fit(model, statuses=None) -> dict:
    skin = np.asarray(model["skin_vertices"])
    region = _face_region(model)
    left, up, forward = np.asarray(model["head_frame"])
    landmarks = dict(zip([str(name) for name in model["landmark_names"]], model["landmark_positions"]))
    distance = np.linalg.norm(skin - landmarks["mouth_corner_L"], axis=1)

    residual = np.zeros((len(NAMES), len(skin), 3))
    residual[1] = forward * (BUMP_PEAK * np.exp(-0.5 * (distance / BUMP_WIDTH) ** 2))[:, None]
    residual[2] = up * UNIFORM
    residual[3][~region] = forward * 0.02
    residual[4] = left * 0.03
    vertex_errors = np.linalg.norm(residual, axis=2)[:, region] * 1000.0
    errors = np.stack([vertex_errors.mean(axis=1), np.percentile(vertex_errors, 95, axis=1),
                       vertex_errors.max(axis=1)], axis=1)

    active_count = len(active_tet_indices(model))
    neutral = np.tile(np.array([1.0, 1.0, 1.0, 0.0, 0.0, 0.0]), (active_count, 1))
    count = len(NAMES)
    return {
        "shape_key_names": np.array(NAMES),
        "activations": np.tile(neutral, (count, 1, 1)),
        "jaw": np.zeros((count, 5)),
        "fit_error_mm": errors,
        "status": np.array(statuses or ["fitted"] * 4 + [NEUTRAL_STATUS]),
        "detail_residual": residual,
        "neutral_activations": neutral,
        "iterations": np.full(count, 3),
        "seconds": np.ones(count),
        "contractions": np.ones((count, len(model["muscle_names"]))),
        "face_region": region,
        "face_region_source": np.array("in front of the jaw hinge and above the chin"),
        "tet_count": np.array(len(model["tets"])),
        "skin_vertex_count": np.array(len(skin)),
    }


@pytest.fixture(scope="module")
def fit(model) -> dict:
    return craft_fit(model)


@pytest.fixture(scope="module")
def sheet(model, fit):
    return fit_error_sheet(model, fit, count=3)


def _panel(sheet, name):
    return next(panel for panel in sheet.panels if panel.name == name)


def _pixels(sheet, name) -> np.ndarray:
    top, left, bottom, right = _panel(sheet, name).box
    return sheet.image[top:bottom, left:right].astype(float) / 255.0


def _hot(pixels: np.ndarray) -> np.ndarray:
    """Pixels in the top ~15% of the colour map (yellow-green to yellow) under any shading."""
    red, blue = pixels[..., 0], pixels[..., 2]
    return (red > 1.6 * blue) & (pixels.sum(axis=-1) > 0.35)


def _chroma_near(pixels: np.ndarray, colour, tolerance=0.04) -> np.ndarray:
    chroma = pixels / np.maximum(pixels.sum(axis=-1, keepdims=True), 1e-6)
    target = np.asarray(colour) / np.sum(colour)
    return (np.abs(chroma - target).max(axis=-1) < tolerance) & (pixels.sum(axis=-1) > 0.3)


def test_worst_and_best_fitted_shapes_are_ranked_by_mean_error_and_neutral_shapes_are_skipped(model, fit, sheet):
    # Four fitted shapes for count=3 are shared between the rows: the two worst, then the two best.
    assert [panel.row for panel in sheet.panels] == ["worst", "worst", "best", "best"]
    assert [panel.name for panel in sheet.panels[:2]] == ["bump_mouth_corner_L", "uniform_small"]
    assert {panel.name for panel in sheet.panels[2:]} == {"zero_error", "back_of_head_only"}
    assert "eyeLook_neutral" not in [panel.name for panel in sheet.panels]
    assert (sheet.fitted_count, sheet.neutral_count) == (4, 1)
    np.testing.assert_allclose(sheet.panels[0].error_mm, fit["fit_error_mm"][1])

    one_each = fit_error_sheet(model, fit, count=1)
    assert [(panel.row, panel.name) for panel in one_each.panels] == [
        ("worst", "bump_mouth_corner_L"), ("best", "back_of_head_only")]  # ties keep the later shape last


def test_default_limit_is_the_95th_percentile_of_the_panels_and_at_least_one_millimetre(fit, sheet):
    region = fit["face_region"]
    errors = np.linalg.norm(fit["detail_residual"][:4], axis=2)[:, region] * 1000.0
    assert sheet.limit_mm == pytest.approx(max(1.0, np.percentile(errors, 95)))
    assert sheet.limit_mm == 1.0        # the bump is local, so most face vertices are nearly exact


def test_picture_is_written_with_equal_panels_in_the_face_region_aspect(model, fit, sheet, tmp_path):
    path = picture_fit_errors(model, fit, tmp_path / "pictures" / "fit_errors.png")
    with Image.open(path) as written:
        image = np.asarray(written.convert("RGB"))
    assert image.shape == sheet.image.shape
    height, width = image.shape[:2]
    assert 500 <= width <= 1400 and 900 <= height <= 1400, image.shape
    assert image.std() > 12

    region_points = np.asarray(model["skin_vertices"])[fit["face_region"]]
    region_left_up = np.ptp(_local(model, region_points), axis=0)[:2]
    boxes = [panel.box for panel in sheet.panels]
    for top, left, bottom, right in boxes:
        assert 0 <= top < bottom <= height and 0 <= left < right <= width
        assert bottom - top == PANEL_HEIGHT
        assert (right - left) / PANEL_HEIGHT == pytest.approx(region_left_up[0] / region_left_up[1], abs=0.01)
    # two rows of two, the worst row above the best one
    assert boxes[0][0] == boxes[1][0] < boxes[0][2] <= boxes[2][0] == boxes[3][0]
    assert boxes[0][3] <= boxes[1][1]


def test_hot_colours_only_where_the_crafted_error_is_large_and_upright(sheet):
    bump = _pixels(sheet, "bump_mouth_corner_L")
    hot = _hot(bump)
    assert hot.sum() > 200
    rows, columns = np.nonzero(hot)
    height, width = hot.shape
    # The subject's left mouth corner: on the image's right (front view) and below the middle
    # (the face region reaches the top of the forehead), so the face is upright and unmirrored.
    assert columns.mean() > 0.55 * width
    assert 0.5 * height < rows.mean() < 0.9 * height

    for name in ("zero_error", "uniform_small", "back_of_head_only"):
        assert _hot(_pixels(sheet, name)).sum() == 0, name
    zero = _pixels(sheet, "zero_error")
    low = colormaps[COLOUR_MAP](0.0)[:3]
    assert _chroma_near(zero, low).sum() > 0.2 * zero.shape[0] * zero.shape[1]
    # the error outside the face region is not measured, so it is greyed out, not coloured
    back = _pixels(sheet, "back_of_head_only")
    assert _chroma_near(back, OUTSIDE_REGION_COLOUR, 0.01).sum() > 500


def test_a_larger_limit_cools_the_colours(model, fit):
    sheet = fit_error_sheet(model, fit, count=1, limit_mm=10.0)
    assert sheet.limit_mm == 10.0
    assert _hot(_pixels(sheet, "bump_mouth_corner_L")).sum() == 0


def test_a_shape_fitted_on_top_of_another_is_drawn_as_the_combined_pose(model, fit):
    """Its residual is the combined pose's less its context's (inverse/shapes.py), so the panel
    adds the two back up, and the caption says which pose it shows."""
    residual = fit["detail_residual"].copy()
    residual[2] = -residual[1]       # uniform_small on top of the bump: the two cancel
    on_top = dict(fit, detail_residual=residual, fit_context=np.array(["", "", NAMES[1], "", ""]))
    sheet = fit_error_sheet(model, on_top, count=3)
    combined = next(panel for panel in sheet.panels if panel.name == f"{NAMES[2]} (on {NAMES[1]})")
    assert np.abs(combined.vertex_error_mm).max() == pytest.approx(0.0, abs=1e-9)
    alone = next(panel for panel in fit_error_sheet(model, dict(on_top, fit_context=np.array([""] * 5)),
                                                      count=3).panels if panel.name == NAMES[2])
    assert alone.vertex_error_mm.max() > 1.0


def test_a_fit_without_fitted_shapes_or_of_another_model_is_refused(model, fit):
    all_neutral = dict(fit, status=np.array([NEUTRAL_STATUS] * len(NAMES)))
    with pytest.raises(ValueError, match="no fitted shape to picture: all 5 shapes in the fit are neutral"):
        fit_error_sheet(model, all_neutral)
    other_model = dict(fit, detail_residual=fit["detail_residual"][:, :-1])
    with pytest.raises(ValueError, match="skin vertices"):
        fit_error_sheet(model, other_model)
    with pytest.raises(ValueError, match="count"):
        fit_error_sheet(model, fit, count=0)


def _solver(*args, cwd):
    environment = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "solver", "--json", *args], cwd=cwd, env=environment,
                          capture_output=True, text=True, timeout=300)


def test_fit_pictures_command_line(model, fit, tmp_path):
    save_model(tmp_path / "model.npz", model)
    save_fit(tmp_path / "fit.npz", fit)
    drawn = _solver("fit-pictures", "model.npz", "fit.npz", "-o", "out/errors.png", "--count", "1", cwd=tmp_path)
    assert drawn.returncode == 0, drawn.stderr
    result = json.loads(drawn.stdout.splitlines()[-1])
    assert result["type"] == "result" and result["path"] == str(Path("out/errors.png"))
    assert result["worst"] == ["bump_mouth_corner_L"]
    with Image.open(tmp_path / "out" / "errors.png") as image:
        assert image.size[1] > PANEL_HEIGHT

    save_fit(tmp_path / "neutral.npz", dict(fit, status=np.array([NEUTRAL_STATUS] * len(NAMES))))
    refused = _solver("fit-pictures", "model.npz", "neutral.npz", "-o", "never.png", cwd=tmp_path)
    assert refused.returncode == 2
    error = json.loads(refused.stdout.splitlines()[-1])
    assert error["type"] == "error" and "no fitted shape" in error["message"]
    assert not (tmp_path / "never.png").exists()
