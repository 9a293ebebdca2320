"""Security settings shared by the network endpoints (HTTP source, gRPC service, admin).

Endpoints bind to 127.0.0.1 unless configured otherwise. TLS is optional and configured with
PEM files; bearer-token auth is optional and the token is read from an environment variable
named in the configuration, so it never sits in a config file or a command line.
"""

from __future__ import annotations

import hmac
import os
import ssl
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from .errors import ConfigError

__all__ = ["SecuritySettings", "TlsSettings", "bearer_ok", "load_token", "server_ssl_context"]


class TlsSettings(BaseModel):
    """Server certificate and key (PEM); ``client_ca_file`` turns on client-certificate checks."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    cert_file: Path
    key_file: Path
    client_ca_file: Path | None = None

    def read(self) -> tuple[bytes, bytes, bytes | None]:
        """The PEM bytes of certificate, key and client CA; a missing file is a ConfigError."""
        return (_read(self.cert_file, "cert_file"), _read(self.key_file, "key_file"),
                _read(self.client_ca_file, "client_ca_file") if self.client_ca_file else None)


class SecuritySettings(BaseModel):
    """``token_env`` names the environment variable holding the bearer token (unset: no auth)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    token_env: str | None = None
    tls: TlsSettings | None = None


def load_token(settings: SecuritySettings, *, key: str = "security.token_env") -> str | None:
    """The configured bearer token, or None when auth is off. An empty or unset variable that the
    configuration names is an error: silently running without auth would be worse."""
    if settings.token_env is None:
        return None
    token = os.environ.get(settings.token_env, "")
    if not token:
        raise ConfigError(f"environment variable {settings.token_env} (the bearer token) is unset or empty",
                          key=key)
    return token


def bearer_ok(authorization: str | None, token: str | None) -> bool:
    """Whether an ``Authorization`` header value carries the token (constant-time compare)."""
    if token is None:
        return True
    if not authorization or not authorization.startswith("Bearer "):
        return False
    return hmac.compare_digest(authorization[len("Bearer "):].encode(), token.encode())


def server_ssl_context(tls: TlsSettings) -> ssl.SSLContext:
    """A TLS server context for the standard-library HTTP servers."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(str(tls.cert_file), str(tls.key_file))
        if tls.client_ca_file is not None:
            context.load_verify_locations(str(tls.client_ca_file))
            context.verify_mode = ssl.CERT_REQUIRED
    except (OSError, ssl.SSLError) as err:
        raise ConfigError(f"cannot load TLS certificate/key: {err}", key="security.tls") from None
    return context


def _read(path: Path, key: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as err:
        raise ConfigError(f"cannot read {path}: {err.strerror}", key=f"security.tls.{key}") from None
