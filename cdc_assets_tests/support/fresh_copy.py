"""The repository's files as a fresh clone has them, with this ``.venv`` linked in."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def fresh_copy(target: Path) -> Path:
    """The work tree's files (tracked and new, not ignored) in ``target``, as a clone has them."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    stamp = ROOT / ".venv" / ".installed"
    stamp.touch(exist_ok=True)
    old = stamp.stat().st_mtime - 1
    for name in filter(None, (n.decode() for n in listed)):
        source = ROOT / name
        if source.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)
            # Older than make's stamp of the linked .venv: `make` does not reinstall from here.
            os.utime(target / name, (old, old))
    (target / ".venv").symlink_to(ROOT / ".venv")
    return target
