#!/usr/bin/env bash
# A real Flink session cluster (JobManager + TaskManager) on this machine, bound
# to localhost, plus the Beam Flink job server jar the FlinkRunner stages with
# --flink_job_server_jar. docs/flink.md explains the choices.
#
#   scripts/flink_cluster.sh fetch    download and assemble Flink and the job server (cached)
#   scripts/flink_cluster.sh start    fetch if needed, start the cluster, wait for a TaskManager
#   scripts/flink_cluster.sh stop     stop the cluster
#   scripts/flink_cluster.sh status   print the cluster overview (REST)
#   scripts/flink_cluster.sh jar      print the job server jar path
#
# Everything comes from the package registries:
# * Flink from the `apache-flink` wheel (bin/, conf/) and the
#   `apache-flink-libraries` sdist (lib/, opt/, plugins/) of one version,
#   unpacked into the cache folder, never installed into a Python environment
#   (apache-flink pins an old apache-beam);
# * the job server from Maven Central: org.apache.beam:beam-runners-flink-1.19
#   and its runtime dependencies, resolved by Maven into lib/, behind a
#   manifest-only jar whose Class-Path lists them (Maven Central does not serve
#   the shaded beam-runners-flink-*-job-server jars; docs/flink.md).
#
# Settings (environment): FLINK_CACHE (default ~/.cache/beam_pipeline/flink),
# FLINK_REST_PORT (8081), FLINK_SLOTS (2), PYTHON (the venv's python, for pip).
set -euo pipefail

FLINK_VERSION=1.19.3              # the cluster; Beam's Flink runner for 1.19 runs on any 1.19.x
JOB_SERVER_FLINK=1.19             # beam-runners-flink-<this>
JOB_SERVER_BEAM=2.62.0            # newest Beam release whose Flink 1.19 runner resolves from Maven Central here
CACHE=${FLINK_CACHE:-$HOME/.cache/beam_pipeline/flink}
REST_PORT=${FLINK_REST_PORT:-8081}
SLOTS=${FLINK_SLOTS:-2}
HERE="$(cd "$(dirname "$0")/.." && pwd)"
PYTHON=${PYTHON:-$HERE/.venv/bin/python}
[ -x "$PYTHON" ] || PYTHON=python3

FLINK_HOME="$CACHE/flink-$FLINK_VERSION"
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
  local conf="$FLINK_HOME/conf/config.yaml"
  local java_opts
  java_opts=$(grep -E "^\s+all: --add-exports" "$FLINK_HOME/conf/config.yaml.dist" 2>/dev/null \
              || grep -E "^\s+all: --add-exports" "$conf")
  [ -f "$FLINK_HOME/conf/config.yaml.dist" ] || cp "$conf" "$FLINK_HOME/conf/config.yaml.dist"
  cat > "$conf" <<EOF
# Written by scripts/flink_cluster.sh: a one-machine session cluster on localhost only.
env:
  java:
    opts:
$java_opts
jobmanager:
  bind-host: localhost
  rpc:
    address: localhost
    port: 6123
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
      size: 4096m
    network:            # a stage's job has many shuffles (near_dedup: ~60 fused steps); the
      min: 1024m        # default ~10% of the process left "Insufficient number of network buffers"
      max: 1024m
parallelism:
  default: $SLOTS
rest:
  address: localhost
  bind-address: localhost
  port: $REST_PORT
blob:
  server:
    port: 0
EOF
  mkdir -p "$FLINK_HOME/log"   # start-cluster.sh does not create it
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

start() {
  fetch_flink
  fetch_job_server
  if [ "$(taskmanagers)" -ge 1 ] 2>/dev/null; then log "already running on localhost:$REST_PORT"; return; fi
  configure
  log "starting Flink $FLINK_VERSION on localhost:$REST_PORT"
  "$FLINK_HOME/bin/start-cluster.sh" >&2
  for _ in $(seq 1 90); do
    if [ "$(taskmanagers)" -ge 1 ] 2>/dev/null; then
      log "up: $(rest /overview)"
      return
    fi
    sleep 1
  done
  log "the cluster did not come up in 90 s; logs in $FLINK_HOME/log:"
  tail -n 30 "$FLINK_HOME"/log/*.log >&2 || true
  exit 1
}

stop() {
  if [ -x "$FLINK_HOME/bin/stop-cluster.sh" ]; then
    "$FLINK_HOME/bin/stop-cluster.sh" >&2 || true
  fi
  for _ in $(seq 1 30); do
    [ "$(taskmanagers)" -ge 1 ] 2>/dev/null || { log "stopped"; return; }
    sleep 1
  done
  log "still answering on localhost:$REST_PORT after stop-cluster.sh"
  exit 1
}

case "${1:-}" in
  fetch) fetch_flink; fetch_job_server ;;
  start) start ;;
  stop) stop ;;
  status) rest /overview ;;
  jar) fetch_job_server; echo "$JS_JAR" ;;
  home) echo "$FLINK_HOME" ;;
  *) echo "usage: $0 fetch|start|stop|status|jar|home" >&2; exit 2 ;;
esac
