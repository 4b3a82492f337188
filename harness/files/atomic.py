"""The one way the harness writes a file others may read meanwhile. Standard library only: the
launcher on another host imports it before it becomes its command."""
from __future__ import annotations

import os
from pathlib import Path


def write_atomic(path: Path, data: bytes | str) -> None:
    """Write beside the target, then rename over it: a reader sees the old file or the whole
    new one, never half of it."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)
    os.replace(tmp, path)
