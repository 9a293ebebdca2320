"""What an install of ingest-toolkit adds to a fresh virtualenv: packages and megabytes.

One figure, measured one way (the README and docs/install.md quote it): build the wheel from this
checkout, make an empty virtualenv, count its packages (``pip list``) and the size of its
site-packages, install the wheel (the core, or ``--extra`` ones), count and measure again, and
print the difference. ``ingest-toolkit`` itself is one of the packages counted; pip and the
empty virtualenv's own packages are not.

    python bench/install_size.py                      # the core
    python bench/install_size.py --extra spark        # the core and [spark]
    python bench/install_size.py --wheel dist/ingest_toolkit-0.1.0-py3-none-any.whl
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import venv
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _build(out: Path) -> Path:
    subprocess.run([sys.executable, "-m", "build", "--wheel", "--outdir", str(out), str(REPO)], check=True,
                   capture_output=True, text=True, timeout=600)
    return next(out.glob("*.whl"))


def _packages(python: Path) -> set[str]:
    listed = subprocess.run([python, "-m", "pip", "list", "--format", "json", "--disable-pip-version-check"],
                            check=True, capture_output=True, text=True).stdout
    return {entry["name"].lower() for entry in json.loads(listed)}


def _site_packages(python: Path) -> Path:
    path = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    return Path(path)


def _size(root: Path) -> int:
    return sum(f.stat().st_size for f in root.rglob("*") if f.is_file() and not f.is_symlink())


def measure(wheel: Path, extras: list[str], where: Path) -> dict[str, object]:
    """The packages and bytes the install of ``wheel[extras]`` adds to an empty virtualenv."""
    venv.create(where, with_pip=True)
    python = where / "bin" / "python"
    site = _site_packages(python)
    before, empty = _packages(python), _size(site)
    requirement = f"{wheel}[{','.join(extras)}]" if extras else str(wheel)
    started = time.monotonic()
    subprocess.run([python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", requirement],
                   check=True, timeout=1800, env={**os.environ, "PIP_NO_INPUT": "1"})
    seconds = time.monotonic() - started
    added = sorted(_packages(python) - before)
    return {"install": f"[{','.join(extras)}]" if extras else "core", "packages": len(added),
            "megabytes": round((_size(site) - empty) / 1e6), "empty_virtualenv_megabytes": round(empty / 1e6),
            "seconds": round(seconds, 1), "added": added}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--wheel", type=Path, help="A built wheel (default: build one from this checkout).")
    parser.add_argument("--extra", action="append", default=[], help="An extra to install too (repeatable).")
    parser.add_argument("--json", action="store_true", help="Print the result as JSON.")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="install-size-") as scratch:
        wheel = args.wheel.resolve() if args.wheel else _build(Path(scratch) / "dist")
        result = measure(wheel, args.extra, Path(scratch) / "venv")
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"{result['install']}: {result['packages']} packages, {result['megabytes']} MB of site-packages "
          f"(beyond the empty virtualenv's {result['empty_virtualenv_megabytes']} MB), "
          f"installed in {result['seconds']} s")
    print("packages: " + ", ".join(str(name) for name in result["added"]))  # type: ignore[attr-defined]


if __name__ == "__main__":
    main()
