#!/usr/bin/env bash
# A real Flink session cluster on this machine (a JobManager and FLINK_TASKMANAGERS
# TaskManagers, each its own JVM), bound to localhost, plus the Beam Flink job
# server jar the FlinkRunner stages with --flink_job_server_jar. docs/flink.md
# explains the choices.
#
#   scripts/flink_cluster.sh fetch             download and assemble Flink and the job server (cached)
#   scripts/flink_cluster.sh start             fetch if needed, start the cluster, wait until every
#                                              TaskManager has registered (REST /overview)
#   scripts/flink_cluster.sh stop              stop the cluster; kill -9 what is left after 30 s
#   scripts/flink_cluster.sh status            print the cluster overview (REST)
#   scripts/flink_cluster.sh pids              the cluster's running JVMs (Flink's pid files)
#   scripts/flink_cluster.sh taskmanager-pids  the running TaskManager JVMs
#   scripts/flink_cluster.sh add-taskmanager   start one more TaskManager (after one was lost)
#   scripts/flink_cluster.sh logs              print the log folder
#   scripts/flink_cluster.sh jar               print the job server jar path
#
# Everything comes from the package registries:
# * Flink from the `apache-flink` wheel (bin/, conf/) and the
#   `apache-flink-libraries` sdist (lib/, opt/, plugins/) of one version,
#   unpacked into the cache folder, never installed into a Python environment
#   (apache-flink pins an old apache-beam);
# * the job server from Maven Central: org.apache.beam:beam-runners-flink-1.19
#   and its runtime dependencies, resolved by Maven into lib/, behind a
#   manifest-only jar whose Class-Path lists them (Maven Central does not serve
#   the shaded beam-runners-flink-*-job-server jars; docs/flink.md);
# * the cluster's lib/ (FLINK_LIB_DIR, in its own folder): Flink's jars and the job server's, with
#   classloader.resolve-order parent-first, so TaskManagers keep a job's SDK workers between tasks
#   (docs/flink.md, "SDK workers kept between tasks").
#
# Settings (environment): FLINK_CACHE (default ~/.cache/beam_pipeline/flink),
# FLINK_REST_PORT (8081), FLINK_RPC_PORT (6123), FLINK_TASKMANAGERS (2), FLINK_SLOTS
# (1 per TaskManager), FLINK_TM_MEMORY (3584m), FLINK_TM_NETWORK (768m), FLINK_TM_MANAGED
# (768m), FLINK_TM_TASK_OFF_HEAP (512m), FLINK_RESTART_ATTEMPTS (10), FLINK_LOG_DIR ($FLINK_CACHE/cluster-<rest port>/log),
# FLINK_TMP_DIR (io.tmp.dirs: $FLINK_CACHE/cluster-<rest port>/tmp, emptied by start and stop; point it at
# a large local disk for large builds), PYTHON (the venv's python, for pip and the REST checks).
set -euo pipefail

FLINK_VERSION=1.19.3              # the cluster; Beam's Flink runner for 1.19 runs on any 1.19.x
JOB_SERVER_FLINK=1.19             # beam-runners-flink-<this>
JOB_SERVER_BEAM=2.62.0            # newest Beam release whose Flink 1.19 runner resolves from Maven Central here
CACHE=${FLINK_CACHE:-$HOME/.cache/beam_pipeline/flink}
REST_PORT=${FLINK_REST_PORT:-8081}
RPC_PORT=${FLINK_RPC_PORT:-6123}
TASKMANAGERS=${FLINK_TASKMANAGERS:-2}   # separate JVMs: records cross Flink's network shuffle
SLOTS=${FLINK_SLOTS:-1}                 # per TaskManager
TM_MEMORY=${FLINK_TM_MEMORY:-3584m}     # per TaskManager JVM (the SDK workers are processes beside it)
TM_NETWORK=${FLINK_TM_NETWORK:-768m}
TM_MANAGED=${FLINK_TM_MANAGED:-768m}    # Flink's sorters (batch shuffles spill to disk beyond it)
TM_TASK_OFF_HEAP=${FLINK_TM_TASK_OFF_HEAP:-512m}  # Beam's gRPC data plane: a bundle's outputs in direct buffers
RESTART_ATTEMPTS=${FLINK_RESTART_ATTEMPTS:-10}
HERE="$(cd "$(dirname "$0")/.." && pwd)"
PYTHON=${PYTHON:-$HERE/.venv/bin/python}
[ -x "$PYTHON" ] || PYTHON=python3

FLINK_HOME="$CACHE/flink-$FLINK_VERSION"
# One folder per cluster (by REST port): its configuration (FLINK_CONF_DIR), logs and pid files, so a
# test's cluster and one of your own never share anything but the Flink installation.
CLUSTER_DIR="$CACHE/cluster-$REST_PORT"
LOG_DIR=${FLINK_LOG_DIR:-$CLUSTER_DIR/log}
PID_DIR="$CLUSTER_DIR/pid"
TMP_DIR=${FLINK_TMP_DIR:-$CLUSTER_DIR/tmp}
export FLINK_CONF_DIR="$CLUSTER_DIR/conf"
export FLINK_LIB_DIR="$CLUSTER_DIR/lib"
JS_DIR="$CACHE/beam-flink-$JOB_SERVER_FLINK-job-server-$JOB_SERVER_BEAM"
JS_JAR="$JS_DIR/beam-runners-flink-$JOB_SERVER_FLINK-job-server-$JOB_SERVER_BEAM.jar"

log() { echo "[flink_cluster] $*" >&2; }

fetch_flink() {
  [ -x "$FLINK_HOME/bin/start-cluster.sh" ] && [ -f "$FLINK_HOME/lib/flink-dist-$FLINK_VERSION.jar" ] && return
  local dl="$CACHE/download"
  mkdir -p "$dl"
  log "downloading apache-flink $FLINK_VERSION and apache-flink-libraries $FLINK_VERSION (pip download, ~235 MB)"
  "$PYTHON" -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.11 \
    --platform manylinux2014_x86_64 "apache-flink==$FLINK_VERSION" -d "$dl"
  "$PYTHON" -m pip download --quiet --no-deps "apache-flink-libraries==$FLINK_VERSION" -d "$dl"
  local tmp="$CACHE/.assemble-$$"
  rm -rf "$tmp" && mkdir -p "$tmp/home"
  "$PYTHON" - "$dl" "$FLINK_VERSION" "$tmp" <<'EOF'
import glob, os, sys, tarfile, zipfile
dl, version, tmp = sys.argv[1:]
home = os.path.join(tmp, "home")
wheel, = glob.glob(os.path.join(dl, f"apache_flink-{version}-*.whl"))
with zipfile.ZipFile(wheel) as z:                       # bin/ and conf/ (and the empty log/)
    for name in z.namelist():
        for folder in ("bin", "conf"):
            if name.startswith(f"pyflink/{folder}/") and not name.endswith("/"):
                target = os.path.join(home, name[len("pyflink/"):])
                os.makedirs(os.path.dirname(target), exist_ok=True)
                with open(target, "wb") as out:
                    out.write(z.read(name))
with tarfile.open(os.path.join(dl, f"apache-flink-libraries-{version}.tar.gz")) as t:  # lib/ opt/ plugins/ bin/*.jar
    prefix = f"apache-flink-libraries-{version}/deps/"
    for member in t.getmembers():
        if member.name.startswith(prefix) and member.isfile():
            rel = member.name[len(prefix):]
            if rel.split("/")[0] in ("lib", "opt", "plugins", "bin"):
                target = os.path.join(home, rel)
                os.makedirs(os.path.dirname(target), exist_ok=True)
                with t.extractfile(member) as src, open(target, "wb") as out:
                    out.write(src.read())
for script in glob.glob(os.path.join(home, "bin", "*")):
    if not script.endswith(".jar"):
        os.chmod(script, 0o755)
EOF
  rm -rf "$FLINK_HOME" && mv "$tmp/home" "$FLINK_HOME" && rm -rf "$tmp"
  log "Flink $FLINK_VERSION in $FLINK_HOME"
}

fetch_job_server() {
  [ -f "$JS_JAR" ] && return
  command -v mvn >/dev/null || { log "mvn (Maven) is needed to fetch the job server"; exit 1; }
  mkdir -p "$JS_DIR"
  cat > "$JS_DIR/pom.xml" <<EOF
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>beam_pipeline</groupId><artifactId>flink-job-server</artifactId><version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.beam</groupId>
      <artifactId>beam-runners-flink-$JOB_SERVER_FLINK</artifactId>
      <version>$JOB_SERVER_BEAM</version>
    </dependency>
  </dependencies>
</project>
EOF
  log "resolving org.apache.beam:beam-runners-flink-$JOB_SERVER_FLINK:$JOB_SERVER_BEAM and its dependencies (Maven, ~150 MB)"
  (cd "$JS_DIR" && mvn -B -q dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory=lib)
  # A manifest-only jar: `java -jar` (what the FlinkRunner runs) puts every jar in lib/ on the class path.
  "$PYTHON" - "$JS_DIR" "$JS_JAR" <<'EOF'
import os, sys, zipfile
folder, jar = sys.argv[1:]
jars = sorted(f for f in os.listdir(os.path.join(folder, "lib")) if f.endswith(".jar"))
class_path = " ".join(f"lib/{name}" for name in jars)
lines, line = [], f"Class-Path: {class_path}"
while len(line.encode()) > 72:               # manifest lines are at most 72 bytes, continued with a space
    lines.append(line[:72]); line = " " + line[72:]
lines.append(line)
manifest = ("Manifest-Version: 1.0\r\nMain-Class: org.apache.beam.runners.flink.FlinkJobServerDriver\r\n"
            + "\r\n".join(lines) + "\r\n\r\n")
tmp = jar + ".tmp"
with zipfile.ZipFile(tmp, "w") as z:
    z.writestr("META-INF/MANIFEST.MF", manifest)
os.replace(tmp, jar)
EOF
  log "job server jar $JS_JAR"
}

configure() {
  local conf="$FLINK_CONF_DIR/config.yaml"
  local java_opts
  [ -f "$FLINK_HOME/conf/config.yaml.dist" ] || cp "$FLINK_HOME/conf/config.yaml" "$FLINK_HOME/conf/config.yaml.dist"
  java_opts=$(grep -E "^\s+all: --add-exports" "$FLINK_HOME/conf/config.yaml.dist")
  rm -rf "$TMP_DIR"  # what a TaskManager killed earlier left (no JVM of this cluster runs now)
  mkdir -p "$FLINK_CONF_DIR" "$LOG_DIR" "$PID_DIR" "$TMP_DIR"
  cp "$FLINK_HOME"/conf/log4j*.properties "$FLINK_HOME"/conf/logback*.xml "$FLINK_CONF_DIR"/ 2>/dev/null || true
  beam_in_lib
  cat > "$conf" <<EOF
# Written by scripts/flink_cluster.sh: a one-machine session cluster on localhost only
# ($TASKMANAGERS TaskManagers of $SLOTS slot(s) each, separate JVMs).
env:
  java:
    opts:
$java_opts
  log:
    dir: $LOG_DIR
  pid:
    dir: $PID_DIR
jobmanager:
  bind-host: localhost
  rpc:
    address: localhost
    port: $RPC_PORT
  memory:
    process:
      size: 1600m
  execution:
    failover-strategy: region
taskmanager:
  bind-host: localhost
  host: localhost
  numberOfTaskSlots: $SLOTS
  memory:
    process:
      size: $TM_MEMORY
    network:            # a build's job has many shuffles; the default ~10% of the process
      min: $TM_NETWORK  # left "Insufficient number of network buffers"
      max: $TM_NETWORK
    managed:
      size: $TM_MANAGED
    task:               # the SDK's data messages (~10 MB each, up to a bundle's budget: --bundle_output_mb)
      off-heap:         # arrive in Netty's direct buffers; Flink's default (0 + 128 MB of the framework's)
        size: $TM_TASK_OFF_HEAP  # failed the 1 GB bench build with "OutOfMemoryError: Direct buffer memory"
# A lost TaskManager fails the tasks it ran, and Flink restarts the job, 10 s apart, once slots are
# back. One kill -9 of a TaskManager cost 3 failovers in tests/test_flink.py (the loss, a deployment
# to the dead TaskManager before its heartbeat timed out, a partition it held): every one counts as
# an attempt, hence $RESTART_ATTEMPTS (docs/flink.md, "Losing a TaskManager").
restart-strategy:
  type: fixed-delay
  fixed-delay:
    attempts: $RESTART_ATTEMPTS
    delay: 10 s
# The working files of the JobManager and TaskManagers (blobs, ~300 MB per TaskManager and job; the
# shuffles' files; spills) in the cluster's own folder, not /tmp: a TaskManager killed with kill -9 leaves
# its working directory, and this script's start and stop remove the folder while no JVM of the cluster runs.
io:
  tmp:
    dirs: $TMP_DIR
heartbeat:
  timeout: 20000        # a TaskManager killed without a goodbye is noticed in 20 s, not 50
parallelism:
  default: $SLOTS
rest:
  address: localhost
  bind-address: localhost
  port: $REST_PORT
blob:
  server:
    port: 0
# Beam's runner from the cluster's lib/ (beam_in_lib), for every job: the TaskManagers then keep a job's
# SDK workers from one task to the next (--environment_cache_millis) instead of starting new ones for each.
classloader:
  resolve-order: parent-first
EOF
}

# The cluster's lib/: Flink's own jars and the job server's (Beam's Flink runner and what it needs, but
# the Flink jars it was built against), as links in $CLUSTER_DIR/lib (FLINK_LIB_DIR). Beam keeps a job's
# SDK workers between tasks only when its runner classes come from Flink's parent class loader
# (FlinkExecutableStageContextFactory); loaded from the job's jar, every task starts its own workers and
# the sample's job started ~30 per TaskManager (docs/flink.md, "SDK workers kept between tasks").
beam_in_lib() {
  rm -rf "$CLUSTER_DIR/lib" && mkdir -p "$CLUSTER_DIR/lib"
  ln -s "$FLINK_HOME"/lib/*.jar "$CLUSTER_DIR/lib/"
  local jar
  for jar in "$JS_DIR"/lib/*.jar; do
    case "$(basename "$jar")" in flink-*|slf4j-*) continue ;; esac
    ln -s "$jar" "$CLUSTER_DIR/lib/"
  done
}

rest() { "$PYTHON" - "$REST_PORT" "$1" <<'EOF'
import json, sys, urllib.request
port, path = sys.argv[1:]
try:
    with urllib.request.urlopen(f"http://localhost:{port}{path}", timeout=3) as r:
        print(json.dumps(json.load(r)))
except Exception as err:  # noqa: BLE001
    print(f"unreachable: {err}", file=sys.stderr); sys.exit(1)
EOF
}

taskmanagers() { rest /overview 2>/dev/null | "$PYTHON" -c 'import json,sys; print(json.load(sys.stdin)["taskmanagers"])' 2>/dev/null || echo 0; }

# The pids of the cluster's running JVMs, one a line (Flink's pid files in $PID_DIR); $1: which daemons.
pids() {
  local pattern=${1:-*} file pid
  for file in "$PID_DIR"/flink-*-$pattern.pid; do
    [ -f "$file" ] || continue
    while read -r pid; do
      [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && echo "$pid"
    done < "$file"
  done
  return 0
}

wait_for_taskmanagers() {
  local want=$1 seconds=$2
  for _ in $(seq 1 "$seconds"); do
    [ "$(taskmanagers)" -ge "$want" ] 2>/dev/null && return 0
    sleep 1
  done
  return 1
}

add_taskmanager() {
  "$FLINK_HOME/bin/taskmanager.sh" start >&2
}

start() {
  fetch_flink
  fetch_job_server
  if [ "$(taskmanagers)" -ge "$TASKMANAGERS" ] 2>/dev/null; then log "already running on localhost:$REST_PORT"; return; fi
  if [ -n "$(pids)" ]; then log "a half-started cluster is left; stopping it first"; stop; fi
  configure
  rm -f "$LOG_DIR"/flink-* 2>/dev/null || true
  log "starting Flink $FLINK_VERSION on localhost:$REST_PORT: a JobManager and $TASKMANAGERS TaskManagers of $SLOTS slot(s); logs in $LOG_DIR"
  "$FLINK_HOME/bin/jobmanager.sh" start >&2
  for _ in $(seq 1 "$TASKMANAGERS"); do add_taskmanager; done
  if wait_for_taskmanagers "$TASKMANAGERS" 120; then
    log "up: $(rest /overview)"
    return
  fi
  log "$(taskmanagers) of $TASKMANAGERS TaskManagers registered after 120 s; logs in $LOG_DIR:"
  tail -n 30 "$LOG_DIR"/*.log >&2 || true
  stop || true
  exit 1
}

stop() {
  if [ -x "$FLINK_HOME/bin/taskmanager.sh" ] && [ -f "$FLINK_CONF_DIR/config.yaml" ]; then
    "$FLINK_HOME/bin/taskmanager.sh" stop-all >&2 || true
    "$FLINK_HOME/bin/jobmanager.sh" stop-all >&2 || true
  fi
  local left
  for _ in $(seq 1 30); do
    left=$(pids)
    if [ -z "$left" ] && ! [ "$(taskmanagers)" -ge 1 ] 2>/dev/null; then rm -rf "$TMP_DIR"; log "stopped"; return; fi
    sleep 1
  done
  if [ -n "$left" ]; then
    log "killing what did not stop in 30 s: $left"
    kill -9 $left 2>/dev/null || true
    sleep 1
  fi
  [ -z "$(pids)" ] || { log "still running after kill -9: $(pids)"; exit 1; }
  rm -rf "$TMP_DIR"
  log "stopped"
}

case "${1:-}" in
  fetch) fetch_flink; fetch_job_server ;;
  start) start ;;
  stop) stop ;;
  status) rest /overview ;;
  pids) pids ;;
  taskmanager-pids) pids taskexecutor ;;
  add-taskmanager) add_taskmanager ;;
  logs) echo "$LOG_DIR" ;;
  jar) fetch_job_server; echo "$JS_JAR" ;;
  home) echo "$FLINK_HOME" ;;
  *) echo "usage: $0 fetch|start|stop|status|pids|taskmanager-pids|add-taskmanager|logs|jar|home" >&2; exit 2 ;;
esac
