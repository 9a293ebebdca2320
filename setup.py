"""The build's one step that pyproject.toml cannot say: the documentation goes into the wheel.

docs/ lives at the repository's root (its files link each other and the tests read them there); a
wheel holds only the package, so a pip user had no docs/ while the generated configuration and the
checks' runbook links pointed to it. The build copies docs/*.md and docs/img/ into
ingest_toolkit/docs/ of the wheel, where ``ingest_toolkit.manual`` finds them (``ingest-toolkit
docs`` prints the place). An editable install reads the checkout's docs/ directly.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

DOCS = Path(__file__).resolve().parent / "docs"
SHIPPED = ("*.md", "img/*.png")


class BuildWithDocs(build_py):
    def run(self) -> None:
        super().run()
        if self.editable_mode:
            return
        target = Path(self.build_lib) / "ingest_toolkit" / "docs"
        for pattern in SHIPPED:
            for source in sorted(DOCS.glob(pattern)):
                (target / source.relative_to(DOCS)).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(source, target / source.relative_to(DOCS))


setup(cmdclass={"build_py": BuildWithDocs})
