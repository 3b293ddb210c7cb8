"""Timing a script in a fresh Python process, to measure numba's first-call (compile or
cache-load) cost apart from the steady-state figures a benchmark reports."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[1]


def first_call_seconds(script: str, cache_directory: str) -> tuple[float, ...]:
    """Run `script` (which prints whitespace-separated seconds) in a new interpreter whose numba
    cache lives in `cache_directory`: an empty folder measures compilation, a second run the
    cache load."""
    environment = dict(os.environ, NUMBA_CACHE_DIR=cache_directory, PYTHONPATH=str(REPOSITORY))
    output = subprocess.run([sys.executable, "-c", script], env=environment, capture_output=True,
                            text=True, check=True).stdout
    return tuple(float(value) for value in output.split())
