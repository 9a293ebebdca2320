"""Where the documentation is on this machine, for the commands and the checks that point to it.

A wheel ships docs/*.md inside the package (``ingest_toolkit/docs/``, copied by the build); a
checkout (an editable install) has them in its root's ``docs/``. The project has no documentation
site, so a link to a document is a ``file://`` URL of the installed file: it works wherever the
toolkit is installed, and never names a ``docs/`` directory the reader may not have.
"""

from __future__ import annotations

from pathlib import Path

import click

__all__ = ["doc_uri", "docs_command", "docs_dir"]

_PACKAGE = Path(__file__).resolve().parent
_PLACES = (_PACKAGE / "docs", _PACKAGE.parent / "docs")  # the wheel's copy, then a checkout's
_MARKER = "runbook.md"  # a directory holding it is the documentation, not a stray docs/


def docs_dir() -> Path | None:
    """The installed documentation's directory; None when this installation has none."""
    return next((place for place in _PLACES if (place / _MARKER).is_file()), None)


def doc_uri(name: str, anchor: str | None = None) -> str | None:
    """``file://.../<name>[#anchor]`` of an installed document; None when it is not installed."""
    place = docs_dir()
    if place is None or not (place / name).is_file():
        return None
    return (place / name).as_uri() + (f"#{anchor}" if anchor else "")


@click.command("docs")
@click.argument("name", required=False)
def docs_command(name: str | None) -> None:
    """Print where the documentation installed with the toolkit is (the project has no website):
    its directory and each document's title; with NAME (e.g. runbook), that document's path."""
    place = docs_dir()
    if place is None:
        raise click.ClickException("this installation has no documentation (a wheel built without docs/): "
                                   "reinstall from a wheel built from the repository or sdist")
    if name is not None:
        path = place / (name if name.endswith(".md") else f"{name}.md")
        if not path.is_file():
            raise click.ClickException(f"no document {path.name} in {place}; `ingest-toolkit docs` lists them")
        click.echo(path)
        return
    click.echo(f"documentation: {place}")
    for path in sorted(place.glob("*.md")):
        title = next((line.lstrip("# ").strip() for line in path.read_text(encoding="utf-8").splitlines()
                      if line.startswith("#")), "")
        click.echo(f"  {path.name:<16} {title}")
    click.echo(f"checks link to sections of {doc_uri('runbook.md')}")
