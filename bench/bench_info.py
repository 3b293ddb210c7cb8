"""What every benchmark prints beside its figures: the commit they were measured on."""
from __future__ import annotations

import subprocess
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[1]


def commit() -> str:
    """The short hash of HEAD (with "+changes" when the work tree differs from it), or "unknown"."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPOSITORY, capture_output=True,
                              text=True, timeout=10).stdout.strip()
        changed = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPOSITORY,
                                 capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return (head + "+changes" if changed else head) or "unknown"
