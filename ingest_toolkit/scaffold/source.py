"""Where this installation of ingest-toolkit came from, to say how to add an extra to it.

The package is not on a package index: users install it from a built wheel (``pip install
dist/ingest_toolkit-<version>-py3-none-any.whl``) or from a checkout (``pip install .``). So
``pip install 'ingest-toolkit[spark]'`` would fail for them; the command that works names the
same wheel or checkout, which pip records in the installation's ``direct_url.json`` (PEP 610).
"""

from __future__ import annotations

import json
from importlib.metadata import distributions
from urllib.parse import unquote, urlparse

__all__ = ["install_command", "installed_from"]

_NAME = "ingest-toolkit"


def installed_from() -> tuple[str, bool] | None:
    """The local wheel or directory this installation was made from and whether it is editable;
    None when pip did not record one (installed from an index, or not installed)."""
    # Every installation on the path: from a checkout's root, its build's egg-info comes first and
    # records nothing; the installation pip made (in site-packages) has the record.
    recorded = next((text for found in distributions(name=_NAME) if (text := found.read_text("direct_url.json"))),
                    None)
    if recorded is None:
        return None
    document = json.loads(recorded)
    url = urlparse(document.get("url", ""))
    if url.scheme != "file":
        return None
    return unquote(url.path), bool(document.get("dir_info", {}).get("editable"))


def install_command(extra: str | None = None) -> str:
    """The ``pip install`` that adds ``extra`` (or installs the core) from where this installation
    came from: ``pip install '/path/ingest_toolkit-0.1.0-py3-none-any.whl[spark]'``, ``pip install -e
    '/path/checkout[spark]'``, or by name when nothing was recorded."""
    suffix = f"[{extra}]" if extra else ""
    source = installed_from()
    if source is None:
        return f"pip install '{_NAME}{suffix}'"
    path, editable = source
    return f"pip install {'-e ' if editable else ''}'{path}{suffix}'"
