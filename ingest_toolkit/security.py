"""Security settings shared by the network endpoints (HTTP source, gRPC service, admin) and
the TLS files of their clients.

Endpoints bind to 127.0.0.1 unless configured otherwise; one that binds another address without
TLS and a token says so in a warning (:func:`warn_if_exposed`). TLS is optional and configured
with PEM files; bearer-token auth is optional and the token is read from an environment variable
named in the configuration, so it never sits in a config file or a command line. A client's TLS
files (CA, and for mutual TLS its certificate and key) are read and checked by
:func:`load_client_tls` before any connection is tried, so a wrong file is an error naming it,
not a failed handshake.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from .errors import ConfigError

__all__ = ["CLIENT_TLS_NAMES", "ClientTls", "PathArg", "SecuritySettings", "TlsSettings", "bearer_ok", "is_loopback",
           "load_client_tls", "load_token", "server_ssl_context", "warn_if_exposed"]

PathArg = str | os.PathLike[str]


class TlsSettings(BaseModel):
    """Server certificate and key (PEM); ``client_ca_file`` turns on client-certificate checks."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    cert_file: Path
    key_file: Path
    client_ca_file: Path | None = None

    def read(self) -> tuple[bytes, bytes, bytes | None]:
        """The PEM bytes of certificate, key and client CA; a missing file is a ConfigError."""
        return (_read(self.cert_file, "security.tls.cert_file"), _read(self.key_file, "security.tls.key_file"),
                _read(self.client_ca_file, "security.tls.client_ca_file") if self.client_ca_file else None)


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


def _read(path: PathArg, key: str) -> bytes:
    """The bytes of ``path``; a ConfigError naming ``key`` (the setting or option that gave it)."""
    try:
        return Path(path).read_bytes()
    except OSError as err:
        raise ConfigError(f"{key}: cannot read {os.fspath(path)}: {err.strerror or err}", key=key) from None


# -- clients --------------------------------------------------------------------------------
@dataclass(frozen=True)
class ClientTls:
    """The PEM bytes a TLS client needs: ``root_certificates`` (None: the system's CAs), and for
    mutual TLS ``certificate_chain`` with its ``private_key`` (both None: no client certificate)."""

    root_certificates: bytes | None
    certificate_chain: bytes | None
    private_key: bytes | None


CLIENT_TLS_NAMES = {"ca": "tls_ca", "cert": "tls_cert", "key": "tls_key"}


def load_client_tls(ca_file: PathArg | None, cert_file: PathArg | None, key_file: PathArg | None, *,
                    names: Mapping[str, str] = CLIENT_TLS_NAMES) -> ClientTls:
    """Read and check a client's TLS files; a ConfigError names the file and what is wrong with it.

    A certificate needs its key and the reverse; the key must be the certificate's (unencrypted)
    private key. ``names`` says how the caller calls the three files (``{"ca", "cert", "key"}`` ->
    e.g. ``--tls-cert`` for a command line); the error's ``key`` is that name.
    """
    if (cert_file is None) != (key_file is None):
        given, missing = ("cert", "key") if key_file is None else ("key", "cert")
        raise ConfigError(f"{names[given]} is set but {names[missing]} is not: a client certificate needs its "
                          "private key and the reverse (both PEM files)", key=names[missing])
    ca = None
    if ca_file is not None:
        ca = _read(ca_file, names["ca"])
        _check_certificates(ca, ca_file, names["ca"])
    if cert_file is None or key_file is None:
        return ClientTls(ca, None, None)
    cert, key = _read(cert_file, names["cert"]), _read(key_file, names["key"])
    _check_certificates(cert, cert_file, names["cert"])
    _check_pair(cert_file, key_file, names)
    return ClientTls(ca, cert, key)


def _check_certificates(pem: bytes, path: PathArg, name: str) -> None:
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cadata=pem.decode("ascii", "replace"))
    except ssl.SSLError as err:
        raise ConfigError(f"{name}: {os.fspath(path)} holds no PEM certificate ({err.args[-1]})", key=name) from None


def _check_pair(cert_file: PathArg, key_file: PathArg, names: Mapping[str, str]) -> None:
    try:  # password: a callable returning b"" keeps OpenSSL from prompting on the terminal
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_cert_chain(cert_file, key_file, password=lambda: b"")
    except ssl.SSLError as err:
        if err.reason == "KEY_VALUES_MISMATCH":
            raise ConfigError(f"{names['key']}: {os.fspath(key_file)} is not the private key of the certificate "
                              f"{os.fspath(cert_file)} ({names['cert']})", key=names["key"]) from None
        raise ConfigError(f"{names['key']}: {os.fspath(key_file)} is not an unencrypted PEM private key "
                          f"({err.args[-1]})", key=names["key"]) from None


# -- exposure -------------------------------------------------------------------------------
def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or ``localhost``) only accepts local connections."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def warn_if_exposed(log: logging.Logger, what: str, host: str, *, tls: bool, token: bool) -> bool:
    """Warn (on ``log``) when ``what`` listens on a non-loopback ``host`` without TLS or without a
    token: events and tokens would cross the network in clear, or anyone could call it. Allowed (a
    private network may be trusted), but said once at start. Returns whether it warned."""
    if is_loopback(host) or (tls and token):
        return False
    missing = [name for name, on in (("TLS", tls), ("a bearer token", token)) if not on]
    risks = [risk for risk, on in (("traffic crosses the network in clear", tls),
                                   ("anyone who can reach it can call it", token)) if not on]
    log.warning("%s listens on %s without %s: %s", what, host, " and ".join(missing), "; ".join(risks))
    return True
