"""One-line reasons for JVM failures (hadoop_errors.describe_failure), on Java exception chains
shaped as py4j hands them over; the same texts are checked end to end on a real HDFS in
tests/hdfs."""

from __future__ import annotations

from typing import Any

from ingest_toolkit.land.hadoop_errors import describe_failure, java_causes

ROOT = "hdfs://127.0.0.1:9000/landing"


class _Class:
    def __init__(self, name: str) -> None:
        self._name = name

    def getName(self) -> str:  # noqa: N802 (py4j's Java names)
        return self._name


class _Throwable:
    def __init__(self, name: str, message: str, cause: _Throwable | None = None, server: str = "") -> None:
        self._class, self._message, self._cause, self._server = _Class(name), message, cause, server

    def getClass(self) -> _Class:  # noqa: N802
        return self._class

    def getMessage(self) -> str:  # noqa: N802
        return self._message

    def getCause(self) -> _Throwable | None:  # noqa: N802
        return self._cause

    def getClassName(self) -> str:  # noqa: N802
        return self._server


class Py4JJavaError(Exception):
    def __init__(self, java_exception: Any) -> None:
        super().__init__("An error occurred while calling o66.parquet.\n: trace\n\tat somewhere")
        self.java_exception = java_exception


def _job_abort(inner: _Throwable) -> Py4JJavaError:
    return Py4JJavaError(_Throwable("org.apache.spark.SparkException", "Job aborted due to stage failure:\nmore",
                                    _Throwable("org.apache.spark.SparkException", "Task failed", inner)))


def test_each_known_state_is_named_with_the_uri_in_one_line() -> None:
    cases = {
        "is in safe mode": _Throwable("org.apache.hadoop.hdfs.server.namenode.SafeModeException",
                                      "Cannot create directory /x. Name node is in safe mode.\nIt was turned on "
                                      "manually. Use \"hdfs dfsadmin -safemode leave\" to turn safe mode off."),
        "does not answer": _Throwable("java.net.ConnectException", "Call From vm/127.0.0.1 to localhost:9000 failed "
                                      "on connection exception: java.net.ConnectException: Connection refused; For"),
        "permission denied under": _Throwable(
            "org.apache.hadoop.ipc.RemoteException", "Permission denied: user=alice, access=WRITE, "
            "inode=\"/landing\":root:supergroup:drwxr-xr-x",
            server="org.apache.hadoop.security.AccessControlException"),
        "could store a block (1 DataNode(s) running, 1 excluded": _Throwable(
            "org.apache.hadoop.ipc.RemoteException", "File /x could only be written to 0 of the 1 minReplication "
            "nodes. There are 1 datanode(s) running and 1 node(s) are excluded in this operation.",
            server="java.io.IOException"),
        "failed in the DataNode pipeline (Unable to close file": _Throwable(  # a DataNode lost while closing
            "java.io.IOException", "Unable to close file because the last block BP-1-127.0.0.1-1:blk_1_1 does not "
            "have enough number of replicas."),
        "DiskSpace quota of hdfs://127.0.0.1:9000/landing/events is exhausted": _Throwable(
            "org.apache.hadoop.hdfs.protocol.DSQuotaExceededException", "The DiskSpace quota of /landing/events is "
            "exceeded: quota = 1024 B = 1 KB but diskspace consumed = 134217728 B = 128 MB"),
    }
    for expected, inner in cases.items():
        text = describe_failure(_job_abort(inner), ROOT)
        assert expected in text and "\n" not in text and len(text) <= 400, (expected, text)
        assert "127.0.0.1:9000" in text


def test_unknown_jvm_failures_give_the_innermost_exception_and_others_pass_through() -> None:
    err = _job_abort(_Throwable("java.lang.IllegalStateException", "something odd\nsecond line"))
    assert describe_failure(err, ROOT) == "java.lang.IllegalStateException: something odd"
    assert [name for name, _ in java_causes(err)][-1] == "java.lang.IllegalStateException"
    plain = ValueError("a toolkit error, one line already")
    assert describe_failure(plain, ROOT) == "a toolkit error, one line already" and java_causes(plain) == []
