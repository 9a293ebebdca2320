"""A client of the agent's admin HTTP endpoint (:mod:`.admin`): JSON in, JSON out.

``ingest-toolkit status`` reads ``GET /status`` with it, ``channel acknowledge`` posts
acknowledgements. The token goes in ``Authorization: Bearer``; with ``tls_ca`` the connection is
HTTPS and that certificate is the one trusted (an agent's own self-signed certificate, as the
configuration names it). A failure is an :class:`AdminRequestError` carrying the HTTP status (None
when there was no answer) and the agent's own ``error`` text.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from typing import Any

from .errors import AdminRequestError

__all__ = ["AdminClient"]


class AdminClient:
    """Requests to the admin endpoint at ``address`` (``host:port``)."""

    def __init__(self, address: str, *, token: str | None = None, tls_ca: str | None = None,
                 timeout: float = 10.0) -> None:
        self.base = f"{'https' if tls_ca else 'http'}://{address}"
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._context = ssl.create_default_context(cafile=tls_ca) if tls_ca else None
        self._timeout = timeout

    def get(self, path: str) -> dict[str, Any]:
        """``GET path`` as a JSON object."""
        return self._request(urllib.request.Request(self.base + path, headers=self._headers))

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """``POST path`` with a JSON body; the answer as a JSON object."""
        headers = {**self._headers, "Content-Type": "application/json"}
        return self._request(urllib.request.Request(self.base + path, data=json.dumps(body).encode(),
                                                    headers=headers, method="POST"))

    def _request(self, request: urllib.request.Request) -> dict[str, Any]:
        url = request.full_url
        try:
            with urllib.request.urlopen(request, timeout=self._timeout, context=self._context) as answer:  # noqa: S310
                document = json.loads(answer.read())
        except urllib.error.HTTPError as err:
            raise AdminRequestError(f"{url}: HTTP {err.code}, {_error_text(err)}", url=url, status=err.code,
                                    text=_error_text(err)) from None
        except (urllib.error.URLError, OSError, ValueError) as err:
            reason = getattr(err, "reason", err)
            raise AdminRequestError(f"{url}: no answer ({reason})", url=url, status=None, text=str(reason)) from None
        if not isinstance(document, dict):
            raise AdminRequestError(f"{url}: the answer is not a JSON object", url=url, status=None, text="")
        return document


def _error_text(err: urllib.error.HTTPError) -> str:
    try:
        return str(json.loads(err.read()).get("error", err.reason))
    except (ValueError, OSError, AttributeError):
        return str(err.reason)
