"""Timing a script in a fresh Python process, to measure numba's first-call (compile or
cache-load) cost apart from the steady-state figures a benchmark reports."""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
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


def report_first_calls(script: str, labels) -> None:
    """Print the first-call seconds of `script` with an empty numba cache (compilation) and
    then with the cache it filled (loading), one figure per label in the order it prints them."""
    with tempfile.TemporaryDirectory() as cache_directory:
        compiled = first_call_seconds(script, cache_directory)
        cached = first_call_seconds(script, cache_directory)
    for heading, seconds in (("first call, empty numba cache (compilation):", compiled),
                             ("first call, warm numba cache (loading compiled kernels):", cached)):
        print(heading)
        print("  " + ", ".join(f"{label} {value:.2f} s" for label, value in zip(labels, seconds)))
