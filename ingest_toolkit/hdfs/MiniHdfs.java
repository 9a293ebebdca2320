/*
 * A single-machine HDFS for trying and testing ingest-toolkit: one NameNode and N DataNodes in
 * this JVM (Hadoop's MiniDFSCluster from hadoop-client-minicluster), bound to 127.0.0.1, with its
 * metadata and blocks under a directory the user names.
 *
 * Compiled by `ingest-toolkit hdfs fetch` against the jars Maven fetched; started by
 * `ingest-toolkit hdfs start` (ingest_toolkit/hdfs/cluster.py), which documents the protocol:
 *
 *   stdout: one JSON object per line. First {"event": "ready", ...} with the URI and every port,
 *           then one reply per command: {"ok": true, ...} or {"ok": false, "error": "..."}.
 *   stdin:  one command per line: status | stop-datanode I | start-datanode I |
 *           safemode enter|leave|get | stop-namenode | start-namenode | shutdown.
 *           At end of input the cluster keeps running, unless --stop-on-eof was given (a
 *           controlling process that dies must not leave an HDFS behind).
 *   SIGTERM / SIGINT: clean shutdown (the JVM's shutdown hook), exit code 0.
 *
 * Usage: MiniHdfs --data DIR [--port P] [--http-port P] [--datanodes N] [--stop-on-eof]
 *                 [--conf key=value]...
 */

import java.io.BufferedReader;
import java.io.File;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.SafeModeAction;
import org.apache.hadoop.hdfs.DistributedFileSystem;
import org.apache.hadoop.hdfs.MiniDFSCluster;
import org.apache.hadoop.hdfs.server.datanode.DataNode;
import org.apache.hadoop.util.ShutdownHookManager;
import org.apache.hadoop.util.VersionInfo;

public final class MiniHdfs {
  private final MiniDFSCluster cluster;
  private final File data;
  private final Map<Integer, MiniDFSCluster.DataNodeProperties> stopped = new HashMap<>();
  private boolean namenodeUp = true;
  private boolean stoppedAll = false;

  private MiniHdfs(MiniDFSCluster cluster, File data) {
    this.cluster = cluster;
    this.data = data;
  }

  public static void main(String[] args) throws Exception {
    Map<String, String> opts = new HashMap<>();
    Configuration conf = new Configuration();
    boolean stopOnEof = false;
    for (int i = 0; i < args.length; i++) {
      switch (args[i]) {
        case "--stop-on-eof": stopOnEof = true; break;
        case "--conf": {
          String[] kv = args[++i].split("=", 2);
          conf.set(kv[0], kv.length > 1 ? kv[1] : "");
          break;
        }
        default: opts.put(args[i], args[++i]);
      }
    }
    File data = new File(require(opts, "--data")).getAbsoluteFile();
    int datanodes = Integer.parseInt(opts.getOrDefault("--datanodes", "1"));
    defaults(conf, datanodes);
    File base = new File(data, "cluster");  // MiniDFSCluster empties it when formatting: nothing else in it
    boolean fresh = !new File(base, "name-0-1").exists();
    MiniDFSCluster cluster = new MiniDFSCluster.Builder(conf, base)
        .nameNodePort(Integer.parseInt(opts.getOrDefault("--port", "0")))
        .nameNodeHttpPort(Integer.parseInt(opts.getOrDefault("--http-port", "0")))
        .numDataNodes(datanodes)
        .format(fresh)
        .skipFsyncForTesting(false)
        .checkExitOnShutdown(false)
        .build();
    cluster.waitActive();
    MiniHdfs self = new MiniHdfs(cluster, data);
    // Hadoop's own hook manager: a plain JVM hook would run beside Hadoop's and trip over them.
    ShutdownHookManager.get().addShutdownHook(self::stop, Integer.MAX_VALUE);
    emit(self.status("\"event\": \"ready\", \"formatted\": " + fresh));
    self.serve(stopOnEof);
  }

  /** Settings a one-machine cluster needs; --conf overrides any of them. */
  private static void defaults(Configuration conf, int datanodes) {
    setIfUnset(conf, "dfs.replication", Integer.toString(Math.min(datanodes, 3)));
    setIfUnset(conf, "dfs.datanode.synconclose", "true");  // a closed block is on the DataNode's disk
    setIfUnset(conf, "dfs.permissions.enabled", "true");
    setIfUnset(conf, "dfs.namenode.rpc-bind-host", "127.0.0.1");
    setIfUnset(conf, "dfs.namenode.http-bind-host", "127.0.0.1");
    setIfUnset(conf, "dfs.datanode.address", "127.0.0.1:0");
    setIfUnset(conf, "dfs.datanode.http.address", "127.0.0.1:0");
    setIfUnset(conf, "dfs.datanode.ipc.address", "127.0.0.1:0");
    setIfUnset(conf, "hadoop.security.authentication", "simple");
  }

  private static void setIfUnset(Configuration conf, String key, String value) {
    if (conf.get(key) == null || conf.getPropertySources(key) == null
        || conf.getPropertySources(key)[0].endsWith("-default.xml")) {
      conf.set(key, value);
    }
  }

  private static String require(Map<String, String> opts, String key) {
    String value = opts.get(key);
    if (value == null) {
      System.err.println("MiniHdfs: " + key + " is required");
      System.exit(2);
    }
    return value;
  }

  private void serve(boolean stopOnEof) throws Exception {
    BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    String line;
    while ((line = in.readLine()) != null) {
      line = line.trim();
      if (line.isEmpty()) {
        continue;
      }
      if (line.equals("shutdown")) {
        stop();
        System.exit(0);
      }
      try {
        emit(command(line.split("\\s+")));
      } catch (Exception err) {
        emit("{\"ok\": false, \"command\": " + quote(line) + ", \"error\": " + quote(String.valueOf(err)) + "}");
      }
    }
    if (stopOnEof) {
      stop();
      System.exit(0);
    }
    Thread.currentThread().join();  // until a signal stops the JVM
  }

  private String command(String[] words) throws Exception {
    switch (words[0]) {
      case "status": return status("\"ok\": true");
      case "stop-datanode": {
        int i = Integer.parseInt(words[1]);
        if (!stopped.containsKey(i)) {
          stopped.put(i, cluster.stopDataNode(indexOf(i)));
        }
        return status("\"ok\": true");
      }
      case "start-datanode": {
        int i = Integer.parseInt(words[1]);
        MiniDFSCluster.DataNodeProperties props = stopped.remove(i);
        if (props != null) {
          cluster.restartDataNode(props, true);  // the same ports
          cluster.waitActive();
          cluster.triggerHeartbeats();
        }
        return status("\"ok\": true");
      }
      case "safemode": return safeMode(words[1]);
      case "stop-namenode":
        cluster.shutdownNameNode(0);
        namenodeUp = false;
        return "{\"ok\": true, \"namenode\": false}";
      case "start-namenode":
        cluster.restartNameNode(0, true);
        namenodeUp = true;
        return status("\"ok\": true");
      default: throw new IllegalArgumentException("unknown command " + words[0]);
    }
  }

  /** The position in cluster.getDataNodes() of DataNode `i` (stopped ones leave the list). */
  private int indexOf(int i) {
    int position = i;
    for (int j : stopped.keySet()) {
      if (j < i) {
        position--;
      }
    }
    return position;
  }

  private String safeMode(String action) throws Exception {
    DistributedFileSystem fs = cluster.getFileSystem();
    boolean on;
    switch (action) {
      case "enter": on = fs.setSafeMode(SafeModeAction.ENTER); break;
      case "leave": on = fs.setSafeMode(SafeModeAction.LEAVE); break;
      case "get": on = fs.setSafeMode(SafeModeAction.GET); break;
      default: throw new IllegalArgumentException("safemode enter|leave|get");
    }
    return "{\"ok\": true, \"safemode\": " + on + "}";
  }

  private String status(String head) {
    StringBuilder out = new StringBuilder("{").append(head);
    out.append(", \"uri\": ").append(quote("hdfs://127.0.0.1:" + cluster.getNameNodePort()));
    out.append(", \"namenode_port\": ").append(cluster.getNameNodePort());
    out.append(", \"namenode\": ").append(namenodeUp);
    if (namenodeUp) {
      out.append(", \"namenode_http\": ").append(quote(cluster.getHttpUri(0)));
    }
    out.append(", \"data_dir\": ").append(quote(data.getPath()));
    out.append(", \"hadoop_version\": ").append(quote(VersionInfo.getVersion()));
    out.append(", \"pid\": ").append(ProcessHandle.current().pid());
    List<String> nodes = new ArrayList<>();
    for (DataNode dn : cluster.getDataNodes()) {
      nodes.add("{\"xfer_port\": " + dn.getXferPort() + ", \"http_port\": " + dn.getInfoPort()
          + ", \"ipc_port\": " + dn.getIpcPort() + "}");
    }
    out.append(", \"datanodes_running\": [").append(String.join(", ", nodes)).append("]");
    out.append(", \"datanodes_stopped\": ").append(stopped.keySet());
    return out.append("}").toString();
  }

  private synchronized void stop() {
    if (!stoppedAll) {
      stoppedAll = true;
      // Not cluster.shutdown(): it schedules the whole base directory for deletion at JVM exit,
      // and the data must outlive this process.
      cluster.shutdownDataNodes();
      cluster.shutdownNameNodes();
      emit("{\"event\": \"stopped\"}");
    }
  }

  private static synchronized void emit(String json) {
    System.out.println(json);
    System.out.flush();
  }

  private static String quote(String text) {
    StringBuilder out = new StringBuilder("\"");
    for (char c : text.toCharArray()) {
      if (c == '"' || c == '\\') {
        out.append('\\').append(c);
      } else if (c < 0x20) {
        out.append(String.format("\\u%04x", (int) c));
      } else {
        out.append(c);
      }
    }
    return out.append('"').toString();
  }
}
