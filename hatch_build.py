"""Build hook of the hostd distribution: the web page of `hostd web` goes into the package.

The page's sources (hostd/web/page, Preact + Vite on the TypeScript client in
protocol/typescript) are built into hostd/web/static, which is not in git; the sdist and the
wheel both carry the built page (`artifacts` in pyproject.toml), so installing either needs no
Node.js. The same pattern as Jupyter's packages (hatch-jupyter-builder), with the build itself in
scripts/build-page, the one the developer set-up runs too.

- From a checkout (scripts/build-page is there): the page is built (npm ci + vite, skipped
  while unchanged), so a release never ships a stale page. Needs Node.js 20+ and npm.
- From an sdist (no scripts/, the page already built inside): nothing to build.
- Editable installs (scripts/setup) skip the hook: the set-up builds the page itself, and
  `scripts/setup --demo` must not need Node.js.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface


class PageBuildHook(BuildHookInterface):  # type: ignore[type-arg]
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if version == "editable":
            return
        root = Path(self.root)
        page = root / "hostd" / "web" / "static" / "index.html"
        build = root / "scripts" / "build-page"
        if build.exists():
            if shutil.which("node") is None or shutil.which("npm") is None:
                raise RuntimeError(
                    "building hostd from a checkout builds its web page and needs Node.js 20+ "
                    "and npm (apt-get install nodejs npm); or build the wheel from hostd's sdist, "
                    "which carries the built page"
                )
            self.app.display_info("hostd: building the web page (scripts/build-page)")
            subprocess.run([str(build)], cwd=root, check=True)
        if not page.exists():
            raise RuntimeError(
                f"hostd's web page is missing ({page.relative_to(root)}): build from a checkout "
                "with Node.js, or from an sdist made by scripts/package"
            )
