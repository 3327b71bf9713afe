#!/usr/bin/env bash
# A real one-node Kubernetes cluster on a GPU machine, driven by the
# collection's playbooks (issue 15): etcd, kube-apiserver, controller-manager,
# scheduler, containerd and kubelet v1.37 started here without systemd, images
# built here from carried binaries, then preflight, host (driver, container
# toolkit with containerd), kubernetes (node labels, device plugin) and verify
# (node-level vectorAdd, then the cuda-vector-add Job whose log must say
# Test PASSED), then time-slicing with 4 replicas.
#
# The bundle comes from lab/pack-k8s-node.sh (run where there is a network):
#   .cache/k8s-node/1  Kubernetes (one multi-call binary), etcd, containerd, runc
#   .cache/k8s-node/2  ctr, CNI plugins, image contents, wheels, kubernetes.core,
#                      the NVIDIA container toolkit repository
# On a machine that takes the whole bundle at once, run `tests/gpu/k8s-node.sh`.
# Where each carry is limited (64 MiB), two calls back to back on the same
# machine: `tests/gpu/k8s-node.sh unpack` carrying part 1, then
# `tests/gpu/k8s-node.sh` carrying part 2 (unpacked parts stay in $K8SNODE_ROOT).
#
# Modes:
#   gpu (default)  the whole run above; output in $OUT (default /tmp/k8sgpu-k8s-node)
#   unpack         unpack the bundle parts that are present, nothing else
#   rehearse       the non-GPU part on a machine without a GPU (the lab host):
#                  cluster up, images imported, a plain pod Running and the
#                  cuda-vector-add pod failing clearly without a GPU; then down
#   up             the cluster only (rehearse's first half), left running
#   down           stop what this script started (pid files) and remove its state
#
# Every process binds 127.0.0.1 (the kubelet is reached by its host name, which
# resolves to 127.0.0.1 on these machines) on ports of its own; the kubelet's
# cgroups live under /k8sgpu-node. K8SNODE_PREFIX puts every path (containerd's
# root, state and configuration, CNI, the kubelet's root) under a scratch
# directory: rehearse uses it so nothing of the host's own is touched.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
REPO=$PWD
MODE=${1:-gpu}
OUT=${OUT:-/tmp/k8sgpu-k8s-node}
BUNDLE=${K8SNODE_BUNDLE:-$REPO/.cache/k8s-node}
if [ "$MODE" = rehearse ] || [ "$MODE" = up ] || { [ "$MODE" = down ] && [ -z "${K8SNODE_PREFIX+x}" ] && [ ! -e /dev/nvidia0 ]; }; then
  P=${K8SNODE_PREFIX-${K8SGPU_LAB_STATE:-$REPO/.lab}/k8s-node}
else
  P=${K8SNODE_PREFIX-}
fi
K8SNODE_ROOT=${K8SNODE_ROOT:-$P/opt/k8sgpu-node}
STATE=$P/var/lib/k8sgpu-node
BIN=$K8SNODE_ROOT/bin
PKI=$STATE/pki
LOGS=$STATE/logs
PIDS=$STATE/pids
CONTAINERD_CONFIG=$P/etc/containerd/config.toml
CONTAINERD_DROP_IN=$P/etc/containerd/conf.d/99-nvidia.toml
CONTAINERD_SOCK=$P/run/containerd/containerd.sock
KUBELET_ROOT=$P/var/lib/kubelet
CNI_BIN=$P/opt/cni/bin
CNI_CONF=$P/etc/cni/net.d
# Ports of its own (the usual ones + 30000), all on 127.0.0.1.
ETCD_PORT=42379 ETCD_PEER_PORT=42380 API_PORT=46443 KCM_PORT=40257 SCHED_PORT=40259 KUBELET_PORT=40250 KUBELET_HEALTHZ=40248
PAUSE_IMAGE=registry.k8s.io/pause:3.10.2
DEVICE_PLUGIN_VERSION=$(sed -n 's/^device_plugin_version: *//p' roles/device_plugin/defaults/main.yml)
DEVICE_PLUGIN_IMAGE=nvcr.io/nvidia/k8s-device-plugin:$DEVICE_PLUGIN_VERSION
VERIFY_IMAGE=localhost/k8sgpu/cuda-vector-add:ptx-vectoradd
# The kubelet's kernel settings (it writes them unless protectKernelDefaults):
# saved before and put back by `down`, so a rehearsal leaves the host as it was.
SYSCTLS=(vm/overcommit_memory vm/panic_on_oom kernel/panic kernel/panic_on_oops kernel/keys/root_maxkeys kernel/keys/root_maxbytes)

export PATH=$BIN:$PATH
export KUBECONFIG=$PKI/admin.kubeconfig
now() { date +%s.%N; }
say() { printf '[k8s-node %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf '[k8s-node] ERROR: %s\n' "$*" >&2; exit 1; }
mark() { echo "$1 $(now)" >>"$STATE/times"; }

# --- the machine ------------------------------------------------------------

# A kernel of its own (cgroups it can create), cgroup v2 (or, for a rehearsal, any
# cgroup), root, overlayfs, /dev/kmsg, and for the GPU run /dev/nvidia0 with a
# loaded driver. Stops with what is missing.
guard() {
  local problems=()
  [ "$(id -u)" = 0 ] || problems+=("not root (the kubelet and containerd need root)")
  grep -qw overlay /proc/filesystems || problems+=("no overlayfs in /proc/filesystems")
  [ -e /dev/kmsg ] || problems+=("no /dev/kmsg (the kubelet's OOM watcher reads it)")
  [ -w /proc/sys/net/ipv4/ip_forward ] || problems+=("/proc/sys is read-only (a container, not a VM?)")
  if [ "$MODE" = gpu ]; then
    [ "$(stat -fc %T /sys/fs/cgroup)" = cgroup2fs ] || problems+=("cgroup v1 at /sys/fs/cgroup (kubelet v1.37 needs cgroup v2 unless failCgroupV1 is false)")
    # A sandbox without its own cgroup tree cannot give the kubelet pods' cgroups.
    if mkdir /sys/fs/cgroup/k8sgpu-node-probe 2>/dev/null; then rmdir /sys/fs/cgroup/k8sgpu-node-probe
    else problems+=("cannot create a cgroup under /sys/fs/cgroup (a container or sandbox, not a VM with its own kernel?)"); fi
    grep -qw memory /sys/fs/cgroup/cgroup.controllers 2>/dev/null || problems+=("no memory controller in /sys/fs/cgroup/cgroup.controllers")
    [ -e /dev/nvidia0 ] || problems+=("no /dev/nvidia0 (no NVIDIA GPU or no driver loaded)")
    [ -r /proc/driver/nvidia/version ] || problems+=("no /proc/driver/nvidia/version (NVIDIA driver not loaded)")
  fi
  if [ "${#problems[@]}" -gt 0 ]; then
    printf '[k8s-node] this machine cannot run the GPU node (%s):\n' "$MODE" >&2
    printf '  - %s\n' "${problems[@]}" >&2
    exit 3
  fi
  say "machine: $(uname -r), cgroup $(stat -fc %T /sys/fs/cgroup), init $(ps -o comm= -p 1 2>/dev/null || echo ?)"
}

# eth0's IPv4 address (no `ip` binary on the GPU machine): SIOCGIFADDR.
node_ip() {
  python3 - "${K8SNODE_IFACE:-eth0}" <<'PY' || die "no IPv4 address on ${K8SNODE_IFACE:-eth0} (set K8SNODE_IFACE)"
import fcntl, socket, struct, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
req = struct.pack("256s", sys.argv[1].encode()[:15])
print(socket.inet_ntoa(fcntl.ioctl(s.fileno(), 0x8915, req)[20:24]))
PY
}

# --- the bundle -------------------------------------------------------------

unpack() {
  mkdir -p "$BIN" "$CNI_BIN" "$STATE" "$LOGS" "$PIDS"
  local one=$BUNDLE/1 two=$BUNDLE/2 t0; t0=$(now)
  if [ -f "$one/k8s-node.xz" ]; then
    xz -dc "$one/k8s-node.xz" >"$BIN/k8s-node.tmp" && chmod 755 "$BIN/k8s-node.tmp" && mv "$BIN/k8s-node.tmp" "$BIN/k8s-node"
    for p in kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl; do ln -sf k8s-node "$BIN/$p"; done
    xz -dc "$one/etcd.xz" >"$BIN/etcd.tmp" && chmod 755 "$BIN/etcd.tmp" && mv "$BIN/etcd.tmp" "$BIN/etcd"
    tar -C "$BIN" -xJf "$one/containerd.tar.xz"
    say "part 1 unpacked: $(k8s-node kubelet --version), etcd $(etcd --version | head -1 | awk '{print $3}'), containerd $(containerd --version | awk '{print $3}'), $(runc --version | head -1)"
  fi
  if [ -f "$two/cni.tar.xz" ]; then
    tar -C "$BIN" -xJf "$two/ctr.tar.xz"
    tar -C "$CNI_BIN" -xJf "$two/cni.tar.xz"
    rm -rf "$K8SNODE_ROOT/images"; mkdir -p "$K8SNODE_ROOT/images"
    tar -C "$K8SNODE_ROOT/images" -xJf "$two/images.tar.xz"
    rm -rf "$K8SNODE_ROOT/collections"; mkdir -p "$K8SNODE_ROOT/collections"
    tar -C "$K8SNODE_ROOT/collections" -xJf "$two/collections.tar.xz"
    rm -rf "$K8SNODE_ROOT/toolkit-repo"; cp -r "$two/toolkit-repo" "$K8SNODE_ROOT/toolkit-repo"
    if [ "$MODE" = gpu ] || [ "$MODE" = unpack ]; then
      python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target "$K8SNODE_ROOT/site" "$two"/whl/*.whl || die "installing the carried wheels failed"
      # Byte-compiled as pip does by default (--no-compile above keeps pip quiet and fast; compileall uses every
      # core): the VM sets PYTHONDONTWRITEBYTECODE=1, so without this every process (each task, each module) compiled
      # ansible-core and the kubernetes client from source again (import kubernetes.client: 1.8 s against 0.33 s).
      python3 -m compileall -q -j 0 "$K8SNODE_ROOT/site" "$K8SNODE_ROOT/collections" "$REPO/plugins" >/dev/null \
        || die "byte-compiling the carried wheels failed"
    fi
    say "part 2 unpacked: ctr, CNI $(find "$CNI_BIN" -mindepth 1 -maxdepth 1 -printf '%f '), images' files, kubernetes.core, toolkit repository"
  fi
  say "unpacked in $(python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$t0" "$(now)") s"
}

python_env() {
  if [ "$MODE" != gpu ] && [ -x "$REPO/.venv/bin/python3" ]; then export PATH=$REPO/.venv/bin:$PATH; fi
  if [ -d "$K8SNODE_ROOT/site" ] && [ "$MODE" = gpu ]; then
    export PYTHONPATH=$K8SNODE_ROOT/site PATH=$K8SNODE_ROOT/site/bin:$PATH
  fi
  export ANSIBLE_CONFIG=$REPO/ansible.cfg ANSIBLE_FORCE_COLOR=0 PYTHONUNBUFFERED=1
  export ANSIBLE_COLLECTIONS_PATH=$REPO/collections:$K8SNODE_ROOT/collections
  python3 -c 'import cryptography, kubernetes' 2>/dev/null || die "python3 lacks cryptography or kubernetes (carried wheels not installed?)"
}

# --- processes --------------------------------------------------------------

# start NAME CMD...: setsid, so it outlives this call on the GPU machine; pid
# file here and, beside the lab, where `lab.sh down` stops it.
start() {
  local name=$1; shift
  setsid "$@" >>"$LOGS/$name.log" 2>&1 </dev/null &
  echo $! >"$PIDS/$name.pid"
  if [ -n "${K8SGPU_LAB_STATE:-}" ] && [ "$MODE" != gpu ]; then
    mkdir -p "$K8SGPU_LAB_STATE/procs"; echo $! >"$K8SGPU_LAB_STATE/procs/k8s-node-$name.pid"
  fi
}
stop() {
  local name=$1 pid
  pid=$(cat "$PIDS/$name.pid" 2>/dev/null) || return 0
  kill "$pid" 2>/dev/null || { rm -f "$PIDS/$name.pid"; return 0; }
  for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null
  rm -f "$PIDS/$name.pid" "${K8SGPU_LAB_STATE:-/nonexistent}/procs/k8s-node-$name.pid"
}
# wait_for WHAT SECONDS CMD...: poll until CMD succeeds; on timeout show WHAT's log.
wait_for() {
  local what=$1 secs=$2 pid; shift 2
  pid=$(cat "$PIDS/$what.pid" 2>/dev/null)
  for _ in $(seq $((secs * 5))); do
    "$@" >/dev/null 2>&1 && return 0
    if [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null; then secs="(it exited)"; break; fi
    sleep 0.2
  done
  echo "----- last 30 lines of $LOGS/$what.log -----" >&2; tail -n 30 "$LOGS/$what.log" >&2
  die "$what did not come up in $secs s (its log: $LOGS/$what.log)"
}

render() {  # render TEMPLATE DEST: @VAR@ from the environment of this script
  local dest=$2
  mkdir -p "$(dirname "$dest")"
  sed -e "s|@P@|$P|g" -e "s|@PAUSE_IMAGE@|$PAUSE_IMAGE|g" -e "s|@SNAPSHOTTER@|$SNAPSHOTTER|g" \
      -e "s|@KUBELET_PORT@|$KUBELET_PORT|g" -e "s|@KUBELET_HEALTHZ@|$KUBELET_HEALTHZ|g" \
      -e "s|@CONTAINERD_SOCK@|$CONTAINERD_SOCK|g" -e "s|@STATE@|$STATE|g" \
      "tests/gpu/k8s-node/$1" >"$dest.tmp" && mv "$dest.tmp" "$dest"
}

start_containerd() {
  start containerd containerd --config "$CONTAINERD_CONFIG"
  wait_for containerd 30 ctr -a "$CONTAINERD_SOCK" version
}
restart_containerd() {
  stop containerd; start_containerd
}

up() {
  guard
  if ! { [ -x "$BIN/k8s-node" ] && [ -x "$BIN/ctr" ]; }; then unpack; fi
  [ -x "$BIN/k8s-node" ] || die "no Kubernetes binary in $BIN: carry $BUNDLE/1 (lab/pack-k8s-node.sh) and run '$0 unpack' first"
  [ -x "$BIN/ctr" ] || die "no ctr in $BIN: carry $BUNDLE/2 (lab/pack-k8s-node.sh)"
  python_env
  rm -f "$STATE/times"; mkdir -p "$STATE" "$LOGS" "$PIDS"
  NODE_IP=$(node_ip); NODE_NAME=$(uname -n | tr '[:upper:]' '[:lower:]')
  SNAPSHOTTER=overlayfs
  [ "$(stat -fc %T "$(dirname "$P/var/lib/containerd/x")" 2>/dev/null || stat -fc %T /var/lib)" = overlayfs ] && SNAPSHOTTER=native
  say "node $NODE_NAME, node IP $NODE_IP, prefix '${P:-/}', snapshotter $SNAPSHOTTER"
  if [ ! -f "$STATE/sysctls.saved" ]; then
    for s in "${SYSCTLS[@]}"; do echo "$s $(cat "/proc/sys/$s")"; done >"$STATE/sysctls.saved"
  fi
  python3 tests/gpu/k8s-node/pki.py "$PKI" "$NODE_NAME" "$NODE_IP" "$API_PORT" || die "making the certificates failed"
  mark start

  start etcd etcd --name k8sgpu-node --data-dir "$STATE/etcd" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster "k8sgpu-node=http://127.0.0.1:$ETCD_PEER_PORT" --listen-metrics-urls "" --log-level warn
  start kube-apiserver kube-apiserver --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
    --bind-address 127.0.0.1 --secure-port "$API_PORT" --advertise-address "$NODE_IP" \
    --service-cluster-ip-range 10.96.0.0/16 --allow-privileged=true --authorization-mode Node,RBAC \
    --tls-cert-file "$PKI/apiserver.crt" --tls-private-key-file "$PKI/apiserver.key" --client-ca-file "$PKI/ca.crt" \
    --service-account-key-file "$PKI/sa.pub" --service-account-signing-key-file "$PKI/sa.key" \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --kubelet-client-certificate "$PKI/admin.crt" --kubelet-client-key "$PKI/admin.key" \
    --kubelet-preferred-address-types Hostname,InternalIP --cert-dir "$STATE/apiserver" --profiling=false
  wait_for kube-apiserver 90 kubectl get --raw /readyz
  mark apiserver_ready
  local kc=$PKI/admin.kubeconfig
  start kube-controller-manager kube-controller-manager --kubeconfig "$kc" --authentication-kubeconfig "$kc" \
    --authorization-kubeconfig "$kc" --bind-address 127.0.0.1 --secure-port "$KCM_PORT" --leader-elect=false \
    --service-account-private-key-file "$PKI/sa.key" --root-ca-file "$PKI/ca.crt" --use-service-account-credentials=false \
    --cluster-signing-cert-file "$PKI/ca.crt" --cluster-signing-key-file "$PKI/ca.key" --profiling=false
  start kube-scheduler kube-scheduler --kubeconfig "$kc" --authentication-kubeconfig "$kc" --authorization-kubeconfig "$kc" \
    --bind-address 127.0.0.1 --secure-port "$SCHED_PORT" --leader-elect=false --profiling=false

  render containerd.toml "$CONTAINERD_CONFIG"
  render cni.conflist "$CNI_CONF/10-k8sgpu-node.conflist"
  mkdir -p "$P/run/containerd" "$P/var/lib/containerd"
  start_containerd
  mark containerd_ready
  import_images
  mark images_imported

  render kubelet.yaml.in "$STATE/kubelet.yaml"
  cgroup_root
  mkdir -p "$KUBELET_ROOT"
  mark kubelet_start
  start kubelet kubelet --config "$STATE/kubelet.yaml" --kubeconfig "$PKI/kubelet.kubeconfig" \
    --root-dir "$KUBELET_ROOT" --node-ip "$NODE_IP" --v 1
  wait_for kubelet 120 kubectl get node "$NODE_NAME"
  mark node_registered
  wait_for kubelet 120 kubectl wait --for condition=Ready --timeout 1s node "$NODE_NAME"
  mark node_ready
  wait_for kube-controller-manager 60 kubectl -n default get serviceaccount default
  say "cluster up: $(kubectl get node "$NODE_NAME" --no-headers -o wide | tr -s ' ')"
}

# The images, assembled here from the carried binaries and Debian's C library,
# imported under the names the roles and containerd use (IfNotPresent never
# pulls; there is no registry).
import_images() {
  local img=$K8SNODE_ROOT/images tars=$STATE/image-tars
  mkdir -p "$tars"
  if ! { python3 tests/gpu/k8s-node/mkimage.py "$tars/pause.tar" --tag "$PAUSE_IMAGE" --entrypoint /pause --add "$img/bin/pause:/pause" &&
  python3 tests/gpu/k8s-node/mkimage.py "$tars/device-plugin.tar" --tag "$DEVICE_PLUGIN_IMAGE" \
    --entrypoint nvidia-device-plugin --tree "$img/libc" --add "$img/bin/nvidia-device-plugin:/usr/bin/nvidia-device-plugin" \
    --env NVIDIA_DISABLE_REQUIRE=true --env NVIDIA_VISIBLE_DEVICES=all --env NVIDIA_DRIVER_CAPABILITIES=compute,utility &&
  # No NVIDIA_VISIBLE_DEVICES in this one: it sees a GPU only when the device
  # plugin allocates one (a pod that asks for none gets none).
  python3 tests/gpu/k8s-node/mkimage.py "$tars/cuda-vector-add.tar" --tag "$VERIFY_IMAGE" \
    --entrypoint /cuda-samples/vectorAdd --tree "$img/libc" --add "$img/bin/vectorAdd:/cuda-samples/vectorAdd" \
    --env NVIDIA_DRIVER_CAPABILITIES=compute,utility; }; then die "assembling the images failed"; fi
  for t in pause device-plugin cuda-vector-add; do
    ctr -a "$CONTAINERD_SOCK" -n k8s.io images import --no-unpack=false "$tars/$t.tar" >/dev/null || die "ctr images import $t.tar failed"
  done
  ctr -a "$CONTAINERD_SOCK" -n k8s.io images ls -q | grep -v '^sha256:' | sed 's/^/  image: /' >&2
}

# The kubelet's cgroupRoot (/k8sgpu-node) must exist: in the cgroup v2 tree, or
# in every cgroup v1 hierarchy (cpuset's with its parent's CPUs and memory nodes).
cgroup_root() {
  local d
  if [ "$(stat -fc %T /sys/fs/cgroup)" = cgroup2fs ]; then mkdir -p /sys/fs/cgroup/k8sgpu-node; return; fi
  awk '$3 == "cgroup" {print $2}' /proc/mounts | while read -r d; do
    mkdir -p "$d/k8sgpu-node"
    if [ -f "$d/cpuset.cpus" ]; then cat "$d/cpuset.cpus" >"$d/k8sgpu-node/cpuset.cpus"; cat "$d/cpuset.mems" >"$d/k8sgpu-node/cpuset.mems"; fi
  done
}

down() {
  say "stopping (prefix '${P:-/}')"
  stop watch; stop kubelet
  pkill_pods
  for n in kube-scheduler kube-controller-manager kube-apiserver etcd containerd; do stop "$n"; done
  # Any process left in the kubelet's cgroups is a pod's: only ours are there.
  find /sys/fs/cgroup -path '*/k8sgpu-node*' -name cgroup.procs -exec cat {} + 2>/dev/null | sort -u | xargs -r kill -9 2>/dev/null
  if [ -f "$STATE/sysctls.saved" ]; then
    while read -r s v; do echo "$v" >"/proc/sys/$s" 2>/dev/null; done <"$STATE/sysctls.saved"
  fi
  # Mounts the kubelet and containerd left (pods' volumes, overlay snapshots, netns).
  if [ -n "$P" ]; then
    awk -v p="$P/" 'index($2, p) == 1 {print $2}' /proc/mounts | sort -r | while read -r m; do umount -l "$m" 2>/dev/null; done
    if command -v ip >/dev/null && ip link show k8sgpu0 >/dev/null 2>&1; then ip link del k8sgpu0; fi
    rm -rf "$P"
  fi
  # Empty cgroups the kubelet and this script made (never another's).
  find /sys/fs/cgroup -depth -type d -path '*/k8sgpu-node*' -exec rmdir {} \; 2>/dev/null
  say "stopped"
}
# The pods' processes (containerd's shims) go with containerd's state: stop
# their containers through the runtime while it still runs.
pkill_pods() {
  [ -S "$CONTAINERD_SOCK" ] || return 0
  local ids; ids=$(ctr -a "$CONTAINERD_SOCK" -n k8s.io tasks ls -q 2>/dev/null)
  for id in $ids; do ctr -a "$CONTAINERD_SOCK" -n k8s.io tasks kill -s SIGKILL "$id" >/dev/null 2>&1; done
  sleep 1
  for id in $ids; do ctr -a "$CONTAINERD_SOCK" -n k8s.io tasks delete -f "$id" >/dev/null 2>&1; done
  ps -eo pid=,args= | awk -v s="$CONTAINERD_SOCK" 'index($0, "containerd-shim") && index($0, s) {print $1}' | xargs -r kill -9 2>/dev/null
}

case "$MODE" in
  unpack) unpack ;;
  up) up ;;
  down) down ;;
  rehearse) source tests/gpu/k8s-node/rehearse.sh ;;
  gpu) source tests/gpu/k8s-node/gpu.sh ;;
  *) die "usage: $0 [gpu|unpack|rehearse|up|down]" ;;
esac
