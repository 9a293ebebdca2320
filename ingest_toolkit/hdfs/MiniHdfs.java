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
 *   stdin:  one command per line, optionally tagged "@<id> " (the reply then carries "id"):
 *           status | stop-datanode I | start-datanode I | safemode enter|leave|get |
 *           stop-namenode | start-namenode | shutdown.
 *           Commands change the cluster one at a time, in the order they arrive; what a command
 *           then waits for (a restarted DataNode registering, a restarted NameNode leaving safe
 *           mode) runs beside the later commands, bounded by WAIT_MS, so a slow command never
 *           keeps the others from answering. Replies may therefore come out of order: the id
 *           pairs them.
 *           At end of input the cluster keeps running, unless --stop-on-eof was given: then it
 *           stops as soon as its input closes or the process that started it exits, whatever
 *           command is in progress (a controlling process that dies must not leave an HDFS
 *           behind).
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
import java.util.TreeSet;
import java.util.concurrent.Callable;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.ThreadFactory;
import java.util.concurrent.TimeoutException;
import java.util.function.BooleanSupplier;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.SafeModeAction;
import org.apache.hadoop.hdfs.DistributedFileSystem;
import org.apache.hadoop.hdfs.MiniDFSCluster;
import org.apache.hadoop.hdfs.protocol.DatanodeInfo;
import org.apache.hadoop.hdfs.protocol.HdfsConstants.DatanodeReportType;
import org.apache.hadoop.hdfs.server.datanode.DataNode;
import org.apache.hadoop.hdfs.server.datanode.DataNodeTestUtils;
import org.apache.hadoop.util.ShutdownHookManager;
import org.apache.hadoop.util.VersionInfo;

public final class MiniHdfs {
  /** How long a command waits for what it started (a DataNode registering, the NameNode up). */
  private static final long WAIT_MS = 90_000;

  private final MiniDFSCluster cluster;
  private final Configuration conf;
  private final File data;
  private final int port;
  private final DataNode[] nodes;  // by the index users name; null while stopped
  private final Map<Integer, MiniDFSCluster.DataNodeProperties> stopped = new HashMap<>();
  private final Object changes = new Object();  // one change of the cluster at a time, and stop()
  private final ExecutorService actions = Executors.newSingleThreadExecutor(daemons("hdfs-command"));
  private final ExecutorService waits = Executors.newCachedThreadPool(daemons("hdfs-wait"));
  private volatile boolean namenodeUp = true;
  private boolean stoppedAll = false;

  /** A reply that is complete when the command's change is made (nothing to wait for). */
  private record Ready(String json) implements Callable<String> {
    public String call() {
      return json;
    }
  }

  private MiniHdfs(MiniDFSCluster cluster, Configuration conf, File data) {
    this.cluster = cluster;
    this.conf = conf;
    this.data = data;
    this.port = cluster.getNameNodePort();
    this.nodes = cluster.getDataNodes().toArray(new DataNode[0]);
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
    MiniHdfs self = new MiniHdfs(cluster, conf, data);
    // Hadoop's own hook manager: a plain JVM hook would run beside Hadoop's and trip over them.
    ShutdownHookManager.get().addShutdownHook(self::stop, Integer.MAX_VALUE);
    if (stopOnEof) {
      self.stopWithParent();
    }
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

  private static ThreadFactory daemons(String name) {
    return task -> {
      Thread thread = new Thread(task, name);
      thread.setDaemon(true);
      return thread;
    };
  }

  /** The process that started this one exits: stop, even if its end of stdin stays open
   * elsewhere (a descriptor inherited by another process). Checked by the JVM every few seconds. */
  private void stopWithParent() {
    ProcessHandle.current().parent().ifPresent(parent -> parent.onExit().thenRun(() -> {
      stop();
      System.exit(0);
    }));
  }

  /** Reads commands until the input ends; the reading never waits for a command to finish. */
  private void serve(boolean stopOnEof) throws Exception {
    BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    String line;
    while ((line = in.readLine()) != null) {
      line = line.trim();
      String id = null;
      if (line.startsWith("@")) {
        String[] tagged = line.split("\\s+", 2);
        id = tagged[0].substring(1);
        line = tagged.length > 1 ? tagged[1].trim() : "";
      }
      if (line.isEmpty()) {
        continue;
      }
      if (line.equals("shutdown")) {
        stop();
        System.exit(0);
      }
      submit(id, line);
    }
    if (stopOnEof) {
      stop();
      System.exit(0);
    }
    Thread.currentThread().join();  // until a signal stops the JVM
  }

  /** The command's change runs after the earlier commands' changes; its wait, if any, beside them. */
  private void submit(String id, String line) {
    actions.submit(() -> {
      Callable<String> reply;
      try {
        synchronized (changes) {
          reply = command(line.split("\\s+"));
        }
      } catch (Exception err) {
        emit(failure(id, line, err));
        return;
      }
      if (reply instanceof Ready ready) {
        emit(tagged(id, ready.json()));
        return;
      }
      waits.submit(() -> {
        try {
          emit(tagged(id, reply.call()));
        } catch (Exception err) {
          emit(failure(id, line, err));
        }
      });
    });
  }

  private Callable<String> command(String[] words) throws Exception {
    switch (words[0]) {
      case "status": return new Ready(status("\"ok\": true"));
      case "stop-datanode": return stopDataNode(index(words));
      case "start-datanode": return startDataNode(index(words));
      case "safemode": return new Ready(safeMode(words.length > 1 ? words[1] : ""));
      case "stop-namenode":
        cluster.shutdownNameNode(0);
        namenodeUp = false;
        return new Ready(status("\"ok\": true"));
      case "start-namenode": return startNameNode();
      default: throw new IllegalArgumentException("unknown command " + words[0]);
    }
  }

  private int index(String[] words) {
    int i = words.length > 1 ? Integer.parseInt(words[1]) : -1;
    if (i < 0 || i >= nodes.length) {
      throw new IllegalArgumentException("no DataNode " + (words.length > 1 ? words[1] : "given")
          + ": name one of 0.." + (nodes.length - 1));
    }
    return i;
  }

  /** DataNode i stops (by its address: the cluster's own list reorders on restarts). The
   * NameNode still counts it live until its heartbeats expire (about 10.5 minutes). */
  private Callable<String> stopDataNode(int i) {
    DataNode node = nodes[i];
    if (node != null) {
      stopped.put(i, cluster.stopDataNode(node.getDatanodeId().getXferAddr()));
      nodes[i] = null;
    }
    return new Ready(status("\"ok\": true"));
  }

  /** DataNode i restarts on its ports; the reply waits for that DataNode only (not for the whole
   * cluster, which counts a stopped DataNode live until its heartbeats expire). */
  private Callable<String> startDataNode(int i) throws Exception {
    MiniDFSCluster.DataNodeProperties props = stopped.remove(i);
    if (props == null) {
      return new Ready(status("\"ok\": true"));
    }
    long since = System.currentTimeMillis();
    cluster.restartDataNode(props, true);  // the same ports; appended to the cluster's list
    List<DataNode> running = cluster.getDataNodes();
    DataNode node = running.get(running.size() - 1);
    nodes[i] = node;
    return () -> {
      long deadline = System.currentTimeMillis() + WAIT_MS;
      cluster.waitDatanodeFullyStarted(node, (int) WAIT_MS);
      awaitHeartbeat(node, since, deadline, "DataNode " + i);
      return status("\"ok\": true");
    };
  }

  /** The NameNode restarts on its port from its image and edits; the reply waits until every
   * running DataNode has registered with it and it has left safe mode. */
  private Callable<String> startNameNode() throws Exception {
    if (namenodeUp) {
      return new Ready(status("\"ok\": true"));
    }
    long since = System.currentTimeMillis();
    cluster.restartNameNode(0, false);
    namenodeUp = true;
    List<DataNode> running = runningNodes();
    return () -> {
      long deadline = System.currentTimeMillis() + WAIT_MS;
      for (DataNode node : running) {
        awaitHeartbeat(node, since, deadline, "DataNode " + indexOf(node));
      }
      await(() -> !cluster.getNameNode(0).isInSafeMode(), deadline, "the restarted NameNode is still in safe "
          + "mode (the blocks of a stopped DataNode are missing?): start it, or send 'safemode leave'");
      return status("\"ok\": true");
    };
  }

  private List<DataNode> runningNodes() {
    List<DataNode> running = new ArrayList<>();
    for (DataNode node : nodes) {
      if (node != null) {
        running.add(node);
      }
    }
    return running;
  }

  private int indexOf(DataNode node) {
    for (int i = 0; i < nodes.length; i++) {
      if (nodes[i] == node) {
        return i;
      }
    }
    return -1;
  }

  /** Until the NameNode has registered `node` (after `since`) and then seen a heartbeat of it. */
  private void awaitHeartbeat(DataNode node, long since, long deadline, String name) throws Exception {
    String unregistered = name + " did not register with the NameNode within " + WAIT_MS / 1000 + " s";
    await(() -> lastHeartbeat(node) >= since, deadline, unregistered);
    long registered = lastHeartbeat(node);  // registering counts as a heartbeat with no storage report
    await(() -> {
      try {
        DataNodeTestUtils.triggerHeartbeat(node);
      } catch (Exception err) {
        return false;
      }
      return lastHeartbeat(node) > registered;
    }, deadline, name + " registered, but the NameNode saw no heartbeat of it within " + WAIT_MS / 1000 + " s");
  }

  /** When the NameNode last heard from `node` (milliseconds since the epoch), by the same report
   * `hdfs dfsadmin -report` reads; 0 when it does not count it live or does not answer. */
  private long lastHeartbeat(DataNode node) {
    if (!namenodeUp) {
      return 0;
    }
    try {
      for (DatanodeInfo live : cluster.getFileSystem().getDataNodeStats(DatanodeReportType.LIVE)) {
        if (live.getDatanodeUuid().equals(node.getDatanodeUuid())) {
          return live.getLastUpdate();
        }
      }
    } catch (Exception err) {
      return 0;  // the NameNode is starting: asked again
    }
    return 0;
  }

  private static void await(BooleanSupplier condition, long deadline, String failure) throws Exception {
    while (!condition.getAsBoolean()) {
      if (System.currentTimeMillis() > deadline) {
        throw new TimeoutException(failure);
      }
      Thread.sleep(50);
    }
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
    out.append(", \"uri\": ").append(quote("hdfs://127.0.0.1:" + port));
    out.append(", \"namenode_port\": ").append(port);
    out.append(", \"namenode\": ").append(namenodeUp);
    if (namenodeUp) {
      out.append(", \"namenode_http\": ").append(quote(cluster.getHttpUri(0)));
    }
    out.append(", \"replication\": ").append(conf.getInt("dfs.replication", 3));
    out.append(", \"data_dir\": ").append(quote(data.getPath()));
    out.append(", \"hadoop_version\": ").append(quote(VersionInfo.getVersion()));
    out.append(", \"pid\": ").append(ProcessHandle.current().pid());
    List<String> running = new ArrayList<>();
    TreeSet<Integer> down = new TreeSet<>();
    for (int i = 0; i < nodes.length; i++) {
      DataNode dn = nodes[i];
      if (dn == null) {
        down.add(i);
        continue;
      }
      running.add("{\"index\": " + i + ", \"xfer_port\": " + dn.getXferPort() + ", \"http_port\": "
          + dn.getInfoPort() + ", \"ipc_port\": " + dn.getIpcPort() + "}");
    }
    out.append(", \"datanodes_running\": [").append(String.join(", ", running)).append("]");
    out.append(", \"datanodes_stopped\": ").append(down);
    return out.append("}").toString();
  }

  private void stop() {
    synchronized (changes) {
      if (stoppedAll) {
        return;
      }
      stoppedAll = true;
      // Not cluster.shutdown(): it schedules the whole base directory for deletion at JVM exit,
      // and the data must outlive this process.
      cluster.shutdownDataNodes();
      cluster.shutdownNameNodes();
    }
    emit("{\"event\": \"stopped\"}");
  }

  private static String tagged(String id, String json) {
    return id == null ? json : "{\"id\": " + quote(id) + ", " + json.substring(1);
  }

  private static String failure(String id, String line, Exception err) {
    return tagged(id, "{\"ok\": false, \"command\": " + quote(line) + ", \"error\": " + quote(String.valueOf(err))
        + "}");
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
