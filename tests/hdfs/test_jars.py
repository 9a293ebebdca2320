"""The jar fetcher's answers when something is missing (no Maven, nothing fetched): one line
naming the cause and the fix. Fast: no Maven run, no JVM."""

from __future__ import annotations

from pathlib import Path

import pytest

from ingest_toolkit.hdfs import jars


def test_without_maven_fetch_says_so_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INGEST_HADOOP_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", str(tmp_path))  # no mvn, no javac
    with pytest.raises(jars.HadoopJarsError) as err:
        jars.fetch(("hdfs",))
    assert str(err.value) == ("Maven ('mvn') is not on the PATH: install it (e.g. apt-get install maven) and run "
                              "'ingest-toolkit hdfs fetch' again")


def test_classpath_before_a_fetch_names_the_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INGEST_HADOOP_CACHE", str(tmp_path))
    with pytest.raises(jars.HadoopJarsError, match=r"run 'ingest-toolkit hdfs fetch --s3' \(needs Maven\)"):
        jars.classpath("s3")
    (tmp_path / "hdfs.classpath").write_text(str(tmp_path / "gone.jar") + "\n")
    with pytest.raises(jars.HadoopJarsError, match="gone.jar .* is gone: run 'ingest-toolkit hdfs fetch' again"):
        jars.classpath("hdfs")


def test_the_hadoop_version_is_the_one_pyspark_bundles() -> None:
    import pyspark

    version = jars.hadoop_version()
    assert (Path(pyspark.__file__).parent / "jars" / f"hadoop-client-api-{version}.jar").exists()
    assert jars.cache_dir().name == f"hadoop-{version}" or "INGEST_HADOOP_CACHE" in __import__("os").environ
