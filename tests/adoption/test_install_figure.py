"""The core install's figure (issue 31, item 6): one figure, measured one way, the same in the
README and docs/install.md, and what ``bench/install_size.py`` measures today."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _documented() -> tuple[int, int]:
    readme = re.search(r"(\d+) packages and (\d+) MB of site-packages", (REPO / "README.md").read_text())
    install = re.search(r"^\| core \| (\d+) \| (\d+) MB \|", (REPO / "docs" / "install.md").read_text(), re.MULTILINE)
    assert readme and install, "the README or docs/install.md no longer states the core install's figure"
    assert readme.groups() == install.groups(), (readme.groups(), install.groups())
    return int(readme[1]), int(readme[2])


def test_the_readme_and_the_install_guide_give_the_same_figure() -> None:
    _documented()
    for text in ((REPO / "README.md").read_text(), (REPO / "docs" / "install.md").read_text()):
        assert "python bench/install_size.py" in text  # how it was measured


@pytest.mark.slow
@pytest.mark.integration
def test_the_figure_is_what_the_script_measures() -> None:
    packages, megabytes = _documented()
    done = subprocess.run([sys.executable, str(REPO / "bench" / "install_size.py"), "--json"], capture_output=True,
                          text=True, timeout=1800, check=True)
    measured = json.loads(done.stdout)
    assert measured["packages"] == packages, measured["added"]
    assert abs(measured["megabytes"] - megabytes) <= 3, measured  # wheels of the same versions vary a little
