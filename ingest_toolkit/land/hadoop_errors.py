"""One line for a failure of the JVM side of a landing (Spark's write, the Hadoop FileSystem).

A failed Spark write or Hadoop call reaches Python as a ``Py4JJavaError`` whose text is the
whole Java stack trace, often around the exception that matters (a Spark job abort wrapping a
task failure wrapping an HDFS ``RemoteException``). :func:`describe_failure` walks the Java cause
chain and says, in one line naming the landing root, what state the file system is in and what
to do: a NameNode in safe mode, a NameNode that does not answer, a permission denied, no
DataNode to take a block, an S3 request refused. Anything else becomes the innermost Java
exception's class and first message line. The stack traces stay on the exception chain
(``raise ... from err``) for logs and ``--verbose``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from .diagnose import summarize

__all__ = ["describe_failure", "java_causes"]

_MAX = 400


def java_causes(err: BaseException) -> list[tuple[str, str]]:
    """``(class name, message)`` of the Java exception behind ``err`` and each of its causes,
    outermost first; empty when ``err`` did not come from the JVM."""
    throwable = getattr(err, "java_exception", None)
    found: list[tuple[str, str]] = []
    seen = 0
    while throwable is not None and seen < 20:
        try:
            name = str(throwable.getClass().getName())
            message = str(throwable.getMessage() or "")
            if name == "org.apache.hadoop.ipc.RemoteException":  # the server side's class
                name = str(throwable.getClassName())
            found.append((name, message))
            throwable = throwable.getCause()
        except Exception:  # the gateway is gone (the JVM died): keep what we have
            break
        seen += 1
    if not found and "Py4J" in type(err).__name__:
        match = re.search(r"^: ([\w.$]+): (.*)$", str(err), re.MULTILINE)
        if match:
            found.append((match.group(1), match.group(2)))
    return found


def describe_failure(err: BaseException, uri: str) -> str:
    """One line saying what failed under ``uri`` (the landing root) and what to do; ``str(err)``
    for an exception that did not come from the JVM, the first line of its message (or the deepest
    ``Caused by:`` of a Java trace carried as text: :func:`~ingest_toolkit.land.diagnose.summarize`)."""
    causes = java_causes(err)
    for name, message in causes:
        for rule in _RULES:
            text = rule(name, message, uri)
            if text:
                return _clip(text)
    if causes:
        name, message = causes[-1]
        return _clip(f"{name}: {_first_line(message)}")
    return summarize(err)  # a trace only as text (Spark Connect, captured errors), or not from the JVM


def _safe_mode(name: str, message: str, uri: str) -> str | None:
    if not name.endswith("SafeModeException") and "safe mode" not in message.lower():
        return None
    why = _first_line(message.split("Name node is in safe mode.", 1)[-1]).strip() or "no reason given"
    return (f"the NameNode of {_authority(uri)} is in safe mode, so {uri} is read-only ({why}); nothing was "
            "published: wait until it leaves safe mode (or 'hdfs dfsadmin -safemode leave') and land again")


def _unreachable(name: str, message: str, uri: str) -> str | None:
    if name.endswith(("ConnectException", "EOFException", "NoRouteToHostException", "UnknownHostException",
                      "ConnectTimeoutException")) and ("Call From" in message or "host" in message.lower()):
        server = f"the NameNode of {_authority(uri)}" if uri.startswith("hdfs:") else _authority(uri)
        return (f"{server} does not answer ({name.rsplit('.', 1)[-1]}: {_first_line(message).split(';')[0]}): it is "
                "stopped or restarting, or the address is wrong; nothing was published, land again once it is up")
    return None


def _permission(name: str, message: str, uri: str) -> str | None:
    if not name.endswith(("AccessControlException", "AccessDeniedException")) and \
            not message.startswith("Permission denied"):
        return None
    return (f"permission denied under {uri} ({_first_line(message)}): give the landing's user write access to "
            "the root (hdfs dfs -chown / -chmod, or the bucket policy), or run it as a user that has it "
            "(HADOOP_USER_NAME on a cluster without Kerberos)")


def _no_datanode(name: str, message: str, uri: str) -> str | None:
    match = re.search(r"could only be written to (\d+) of the (\d+) minReplication nodes\. There are (\d+) "
                      r"datanode\(s\) running and (\d+) node\(s\) are excluded", message)
    if match:
        return (f"no DataNode of {_authority(uri)} could store a block ({match.group(3)} DataNode(s) running, "
                f"{match.group(4)} excluded after failing; at least {match.group(2)} needed): bring the "
                "DataNodes back (or lower dfs.replication's minimum) and land again")
    if name.endswith(("IOException", "SocketException", "ClosedChannelException")) and re.search(
            r"All datanodes .* are bad|Failed to connect to|DataStreamer|Unable to create new block|"
            r"does not have enough number of replicas", message):
        return (f"writing to {_authority(uri)} failed in the DataNode pipeline ({_first_line(message)}): a DataNode "
                "died or is unreachable; bring it back and land again")
    return None


def _quota(name: str, message: str, uri: str) -> str | None:
    match = re.search(r"The (DiskSpace|NameSpace) quota of (\S+) is exceeded: (.*)", message)
    if not match:
        return None
    where, usage = f"{_authority(uri)}{match.group(2)}", _first_line(match.group(3))
    return (f"the {match.group(1)} quota of {where} is exhausted ({usage}): raise it "
            "(hdfs dfsadmin -setSpaceQuota / -setQuota) or free space, then land again")


def _s3(name: str, message: str, uri: str) -> str | None:
    if ".s3a." not in name and "software.amazon.awssdk" not in name:
        return None
    return f"the S3 request for {uri} failed ({name.rsplit('.', 1)[-1]}: {_first_line(message)})"


_RULES: list[Callable[[str, str, str], str | None]] = [_safe_mode, _permission, _quota, _no_datanode, _unreachable,
                                                      _s3]


def _authority(uri: str) -> str:
    match = re.match(r"^([a-z0-9+.-]+://[^/]*)", uri)
    return match.group(1) if match else uri


def _first_line(text: Any) -> str:
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    return lines[0] if lines else ""


def _clip(text: str) -> str:
    return text if len(text) <= _MAX else text[:_MAX - 3] + "..."
