"""Compile the model builder's numba kernels ahead of the first real build.

    python -m solver.model_builder.warm_up

numba compiles a kernel on its first call and keeps the machine code in its on-disk cache
(``__pycache__`` beside the source, or NUMBA_CACHE_DIR); a new process then loads it in
hundredths of a second. A fresh install has an empty cache, so its first model build would
pay for the compiling (about 10 s of the ICT build on the 2-core development machine). `build.py setup`
and the add-on's solver installer run this once instead: a small build of the built-in demo
head calls every kernel the builder uses, with the argument types of a real build.
"""
from __future__ import annotations

import sys
import time

# Small enough to take a few seconds beyond the compiling, big enough to reach every stage.
WARM_UP_TETS = 2000


def warm_up() -> float:
    """Build the demo head at WARM_UP_TETS tets; the seconds it took (mostly compiling when the cache is empty)."""
    from ..demo_head import make_demo_rig
    from .builder import BuildOptions, build_model
    start = time.perf_counter()
    build_model(make_demo_rig(), BuildOptions(target_tets=WARM_UP_TETS))
    return time.perf_counter() - start


def main() -> int:
    seconds = warm_up()
    print(f"model builder kernels compiled and cached ({seconds:.1f} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
