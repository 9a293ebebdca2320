"""The Hadoop jars a local HDFS (and ``s3a://``) needs, fetched with the machine's Maven.

PySpark ships Hadoop's shaded client (``hadoop-client-api``/``-runtime``) and nothing else.
:func:`fetch` asks Maven for the artifacts Hadoop publishes next to that client, at the *same*
version (read from PySpark's jars, so the HDFS and Spark's client always match):

* ``hdfs``: ``org.apache.hadoop:hadoop-client-minicluster`` (NameNode and DataNodes, the
  artifact Hadoop publishes for downstream integration tests) and ``slf4j-simple`` for its log;
  the small Java main ``MiniHdfs.java`` of this package is compiled against them with ``javac``.
* ``s3``: ``org.apache.hadoop:hadoop-aws`` and the AWS SDK v2 bundle its POM names (about
  700 MB, downloaded once), for Spark's ``s3a://`` file system.

Maven keeps the artifacts in its local repository (``~/.m2`` unless its settings say
otherwise); this module only writes, under :func:`cache_dir`, the resolved classpath of each
kind and the compiled classes. A second fetch runs Maven offline and takes a few seconds.

The classes are kept per version of ``MiniHdfs.java`` (``classes-<digest of the source>``):
checkouts of different versions sharing one cache each run their own, and a cluster never
starts with classes of another version (its control protocol may differ): :func:`classpath`
refuses, naming ``ingest-toolkit hdfs fetch``, which compiles them (javac only, once the jars
are fetched).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from ..errors import IngestError

__all__ = ["KINDS", "HadoopJarsError", "cache_dir", "classpath", "fetch", "hadoop_version", "java_command"]

KINDS = ("hdfs", "s3")
_ARTIFACTS = {
    "hdfs": [("org.apache.hadoop", "hadoop-client-minicluster", "{hadoop}"), ("org.slf4j", "slf4j-simple", "1.7.36")],
    "s3": [("org.apache.hadoop", "hadoop-aws", "{hadoop}")],
}
_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.6.1"
_ATTEMPTS = 3


class HadoopJarsError(IngestError):
    """The jars are missing and cannot be fetched; the message names the cause and the fix."""


def hadoop_version() -> str:
    """The Hadoop version of PySpark's bundled client jars (``hadoop-client-api-<v>.jar``)."""
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    for jar in sorted(jars.glob("hadoop-client-api-*.jar")):
        match = re.fullmatch(r"hadoop-client-api-(.+)\.jar", jar.name)
        if match:
            return match.group(1)
    raise HadoopJarsError(f"no hadoop-client-api-*.jar in {jars}: this PySpark has no bundled Hadoop client")


def cache_dir() -> Path:
    """``INGEST_HADOOP_CACHE``, else ``$XDG_CACHE_HOME/ingest-toolkit/hadoop-<version>``
    (``~/.cache/...``): small files only (classpaths, compiled classes, the fetch log)."""
    if os.environ.get("INGEST_HADOOP_CACHE"):
        return Path(os.environ["INGEST_HADOOP_CACHE"]).expanduser().resolve()
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "ingest-toolkit" / f"hadoop-{hadoop_version()}"


def classpath(kind: str) -> list[str]:
    """The jars of ``kind`` (``hdfs`` with the classes compiled from this package's
    ``MiniHdfs.java`` first); raises HadoopJarsError naming the fetch command when they were not
    fetched (or Maven's repository lost them) or compiled."""
    jars = _listed_jars(kind)
    if kind != "hdfs":
        return jars
    classes = _classes_dir(cache_dir())
    if not _compiled(classes):
        raise HadoopJarsError(f"this version of MiniHdfs.java is not compiled yet ({classes} is missing): run "
                              "'ingest-toolkit hdfs fetch' (needs javac; offline once the jars are fetched)")
    return [str(classes), *jars]


def _listed_jars(kind: str) -> list[str]:
    """The jars of ``kind`` a fetch listed (compiled classes left out); every one still there."""
    listing = cache_dir() / f"{kind}.classpath"
    if not listing.exists():
        raise HadoopJarsError(f"the {kind} jars are not fetched yet ({listing} is missing): run "
                              f"'ingest-toolkit hdfs fetch{' --s3' if kind == 's3' else ''}' (needs Maven)")
    entries = [e for e in listing.read_text().strip().split(os.pathsep) if e and not _is_classes(Path(e))]
    missing = [e for e in entries if not Path(e).exists()]
    if missing:
        raise HadoopJarsError(f"{missing[0]} (listed in {listing}) is gone: run 'ingest-toolkit hdfs fetch"
                              f"{' --s3' if kind == 's3' else ''}' again")
    return entries


def _is_classes(entry: Path) -> bool:
    """A compiled-classes directory of the cache (listed first by fetches of earlier versions)."""
    return entry.parent == cache_dir() and entry.name.startswith("classes")


def _classes_dir(target: Path) -> Path:
    """Where the classes of this package's ``MiniHdfs.java`` go: one directory per source version."""
    digest = hashlib.sha256(Path(__file__).with_name("MiniHdfs.java").read_bytes()).hexdigest()[:12]
    return target / f"classes-{digest}"


def java_command() -> str:
    """``$JAVA_HOME/bin/java`` when set, else ``java`` from the PATH."""
    home = os.environ.get("JAVA_HOME")
    java = Path(home) / "bin" / "java" if home else shutil.which("java")
    if java is None or not Path(java).exists():
        raise HadoopJarsError("no Java found: install a JDK 17 (java and javac) or set JAVA_HOME")
    return str(java)


def fetch(kinds: tuple[str, ...] = ("hdfs",), *, log: Path | None = None) -> dict[str, list[str]]:
    """Resolve (downloading when needed) the jars of each kind; compile ``MiniHdfs.java`` for
    ``hdfs``. Returns kind -> classpath. Raises HadoopJarsError with a one-line reason.

    One fetch at a time per cache: a second one (a test session while ``.ci/run``'s fetch is
    still downloading) waits for the first and then finds everything in place."""
    target = cache_dir()
    target.mkdir(parents=True, exist_ok=True)
    with _exclusive(target / "fetch.lock"):
        return _fetch(kinds, target, log or target / "fetch.log")


@contextlib.contextmanager
def _exclusive(path: Path) -> Iterator[None]:
    with open(path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _fetch(kinds: tuple[str, ...], target: Path, log: Path) -> dict[str, list[str]]:
    version = hadoop_version()
    found = {}
    for kind in kinds:
        try:
            jars = _listed_jars(kind)  # fetched before and every jar still in place: no Maven
        except HadoopJarsError:
            jars = _resolve(_maven(), kind, version, log)
            _publish(target / f"{kind}.classpath", os.pathsep.join(jars))
        found[kind] = [_compile(jars, target, log), *jars] if kind == "hdfs" else jars
    return found


def _maven() -> str:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise HadoopJarsError("Maven ('mvn') is not on the PATH: install it (e.g. apt-get install maven) and run "
                              "'ingest-toolkit hdfs fetch' again")
    return mvn


def _pom(kind: str, version: str) -> str:
    deps = "".join(f"<dependency><groupId>{g}</groupId><artifactId>{a}</artifactId>"
                   f"<version>{v.format(hadoop=version)}</version></dependency>" for g, a, v in _ARTIFACTS[kind])
    return ('<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
            f"<groupId>ingest-toolkit</groupId><artifactId>hadoop-{kind}</artifactId><version>{version}</version>"
            f"<packaging>pom</packaging><dependencies>{deps}</dependencies></project>")


def _resolve(mvn: str, kind: str, version: str, log: Path) -> list[str]:
    """Maven offline first (everything cached: seconds, no network), then online with retries."""
    with tempfile.TemporaryDirectory(prefix=f"ingest-hadoop-{kind}-") as work:
        (Path(work) / "pom.xml").write_text(_pom(kind, version))
        out = Path(work) / "classpath.txt"
        goal = [f"{_PLUGIN}:build-classpath", f"-Dmdep.outputFile={out}", "-Dmdep.includeScope=runtime"]
        if _mvn([mvn, "-B", "-q", "-o", *goal], work, log) == 0 and out.exists():
            return [p for p in out.read_text().strip().split(os.pathsep) if p]
        for attempt in range(1, _ATTEMPTS + 1):
            network = ["-Dmaven.wagon.http.retryHandler.count=3", "-Dmaven.wagon.httpconnectionManager.ttlSeconds=25"]
            if _mvn([mvn, "-B", "-q", *network, *goal], work, log) == 0 and out.exists():
                return [p for p in out.read_text().strip().split(os.pathsep) if p]
            if attempt < _ATTEMPTS:
                time.sleep(5 * attempt)
    artifacts = ", ".join(f"{g}:{a}:{v.format(hadoop=version)}" for g, a, v in _ARTIFACTS[kind])
    raise HadoopJarsError(f"Maven could not fetch {artifacts} after {_ATTEMPTS} attempts ({_last_error(log)}): "
                          f"check the network and Maven's settings (mirrors, proxy); full output in {log}")


def _mvn(command: list[str], cwd: str, log: Path) -> int:
    with log.open("a") as out:
        out.write(f"\n$ {' '.join(command)}\n")
        out.flush()
        return subprocess.run(command, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                              check=False).returncode


def _last_error(log: Path) -> str:
    lines = [line.strip() for line in log.read_text(errors="replace").splitlines() if "[ERROR]" in line]
    text = lines[0].replace("[ERROR]", "").strip() if lines else "no error line in its output"
    return text[:300]


def _compile(jars: list[str], target: Path, log: Path) -> str:
    """``MiniHdfs.java`` compiled into its version's directory (:func:`_classes_dir`; built aside,
    then renamed into place), unless it is there already."""
    classes = _classes_dir(target)
    if _compiled(classes):
        return str(classes)
    javac = shutil.which("javac", path=str(Path(os.environ["JAVA_HOME"]) / "bin")) if os.environ.get(
        "JAVA_HOME") else shutil.which("javac")
    if javac is None:
        raise HadoopJarsError("javac is not on the PATH: install a JDK 17 (not only a JRE), or set JAVA_HOME")
    source = Path(__file__).with_name("MiniHdfs.java")
    build = Path(tempfile.mkdtemp(prefix=".classes-", dir=target))
    with log.open("a") as out:
        done = subprocess.run([javac, "-d", str(build), "-cp", os.pathsep.join(jars), str(source)], stdout=out,
                              stderr=subprocess.STDOUT, check=False)
    if done.returncode != 0:
        shutil.rmtree(build, ignore_errors=True)
        raise HadoopJarsError(f"javac could not compile {source.name} (see {log})")
    (build / ".source").write_text(source.read_text())
    try:
        build.rename(classes)
    except OSError:  # another fetch put the (identical) classes there a moment ago
        shutil.rmtree(build, ignore_errors=True)
    return str(classes)


def _compiled(classes: Path) -> bool:
    """Whether ``classes`` holds MiniHdfs compiled from this package's source."""
    marker = classes / ".source"
    source = Path(__file__).with_name("MiniHdfs.java")
    return (classes / "MiniHdfs.class").exists() and marker.exists() and marker.read_text() == source.read_text()


def _publish(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(text + "\n")
    os.replace(tmp, path)
