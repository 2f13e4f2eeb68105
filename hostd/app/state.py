"""Where the app's windows were: size and position, kept across runs.

`<config dir>/app-window.json` (platformdirs' config dir, or `--home`'s): the geometry of the
window that moved or resized last. A new window takes it; a window opened while others are
open is moved down and right by a step per open window so it does not cover the last one
exactly. A missing or malformed file is the default size.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

DEFAULT = (1100, 800)
MIN_SIZE = (360, 400)
CASCADE = 32


@dataclass
class Geometry:
    width: int = DEFAULT[0]
    height: int = DEFAULT[1]
    x: int | None = None
    y: int | None = None

    def cascaded(self, n: int) -> Geometry:
        """The geometry of a window opened while `n` others are open."""
        if n == 0 or self.x is None or self.y is None:
            return Geometry(self.width, self.height, self.x, self.y)
        return Geometry(self.width, self.height, self.x + CASCADE * n, self.y + CASCADE * n)


def load(path: Path) -> Geometry:
    try:
        raw = json.loads(path.read_text())
        g = Geometry(int(raw["width"]), int(raw["height"]),
                     None if raw.get("x") is None else int(raw["x"]),
                     None if raw.get("y") is None else int(raw["y"]))
    except (OSError, ValueError, KeyError, TypeError):
        return Geometry()
    g.width = max(g.width, MIN_SIZE[0])
    g.height = max(g.height, MIN_SIZE[1])
    return g


def save(path: Path, g: Geometry) -> None:
    """Write atomically (a crash mid-write leaves the old file)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(asdict(g)))
    os.replace(tmp, path)
