"""Benchmark the co-rotated energy's assembly on a face model.

Run from the repository root:
    .venv/bin/python bench/energy_assembly.py [--target-tets N | --model MODEL.npz] [--repeats R] [--threads T]

The model is the demo head built at --target-tets (35000 by default, the builder's default), or
a saved one (bench/fit.py --model keeps the ICT face's). --threads: numba's threads for the
timed calls (default: all); 1 is what a worker of `fit --jobs N` runs on, and there the tets are
assembled in one pass sorted by their lowest node instead of colour by colour.
Compile time is measured in a fresh subprocess with an empty numba cache (what a first run on a
new machine pays), and the cache load in a second one. Then, in this process, the one-off
setup (rest shape, Hessian pattern, tet colouring) and the per-call times of: energy only (a
line-search step), gradient, and energy + gradient + Hessian with and without the PSD
projection, each for three activation states: neutral (S = I everywhere: the closed-form
isotropic path), the demo's muscle tets activated (the general path, a 9×9 eigen-decomposition
per active tet), and every tet activated (the worst case).
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

import numba
import numpy as np

REPOSITORY = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPOSITORY))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from fresh_interpreter import report_first_calls  # noqa: E402

from solver.demo_head import make_demo_rig  # noqa: E402
from solver.model_builder.builder import BuildOptions, build_model  # noqa: E402
from solver.model_file import load_model  # noqa: E402
from solver.physics.corotated import CorotatedElasticity, TetMaterial, corotated_element_hessians  # noqa: E402
from tests.energy_registry import random_activations  # noqa: E402

# Runs in a subprocess: import, then the first mesh assembly and element-kernel call on one tet.
_FIRST_CALL_SCRIPT = """
import time
import numpy as np
start = time.perf_counter()
from solver.physics.corotated import CorotatedElasticity, TetMaterial, corotated_element_hessians
imported = time.perf_counter()
rest = np.array([[0.0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1]])
material = TetMaterial([1.0], [1.0], 2.0 * np.eye(3)[None], 1.0, 3.0)
CorotatedElasticity(rest, [[0, 1, 2, 3]]).energy_gradient_hessian(1.1 * rest, material)
assembled = time.perf_counter()
corotated_element_hessians(np.eye(3)[None], np.eye(3), 1.0, 0.0, 1.0, 3.0)
kernels = time.perf_counter()
print(imported - start, assembled - imported, kernels - assembled)
"""


def timed(function, repeats: int) -> tuple[float, float]:
    """Median wall and CPU milliseconds per call (CPU summed over all threads of this process)."""
    function()  # nothing first-call (allocation of the pattern's first data array, page faults) is charged
    walls, cpus = [], []
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        function()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return 1e3 * float(np.median(walls)), 1e3 * float(np.median(cpus))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target-tets", type=int, default=35000)
    parser.add_argument("--model", type=Path, help="a saved model instead of the demo head")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--threads", type=int, help="numba threads for the timed calls (default: all)")
    arguments = parser.parse_args()

    report_first_calls(_FIRST_CALL_SCRIPT, ("import", "mesh assembly", "element kernels"))

    if arguments.threads:
        numba.set_num_threads(arguments.threads)
    model = load_model(arguments.model) if arguments.model else \
        build_model(make_demo_rig(), BuildOptions(target_tets=arguments.target_tets))
    rest_positions, tets = model["rest_positions"], model["tets"]
    CorotatedElasticity(np.eye(4, 3, k=-1), [[0, 1, 2, 3]])  # load the colouring kernel before timing the setup
    setup_start = time.perf_counter()
    elasticity = CorotatedElasticity(rest_positions, tets)
    setup_ms = 1e3 * (time.perf_counter() - setup_start)
    print(f"mesh: {len(tets)} tets, {len(rest_positions)} nodes; Hessian {3 * len(rest_positions)}² with"
          f" {len(elasticity.hessian_indices)} stored entries; {elasticity.color_count} tet colours;"
          f" setup {setup_ms:.0f} ms")
    print(f"numba threads: {numba.get_num_threads()}")

    rng = np.random.default_rng(0)
    x = rest_positions + 3e-4 * rng.standard_normal(rest_positions.shape)  # 0.3 mm jitter
    neutral = TetMaterial.from_model(model)
    muscle_tets = neutral.active_weight > 0.0
    activated = np.broadcast_to(np.eye(3), (len(tets), 3, 3)).copy()
    activated[muscle_tets] = random_activations(rng, int(muscle_tets.sum()))
    every_tet = dataclasses.replace(neutral, active_weight=neutral.active_weight + 0.5 * neutral.passive_weight,
                                    passive_weight=0.5 * neutral.passive_weight,
                                    activation=random_activations(rng, len(tets)))
    states = {
        "neutral": neutral,
        f"muscles active ({muscle_tets.mean():.0%} of tets)": dataclasses.replace(neutral, activation=activated),
        "every tet active": every_tet,
    }
    calls = {
        "energy": lambda material: elasticity.energy(x, material),
        "gradient": lambda material: elasticity.gradient(x, material),
        "E + g + projected H": lambda material: elasticity.energy_gradient_hessian(x, material),
        "E + g + exact H": lambda material: elasticity.energy_gradient_hessian(x, material, project=False),
    }
    print(f"ms per call, median of {arguments.repeats} (wall / CPU over all threads):")
    print(f"  {'':<28}" + "".join(f"{name:>24}" for name in calls))
    for state_name, material in states.items():
        cells = []
        for call in calls.values():
            wall, cpu = timed(lambda: call(material), arguments.repeats)
            cells.append(f"{wall:9.1f} / {cpu:6.1f}")
        print(f"  {state_name:<28}" + "".join(f"{cell:>24}" for cell in cells))

    F = elasticity.deformation_gradients(x)
    wall, cpu = timed(lambda: corotated_element_hessians(
        F, every_tet.activation, every_tet.passive_weight, every_tet.active_weight, every_tet.mu, every_tet.lam,
        project=True), arguments.repeats)
    print(f"element kernel only, every tet active, projected 9×9 Hessians: {wall:.1f} ms wall / {cpu:.1f} ms CPU")


if __name__ == "__main__":
    main()
