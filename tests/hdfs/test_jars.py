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


def test_a_second_fetch_waits_for_the_one_in_progress(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """CI starts the fetch in the background while the first tests run; the HDFS fixtures' own
    fetch must wait for it instead of running a second Maven into the same cache."""
    import threading

    monkeypatch.setenv("INGEST_HADOOP_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", str(tmp_path))  # once it runs, this fetch ends fast: no mvn
    (tmp_path / "cache").mkdir()
    outcome: list[BaseException] = []

    def second() -> None:
        try:
            jars.fetch(("hdfs",))
        except jars.HadoopJarsError as err:
            outcome.append(err)

    with jars._exclusive(tmp_path / "cache" / "fetch.lock"):  # the fetch in progress
        waiting = threading.Thread(target=second)
        waiting.start()
        waiting.join(0.5)
        assert waiting.is_alive() and not outcome
    waiting.join(10)
    assert not waiting.is_alive() and "Maven ('mvn') is not on the PATH" in str(outcome[0])


def test_the_classes_are_those_of_this_version_of_the_source(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Checkouts of different versions share a cache: each gets the classes of its own
    MiniHdfs.java (the control protocol may differ), never those another one compiled."""
    monkeypatch.setenv("INGEST_HADOOP_CACHE", str(tmp_path))
    jar, old = tmp_path / "hadoop.jar", tmp_path / "classes"  # "classes": what earlier versions listed first
    jar.write_bytes(b"")
    old.mkdir()
    (tmp_path / "hdfs.classpath").write_text(f"{old}:{jar}\n")
    with pytest.raises(jars.HadoopJarsError, match=r"not compiled yet .* run 'ingest-toolkit hdfs fetch'"):
        jars.classpath("hdfs")
    mine = jars._classes_dir(tmp_path)
    mine.mkdir()
    (mine / "MiniHdfs.class").write_bytes(b"")
    (mine / ".source").write_text(Path(jars.__file__).with_name("MiniHdfs.java").read_text())
    assert jars.classpath("hdfs") == [str(mine), str(jar)]
    assert mine.name.startswith("classes-") and mine != old
