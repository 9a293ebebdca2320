"""One-line causes of landing failures: Spark's exception chains and a JVM that cannot start.

A failed Spark write reaches Python as a Py4J or PySpark exception whose text is the whole Java
stack trace (a hundred lines or more), with the cause that matters (``Mkdirs failed to create
...``, ``Permission denied``) at the bottom of its ``Caused by:`` chain. :func:`summarize` finds
it, so that an error message is one line; the full chain stays attached to the raised error
(``raise ... from err``) for ``--verbose`` and for the logs.

A local Spark session needs a Java 17 (or newer) runtime, found the way Spark's launch scripts
find it: ``$JAVA_HOME/bin/java`` when ``JAVA_HOME`` is set, else ``java`` on ``PATH``.
:func:`check_java` says so before the JVM is launched, :func:`explain_start_failure` after it
exited (a Java too old for Spark 4, for instance).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess

from .errors import SparkStartError

__all__ = ["JAVA_MAJOR", "check_java", "explain_start_failure", "find_java", "summarize"]

JAVA_MAJOR = 17  # Spark 4 runs on Java 17 and 21
_LIMIT = 600  # characters of a cause kept in a one-line message
_CAUSED_BY = "Caused by: "
_INSTALL = (f"install a Java {JAVA_MAJOR} runtime (e.g. the package openjdk-{JAVA_MAJOR}-jre-headless) and set "
            "JAVA_HOME to it or put its bin directory on PATH, or set [spark] remote to use a Spark Connect server")


def summarize(err: BaseException) -> str:
    """The root cause of ``err`` on one line.

    For an error carrying a Java stack trace (Py4J, PySpark's captured exceptions, Spark Connect),
    the deepest ``Caused by:`` entry, else the Java exception line; for any other error, the first
    line of its message. Chained Python causes are looked into when ``err`` itself has no trace.
    """
    for candidate in _chain(err):
        cause = _java_cause(str(candidate))
        if cause:
            return _short(cause)
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return _short(lines[0] if lines else type(err).__name__)


def _chain(err: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    current: BaseException | None = err
    while current is not None and current not in seen and len(seen) < 10:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def _java_cause(text: str) -> str | None:
    lines = [line.strip() for line in text.splitlines()]
    causes = [line[len(_CAUSED_BY):] for line in lines if line.startswith(_CAUSED_BY)]
    if causes:
        return causes[-1]
    if not any(line.startswith("at ") for line in lines):
        return None  # no Java frames: not a Java exception's text
    # Py4J: "An error occurred while calling o53.parquet.", then ": <java exception>: <message>"
    for line in lines:
        if line.startswith(": ") or re.match(r"^[a-z][\w$]*(\.[\w$]+)+(Exception|Error)\b", line):
            return line.removeprefix(": ")
    return None


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _LIMIT else text[:_LIMIT - 3] + "..."


def find_java() -> tuple[str | None, str]:
    """``(path of the java executable or None, how it was looked for)``, as Spark's scripts do."""
    home = os.environ.get("JAVA_HOME")
    if home:
        path = os.path.join(home, "bin", "java")
        return (path if os.access(path, os.X_OK) else None), f"JAVA_HOME={home}"
    return shutil.which("java"), "java on PATH (JAVA_HOME is not set)"


def check_java() -> str:
    """The java executable a local Spark session will run; SparkStartError when there is none."""
    path, how = find_java()
    if path is not None:
        return path
    if how.startswith("JAVA_HOME"):
        raise SparkStartError(f"Spark needs Java {JAVA_MAJOR} and {how} has no bin/java: point JAVA_HOME at a "
                              f"Java {JAVA_MAJOR} installation (or unset it to use the java on PATH), or {_INSTALL}")
    raise SparkStartError(f"Spark needs Java {JAVA_MAJOR} and none was found (JAVA_HOME is not set and no java is "
                          f"on PATH): {_INSTALL}")


def java_version(path: str) -> int | None:
    """The major version of the java at ``path`` (``java -version``), None when it cannot tell."""
    try:
        done = subprocess.run([path, "-version"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    match = re.search(r'version "(\d+)(?:\.(\d+))?', done.stderr + done.stdout)
    if match is None:
        return None
    major = int(match.group(1))
    return int(match.group(2) or 0) if major == 1 else major  # "1.8.0_392" is Java 8


def explain_start_failure(err: BaseException) -> SparkStartError:
    """Why the JVM of a local session exited before Spark started (``JAVA_GATEWAY_EXITED``)."""
    path, how = find_java()
    if path is None:
        try:
            check_java()
        except SparkStartError as missing:
            return missing
    assert path is not None
    version = java_version(path)
    if version is not None and version < JAVA_MAJOR:
        return SparkStartError(f"Spark needs Java {JAVA_MAJOR} or newer, and {path} (found through {how}) is Java "
                               f"{version}: {_INSTALL}")
    return SparkStartError(f"the Spark JVM ({path}, found through {how}, Java {version or 'of unknown version'}) "
                           f"exited before Spark started ({summarize(err)}); its own messages are above on stderr "
                           "(memory settings in [spark.conf], a broken SPARK_HOME, ...)")
