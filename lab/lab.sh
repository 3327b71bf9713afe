#!/usr/bin/env bash
# The k8sgpu.nvidia lab: Debian node containers running systemd, an apt
# caching proxy, and a real Kubernetes control plane (kube-apiserver,
# kube-controller-manager, kube-scheduler, etcd) with kwok nodes.
#
#   lab/lab.sh up      bring the lab up (reuses whatever is already up)
#   lab/lab.sh down    remove every container, network and process it started
#   lab/lab.sh status  show what is running
#   lab/lab.sh images  only build the Debian node images (and what that needs)
#   lab/lab.sh node NAME SUITE [IMAGE]   one more node container (tests remove it)
#   lab/lab.sh node --gpu-host NAME SUITE [IMAGE] [-- DOCKER-RUN-ARGS]  one
#                      more GPU host as the lab's are (gpu-host image or IMAGE,
#                      the PCI bus of eight H100s, ccache), with further
#                      `docker run` arguments; --nvswitch (after --gpu-host)
#                      adds the four NVSwitches of an HGX H100 to that bus
#   lab/lab.sh reset   the GPU node containers started again from their image:
#                      what earlier runs installed on them (the driver, the
#                      toolkit) is gone; their kwok Nodes are left as they are
#   lab/lab.sh scale N [--from-hosts]
#                       N GPU hosts in all: extra node containers and kwok Nodes
#                       (gpu-3..gpu-N) for scale benchmarks; N=2 removes them.
#                       --from-hosts: the extras are copies of gpu-1 and gpu-2
#                       as they are now (docker commit), e.g. after site.yml
#
# The GPU node containers (GPU_NODES, and scale's extras) are GPU hosts to the
# roles: eight H100s on their PCI bus (a sysfs tree of the lab's own, mounted
# over /sys/bus/pci/devices), Debian's Docker and containerd installed and
# running (the gpu-host image). They have no GPU to load a driver for: the
# driver is installed and its module built by DKMS, not loaded.
#
# Everything talks only to loopback and to the lab's own Docker network.
source "$(dirname "$0")/lib.sh"

NETWORK="$LAB_NAME"
APISERVER_PORT="${K8SGPU_LAB_APISERVER_PORT:-36443}"
APT_PROXY_PORT="${K8SGPU_LAB_APT_PROXY_PORT:-3142}"
DEBIAN_MIRROR="${K8SGPU_LAB_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
KUBECONFIG_OUT="$LAB_STATE/kubeconfig"
KWOK_WORKDIR="$LAB_STATE/kwok"
KWOK_CLUSTER="$LAB_NAME"

# The HPA controller's sync period (kube-controller-manager's default: 15s). Shorter in the lab so that the HPA
# tests wait less at each step; bench/hpa_latency.py reads the running value (k8sgpu_testlib.lab).
HPA_SYNC_PERIOD="${K8SGPU_LAB_HPA_SYNC_PERIOD:-5s}"

# GPU node containers: name:debian-suite. Each is also a kwok Node.
GPU_NODES=("$LAB_NAME-gpu-1:bookworm" "$LAB_NAME-gpu-2:trixie")
GPU_PER_NODE="${K8SGPU_LAB_GPUS_PER_NODE:-8}"

# Things this invocation started, undone in reverse order if it fails.
STARTED=()
BUILDER_PID=

undo_started() {
  local rc=$? i
  [ "$rc" -eq 0 ] && return
  # The builder runs in its own process group: stop it and its compilers.
  [ -z "${BUILDER_PID:-}" ] || kill -- "-$BUILDER_PID" 2>/dev/null || true
  [ "${#STARTED[@]}" -eq 0 ] && exit "$rc"
  log "up failed; stopping what this run started: ${STARTED[*]}"
  for ((i=${#STARTED[@]}-1; i>=0; i--)); do
    "stop_${STARTED[$i]}" || true
  done
  exit "$rc"
}

port_owner() {
  ss -Hltnp "sport = :$1" 2>/dev/null | sed -n 's/.*users:((\("[^"]*"\).*/\1/p' | head -n1
}

pid_alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

stop_pidfile() {
  local pidf="$1" what="$2" pid i
  pid_alive "$pidf" || { rm -f "$pidf"; return 0; }
  pid=$(cat "$pidf")
  log "stopping $what (pid $pid)"
  kill "$pid" 2>/dev/null || true
  for i in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
  kill -9 "$pid" 2>/dev/null || true
  rm -f "$pidf"
}

# --- Docker engine -----------------------------------------------------------
start_docker() {
  if docker info >/dev/null 2>&1; then log "docker: engine already running"; return; fi
  command -v dockerd >/dev/null 2>&1 \
    || die "no Docker engine is running and dockerd is not installed. Install Debian's docker.io (apt-get install docker.io) or start your engine."
  mkdir -p "$LAB_STATE"
  log "docker: starting dockerd (log: $LAB_STATE/dockerd.log)"
  setsid dockerd >"$LAB_STATE/dockerd.log" 2>&1 < /dev/null &
  echo $! >"$LAB_STATE/dockerd.pid"
  STARTED+=(docker)
  local i
  for i in $(seq 1 60); do
    docker info >/dev/null 2>&1 && { log "docker: engine up"; return; }
    pid_alive "$LAB_STATE/dockerd.pid" || break
    sleep 1
  done
  tail -n 20 "$LAB_STATE/dockerd.log" >&2 || true
  die "the Docker engine could not be started (see $LAB_STATE/dockerd.log above)"
}
stop_docker() { stop_pidfile "$LAB_STATE/dockerd.pid" dockerd; }

# --- lab network ---------------------------------------------------------------
start_network() {
  if ! docker network inspect "$NETWORK" >/dev/null 2>&1; then
    docker network create --label "k8sgpu.lab=$LAB_NAME" "$NETWORK" >/dev/null
    STARTED+=(network)
    log "network: created $NETWORK"
  fi
  LAB_GATEWAY=$(docker network inspect -f '{{(index .IPAM.Config 0).Gateway}}' "$NETWORK")
  [ -n "$LAB_GATEWAY" ] || die "could not read the gateway address of Docker network $NETWORK"
}
stop_network() {
  docker network rm "$NETWORK" >/dev/null 2>&1 || true
}

# --- apt caching proxy ---------------------------------------------------------
# apt-cacher-ng runs on the host, bound to loopback and the lab network's
# gateway, with its cache outside the repository: each package is downloaded
# once per machine, for debootstrap and for every node container.
start_apt_proxy() {
  local pidf="$LAB_STATE/apt-cacher-ng.pid" owner
  if pid_alive "$pidf"; then log "apt proxy: already running on port $APT_PROXY_PORT"; return; fi
  [ -x /usr/sbin/apt-cacher-ng ] \
    || die "apt-cacher-ng is not installed (apt-get install apt-cacher-ng)"
  # apt-cacher-ng 3.7 fails to bind ports above 32767 ("Error resolving address").
  if ! { [ "$APT_PROXY_PORT" -ge 1 ] && [ "$APT_PROXY_PORT" -le 32767 ]; } 2>/dev/null; then
    die "K8SGPU_LAB_APT_PROXY_PORT=$APT_PROXY_PORT: apt-cacher-ng needs a port between 1 and 32767"
  fi
  owner=$(port_owner "$APT_PROXY_PORT")
  [ -z "$owner" ] || die "port $APT_PROXY_PORT (apt proxy) is taken by $owner; stop it or set K8SGPU_LAB_APT_PROXY_PORT to a free port"
  mkdir -p "$K8SGPU_CACHE/apt-cacher-ng" "$K8SGPU_CACHE/mirror" "$LAB_STATE/apt-cacher-ng"
  # Debian's package points the Debian remap at ftp.debian.org; send it to the
  # mirror this machine reaches instead.
  rm -rf "$LAB_STATE/apt-cacher-ng/conf"
  cp -r /etc/apt-cacher-ng "$LAB_STATE/apt-cacher-ng/conf"
  echo "${DEBIAN_MIRROR%/}/" >"$LAB_STATE/apt-cacher-ng/conf/backends_debian"
  setsid /usr/sbin/apt-cacher-ng -c "$LAB_STATE/apt-cacher-ng/conf" \
    ForeGround=1 Port="$APT_PROXY_PORT" BindAddress="127.0.0.1 $LAB_GATEWAY" \
    CacheDir="$K8SGPU_CACHE/apt-cacher-ng" LogDir="$LAB_STATE/apt-cacher-ng" \
    SocketPath="$LAB_STATE/apt-cacher-ng/socket" PidFile="" \
    LocalDirs="k8sgpu-mirror $K8SGPU_CACHE/mirror" \
    >"$LAB_STATE/apt-cacher-ng.log" 2>&1 < /dev/null &
  echo $! >"$pidf"
  STARTED+=(apt_proxy)
  local i
  for i in $(seq 1 30); do
    [ -n "$(port_owner "$APT_PROXY_PORT")" ] && { log "apt proxy: apt-cacher-ng on 127.0.0.1 and $LAB_GATEWAY port $APT_PROXY_PORT"; return; }
    pid_alive "$pidf" || break
    sleep 0.5
  done
  cat "$LAB_STATE/apt-cacher-ng.log" >&2 || true
  die "apt-cacher-ng did not start (log above)"
}
stop_apt_proxy() { stop_pidfile "$LAB_STATE/apt-cacher-ng.pid" apt-cacher-ng; }

# --- node images -----------------------------------------------------------------
# ccache: the lab's DKMS builds take their objects from a cache kept across labs (DKMS_CCACHE_RUN_ARGS).
IMAGE_PACKAGES="python3,systemd,systemd-sysv,dbus,ca-certificates,iproute2,procps,gnupg,curl,ccache"
IMAGE_RECIPE=1
image_tag() { echo "k8sgpu-lab/debian:$1"; }
image_key() {
  # Bump IMAGE_RECIPE when the debootstrap recipe below changes.
  printf "%s|%s|%s" "$1" "$IMAGE_PACKAGES" "$IMAGE_RECIPE" | sha256sum | cut -c1-12
}

build_image() {
  local suite="$1" tag key tarball rootfs
  tag=$(image_tag "$suite"); key=$(image_key "$suite")
  tarball="$K8SGPU_CACHE/images/debian-$suite-$key.tar"
  if [ "$(docker image inspect -f '{{index .Config.Labels "k8sgpu.image-key"}}' "$tag" 2>/dev/null)" = "$key" ]; then
    log "image $tag: present"; return
  fi
  if [ ! -f "$tarball" ]; then
    need_cmd debootstrap "install Debian's debootstrap (apt-get install debootstrap)"
    need_space "$K8SGPU_CACHE" 2000
    rootfs="$K8SGPU_CACHE/images/rootfs-$suite"
    rm -rf "$rootfs"; mkdir -p "$rootfs"
    log "image $tag: debootstrap $suite through the apt proxy (about a minute)"
    if ! http_proxy="http://127.0.0.1:$APT_PROXY_PORT" debootstrap --variant=minbase \
        --include="$IMAGE_PACKAGES" "$suite" "$rootfs" "$DEBIAN_MIRROR" \
        >"$K8SGPU_CACHE/images/debootstrap-$suite.log" 2>&1; then
      tail -n 20 "$K8SGPU_CACHE/images/debootstrap-$suite.log" >&2
      rm -rf "$rootfs"
      die "debootstrap of Debian $suite failed (log: $K8SGPU_CACHE/images/debootstrap-$suite.log)"
    fi
    # A container has no kernel to manage and no console to log in on.
    rm -f "$rootfs"/etc/machine-id "$rootfs"/var/lib/dbus/machine-id
    : >"$rootfs/etc/machine-id"
    for unit in getty.target systemd-logind.service console-getty.service; do
      ln -sf /dev/null "$rootfs/etc/systemd/system/$unit"
    done
    rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/archives/*.deb
    tar -C "$rootfs" -cf "$tarball.tmp" . && mv "$tarball.tmp" "$tarball"
    rm -rf "$rootfs"
  fi
  log "image $tag: importing $tarball"
  docker import --change "LABEL k8sgpu.image-key=$key" --change 'CMD ["/lib/systemd/systemd"]' \
    --change 'ENV container=docker' "$tarball" "$tag" >/dev/null
}

# --- DKMS builds through ccache ---------------------------------------------------
# DKMS builds the NVIDIA module with the kernel headers' Makefile, whose compiler
# Debian's headers prefix with ccache when DEBIAN_KERNEL_USE_CCACHE is set
# (.kernelvariables: CC = $(if $(DEBIAN_KERNEL_USE_CCACHE),$(CCACHE)) gcc-N).
# The variable reaches DKMS through apt and dpkg (they reset PATH, not the
# environment), so a GPU host's first module build on a machine compiles, and
# the next ones (a new lab, the next CI run, molecule's driver platforms) take
# the objects from $K8SGPU_CACHE/ccache: the driver role, apt and DKMS run as
# on a site; only the compiler's work is cached. The nvidia module's conftest
# alone compiles the same probes hundreds of times.
DKMS_CCACHE_DIR="$K8SGPU_CACHE/ccache"
DKMS_CCACHE_RUN_ARGS=(-v "$DKMS_CCACHE_DIR:/var/cache/k8sgpu-ccache" -e DEBIAN_KERNEL_USE_CCACHE=1
  -e CCACHE_DIR=/var/cache/k8sgpu-ccache -e CCACHE_MAXSIZE=3G)

# --- GPU hosts ------------------------------------------------------------------
# A GPU host's image: the node image with Debian's Docker and containerd, as a
# site's GPU host has its container runtime before the collection runs. Docker
# keeps its images on vfs (the container's own disk is overlayfs); the
# container toolkit role must merge its runtime into that daemon.json.
# (trixie packages Docker's command line apart, as docker-cli.) OpenSSH's
# server, as a site's host has it, not started: a test that must reach the
# host as a site does (ssh, not docker exec) starts it.
gpu_host_packages() {
  if [ "$1" = bookworm ]; then echo "docker.io containerd openssh-server"; else echo "docker.io docker-cli containerd openssh-server"; fi
}
GPU_HOST_RECIPE=3
gpu_host_tag() { echo "k8sgpu-lab/gpu-host:$1"; }
gpu_host_key() { printf "%s|%s|%s" "$(image_key "$1")" "$(gpu_host_packages "$1")" "$GPU_HOST_RECIPE" | sha256sum | cut -c1-12; }
build_gpu_host_image() {
  local suite="$1" tag key tarball tmp packages
  tag=$(gpu_host_tag "$suite"); key=$(gpu_host_key "$suite"); packages=$(gpu_host_packages "$suite")
  tarball="$K8SGPU_CACHE/images/gpu-host-$suite-$key.tar"
  if [ "$(docker image inspect -f '{{index .Config.Labels "k8sgpu.image-key"}}' "$tag" 2>/dev/null)" = "$key" ]; then
    log "image $tag: present"; return
  fi
  if [ -f "$tarball" ]; then
    log "image $tag: loading $tarball"
    docker load -i "$tarball" >/dev/null && return
  fi
  tmp="$LAB_NAME-image-$suite"
  log "image $tag: $packages on $(image_tag "$suite") through the apt proxy"
  docker rm -f "$tmp" >/dev/null 2>&1 || true
  if ! docker run --name "$tmp" --network "$NETWORK" "$(image_tag "$suite")" sh -c "
      set -e
      apt-get -q -o Acquire::http::Proxy=http://$LAB_GATEWAY:$APT_PROXY_PORT update
      DEBIAN_FRONTEND=noninteractive apt-get -q -y --no-install-recommends \
        -o Acquire::http::Proxy=http://$LAB_GATEWAY:$APT_PROXY_PORT install $packages
      apt-get clean; rm -rf /var/lib/apt/lists/*
      systemctl disable -q ssh.service
      mkdir -p /etc/docker; printf '{\n  \"storage-driver\": \"vfs\"\n}\n' >/etc/docker/daemon.json
    " >"$K8SGPU_CACHE/images/gpu-host-$suite.log" 2>&1; then
    tail -n 20 "$K8SGPU_CACHE/images/gpu-host-$suite.log" >&2
    docker rm -f "$tmp" >/dev/null 2>&1 || true
    die "image $tag: installing $packages failed (log: $K8SGPU_CACHE/images/gpu-host-$suite.log)"
  fi
  docker commit --change "LABEL k8sgpu.image-key=$key" --change 'CMD ["/lib/systemd/systemd"]' "$tmp" "$tag" >/dev/null
  docker rm -f "$tmp" >/dev/null
  docker save -o "$tarball.tmp" "$tag" && mv "$tarball.tmp" "$tarball"
}

# The PCI bus of a GPU host: eight H100 SXM5 (device 0x2330, class 0x030200 as
# the GPU machine's sysfs shows it, tests/unit/fixtures/h100) at a DGX H100's
# bus addresses, and the host bridge. One read-only tree for all GPU hosts.
GPU_SYSFS_BUSES="18 2a 3a 5d 9a ab ba db"
# An HGX H100's four NVSwitches (LS10, device 0x22a3 "GH100 [H100 NVSwitch]", class 0x068000: plugins/module_utils/
# _nvswitch.py has the ids and their sources) at the buses of a DGX H100, for `lab.sh node --gpu-host --nvswitch`.
NVSWITCH_SYSFS_BUSES="05 06 07 08"
# write_gpu_sysfs [nvswitch]: the tree under $LAB_STATE/gpu-sysfs (gpu-sysfs-nvswitch with the NVSwitches).
gpu_sysfs_dir() { if [ "${1:-}" = nvswitch ]; then echo "$LAB_STATE/gpu-sysfs-nvswitch/devices"; else echo "$LAB_STATE/gpu-sysfs/devices"; fi; }
write_gpu_sysfs() {
  local root bus dev
  root=$(gpu_sysfs_dir "${1:-}")
  [ -f "$root/.complete" ] && return
  rm -rf "$root"; mkdir -p "$root"
  for bus in $GPU_SYSFS_BUSES; do
    dev="$root/0000:$bus:00.0"; mkdir -p "$dev"
    echo 0x10de >"$dev/vendor"; echo 0x2330 >"$dev/device"; echo 0x030200 >"$dev/class"
  done
  if [ "${1:-}" = nvswitch ]; then
    for bus in $NVSWITCH_SYSFS_BUSES; do
      dev="$root/0000:$bus:00.0"; mkdir -p "$dev"
      echo 0x10de >"$dev/vendor"; echo 0x22a3 >"$dev/device"; echo 0x068000 >"$dev/class"
    done
  fi
  dev="$root/0000:00:00.0"; mkdir -p "$dev"
  echo 0x8086 >"$dev/vendor"; echo 0x09a2 >"$dev/device"; echo 0x060000 >"$dev/class"
  : >"$root/.complete"
}
# start_node_container's arguments for a GPU host (after write_gpu_sysfs [nvswitch]), added to NODE_RUN_ARGS.
add_gpu_host_run_args() {
  mkdir -p "$DKMS_CCACHE_DIR"
  NODE_RUN_ARGS+=(-v "$(gpu_sysfs_dir "${1:-}"):/sys/bus/pci/devices:ro" --label "k8sgpu.lab.gpu-host=$GPU_HOST_RECIPE${1:+-$1}"
    "${DKMS_CCACHE_RUN_ARGS[@]}")
}

# --- node containers -------------------------------------------------------------
# A reboot inside a node (systemctl reboot, ansible.builtin.reboot) ends its
# systemd, so the container exits; the restart policy starts it again, with a
# fresh /run. Containers share the host's boot_id: a reboot is seen from
# PID 1's start time (NODE_BOOT_TIME_COMMAND, the inventory's
# driver_reboot_boot_time_command).
NODE_RESTART_POLICY=unless-stopped
# Further `docker run` arguments for the containers started next (lab.sh scale's label).
NODE_RUN_ARGS=()
start_node_container() {
  local name="$1" suite="$2" image="${3:-$(image_tag "$2")}" i state
  local want_recipe="" have_recipe arg
  for arg in "${NODE_RUN_ARGS[@]}"; do
    case "$arg" in k8sgpu.lab.gpu-host=*) want_recipe=${arg#*=} ;; esac
  done
  # A running container of an earlier recipe or image is started again from this one.
  have_recipe=$(docker inspect -f '{{index .Config.Labels "k8sgpu.lab.gpu-host"}}|{{.Image}}' "$name" 2>/dev/null || true)
  want_recipe="$want_recipe|$(docker image inspect -f '{{.Id}}' "$image" 2>/dev/null || true)"
  if [ "$(docker inspect -f '{{.State.Running}}' "$name" 2>/dev/null)" = true ] && [ "$have_recipe" = "$want_recipe" ]; then
    # Containers of an earlier lab: the policy is changed in place.
    docker update --restart "$NODE_RESTART_POLICY" "$name" >/dev/null
    log "node $name: running"; return
  fi
  docker rm -f -v "$name" >/dev/null 2>&1 || true
  docker run -d --name "$name" --hostname "$name" --network "$NETWORK" \
    --label "k8sgpu.lab=$LAB_NAME" "${NODE_RUN_ARGS[@]}" --restart "$NODE_RESTART_POLICY" \
    --cap-add SYS_ADMIN --cap-add NET_ADMIN \
    --security-opt seccomp=unconfined --security-opt apparmor=unconfined \
    --tmpfs /run --tmpfs /run/lock --tmpfs /tmp \
    -v /sys/fs/cgroup:/sys/fs/cgroup:ro -e container=docker \
    "$image" /lib/systemd/systemd >/dev/null
  STARTED+=(containers)
  for i in $(seq 1 60); do
    state=$(docker exec "$name" systemctl is-system-running 2>/dev/null || true)
    case "$state" in
      running) log "node $name: systemd running (Debian $suite)"; return ;;
      degraded)
        log "node $name: systemd degraded; failed units:"
        docker exec "$name" systemctl --failed --no-legend >&2 || true
        return ;;
    esac
    sleep 1
  done
  die "node container $name: systemd did not reach 'running' in 60 s (state: ${state:-unknown}); see 'docker logs $name'"
}
stop_containers() {
  local ids
  ids=$(docker ps -aq --filter "label=k8sgpu.lab=$LAB_NAME")
  # shellcheck disable=SC2086 # one argument per container id
  [ -z "$ids" ] || docker rm -f -v $ids >/dev/null
}

# --- Kubernetes control plane ----------------------------------------------------
kwokctl() { KWOK_WORKDIR="$KWOK_WORKDIR" KWOK_KUBE_VERSION="$K8S_VERSION" PATH="$(k8s_bin_dir):$PATH" "$(kwok_bin_dir)/kwokctl" "$@"; }

cluster_up() {
  KUBECONFIG="$KUBECONFIG_OUT" "$(k8s_bin_dir)/kubectl" get --raw /readyz >/dev/null 2>&1
}

# kube-apiserver publishes its request-header settings for aggregated API
# servers in this ConfigMap; a lab started before they were set lacks them.
aggregation_configured() {
  KUBECONFIG="$KUBECONFIG_OUT" "$(k8s_bin_dir)/kubectl" -n kube-system get configmap extension-apiserver-authentication \
    -o jsonpath='{.data.requestheader-allowed-names}' 2>/dev/null | grep -q kwok-admin
}

# The running kube-controller-manager's command line (NUL-separated), from kwokctl's pid file.
controller_manager_cmdline() {
  local pidf="$KWOK_WORKDIR/clusters/$KWOK_CLUSTER/pids/kube-controller-manager.pid"
  pid_alive "$pidf" && cat "/proc/$(cat "$pidf")/cmdline"
}

controller_manager_configured() {
  controller_manager_cmdline | tr '\0' '\n' | grep -qx -- "--horizontal-pod-autoscaler-sync-period=$HPA_SYNC_PERIOD"
}

# A lab started before HPA_SYNC_PERIOD was set (or with another value): only kube-controller-manager is started
# again, with the same arguments and the new period (the API server and etcd stay up; the new process writes
# kwokctl's pid file, so `lab down` stops it as before). A controller manager that is not running: the cluster is
# made again.
restart_controller_manager() {
  local dir="$KWOK_WORKDIR/clusters/$KWOK_CLUSTER" arg args=()
  while IFS= read -r -d '' arg; do
    case "$arg" in --horizontal-pod-autoscaler-sync-period=*) ;; *) args+=("$arg") ;; esac
  done < <(controller_manager_cmdline)
  [ "${#args[@]}" -gt 0 ] || return 1
  log "cluster: starting kube-controller-manager again with --horizontal-pod-autoscaler-sync-period=$HPA_SYNC_PERIOD"
  stop_pidfile "$dir/pids/kube-controller-manager.pid" kube-controller-manager
  # The subshell becomes the controller manager (exec; setsid without a fork, the subshell leading no group), so
  # $! is its pid.
  (cd "$dir" || exit 1; exec setsid "${args[@]}" "--horizontal-pod-autoscaler-sync-period=$HPA_SYNC_PERIOD" \
     >>"$dir/logs/kube-controller-manager.log" 2>&1 </dev/null) &
  echo $! >"$dir/pids/kube-controller-manager.pid"
  local i
  for i in $(seq 1 50); do controller_manager_configured && return 0; sleep 0.2; done
  return 1
}

start_cluster() {
  if [ -f "$KUBECONFIG_OUT" ] && cluster_up; then
    if aggregation_configured; then
      if controller_manager_configured || restart_controller_manager; then log "cluster: API server ready"; return; fi
      log "cluster: kube-controller-manager is not running; recreating the cluster"
    else
      log "cluster: the running API server lacks the aggregation layer's request-header flags; recreating it"
    fi
    kwokctl delete cluster --name "$KWOK_CLUSTER" >/dev/null 2>&1 || true
  fi
  local owner
  owner=$(port_owner "$APISERVER_PORT")
  [ -z "$owner" ] || die "port $APISERVER_PORT (kube-apiserver) is taken by $owner; stop it or set K8SGPU_LAB_APISERVER_PORT to a free port"
  kwokctl delete cluster --name "$KWOK_CLUSTER" >/dev/null 2>&1 || true
  mkdir -p "$KWOK_WORKDIR"
  log "cluster: starting etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok ($K8S_VERSION)"
  STARTED+=(cluster)
  # The aggregation layer's request-header flags (kwokctl sets only the proxy
  # client certificate): an aggregated API server such as prometheus-adapter
  # then checks that calls come from this kube-apiserver, as in a real cluster.
  local pki="$KWOK_WORKDIR/clusters/$KWOK_CLUSTER/pki" aggregation=()
  aggregation=(
    --extra-args "kube-apiserver=requestheader-client-ca-file=$pki/ca.crt"
    --extra-args "kube-apiserver=requestheader-allowed-names=kwok-admin"
    --extra-args "kube-apiserver=requestheader-username-headers=X-Remote-User"
    --extra-args "kube-apiserver=requestheader-group-headers=X-Remote-Group"
    --extra-args "kube-apiserver=requestheader-extra-headers-prefix=X-Remote-Extra-"
    --extra-args "kube-controller-manager=horizontal-pod-autoscaler-sync-period=$HPA_SYNC_PERIOD"
  )
  if ! kwokctl create cluster --name "$KWOK_CLUSTER" --runtime binary \
      "${aggregation[@]}" \
      --kube-apiserver-port "$APISERVER_PORT" \
      --kube-apiserver-binary "$(k8s_bin_dir)/kube-apiserver" \
      --kube-controller-manager-binary "$(k8s_bin_dir)/kube-controller-manager" \
      --kube-scheduler-binary "$(k8s_bin_dir)/kube-scheduler" \
      --kwok-controller-binary "$(kwok_bin_dir)/kwok" \
      --etcd-binary "$(etcd_bin_dir)/etcd" \
      --kubeconfig "$LAB_STATE/kwokctl-kubeconfig" \
      --wait 120s >"$LAB_STATE/kwokctl.log" 2>&1; then
    tail -n 30 "$LAB_STATE/kwokctl.log" >&2
    die "the Kubernetes control plane did not start (log: $LAB_STATE/kwokctl.log; component logs: kwokctl --name $KWOK_CLUSTER logs <component>)"
  fi
  kwokctl get kubeconfig --name "$KWOK_CLUSTER" >"$KUBECONFIG_OUT.tmp"
  mv "$KUBECONFIG_OUT.tmp" "$KUBECONFIG_OUT"; chmod 600 "$KUBECONFIG_OUT"
  log "cluster: API server ready; kubeconfig at $KUBECONFIG_OUT"
}
stop_cluster() {
  if [ -x "$(kwok_bin_dir)/kwokctl" ] && [ -d "$KWOK_WORKDIR" ]; then
    kwokctl delete cluster --name "$KWOK_CLUSTER" >/dev/null 2>&1 || true
  fi
}

# Every GPU node container is also a kwok Node of the same name with
# nvidia.com/gpu capacity; two control-plane nodes (current and legacy taint
# keys) and a CPU-only worker complete the topology.
apply_topology() {
  local gpu_names=() entry
  for entry in "${GPU_NODES[@]}"; do gpu_names+=("${entry%%:*}"); done
  python3 "$LAB_ROOT/lab/topology.py" --lab-name "$LAB_NAME" --gpus "$GPU_PER_NODE" "${gpu_names[@]}" \
    | KUBECONFIG="$KUBECONFIG_OUT" "$(k8s_bin_dir)/kubectl" apply --server-side --field-manager k8sgpu-lab -f - >/dev/null
  KUBECONFIG="$KUBECONFIG_OUT" "$(k8s_bin_dir)/kubectl" wait --for=condition=Ready node --all --timeout=60s >/dev/null \
    || die "kwok nodes did not become Ready in 60 s; see: kwokctl --name $KWOK_CLUSTER logs kwok-controller"
  log "cluster: nodes ready"
}

# Each file is written beside and renamed into place: `make test` runs molecule
# (which reads them) beside `make lab` (which writes them again).
write_env() {
  cat >"$LAB_STATE/env.tmp" <<ENV
# source this file to use the lab's kubectl and kubeconfig
export KUBECONFIG="$KUBECONFIG_OUT"
export PATH="$(k8s_bin_dir):\$PATH"
export K8SGPU_LAB_APT_PROXY="http://$LAB_GATEWAY:$APT_PROXY_PORT"
export K8SGPU_LAB_TOOLKIT_MIRROR="$(toolkit_mirror_url)"
export K8SGPU_LAB_CCACHE_DIR="$DKMS_CCACHE_DIR"
ENV
  echo "http://$LAB_GATEWAY:$APT_PROXY_PORT" >"$LAB_STATE/apt-proxy-url.tmp"
  toolkit_mirror_url >"$LAB_STATE/toolkit-mirror-url.tmp"
  echo "$K8SGPU_CACHE/bin/nvidia-container-toolkit-$NVIDIA_CTK_VERSION" >"$LAB_STATE/toolkit-bin-dir.tmp"
  local f
  for f in env apt-proxy-url toolkit-mirror-url toolkit-bin-dir; do mv "$LAB_STATE/$f.tmp" "$LAB_STATE/$f"; done
}

# The NVIDIA container toolkit repository built by lab/build-toolkit-repo.sh,
# served by apt-cacher-ng from $K8SGPU_CACHE/mirror (LocalDirs). Nodes reach
# it directly: apt-cacher-ng refuses to proxy requests to itself.
toolkit_mirror_url() {
  echo "http://$LAB_GATEWAY:$APT_PROXY_PORT/k8sgpu-mirror/$(basename "$(toolkit_repo_dir)")/libnvidia-container"
}

# One `up` or `images` at a time per lab state: `make test`'s prebuild builds
# the images in the background while `make lab` may already be starting. The
# script runs again under flock -o, which holds the lock itself and closes it
# for the script: the daemons it starts (dockerd, apt-cacher-ng, the control
# plane) must not inherit it, or it would stay held while they run.
lock_lab() {
  local lock="$LAB_STATE/lab-sh.lock"
  if [ "${K8SGPU_LAB_LOCKED:-}" = "$lock" ]; then unset K8SGPU_LAB_LOCKED; return; fi
  mkdir -p "$LAB_STATE"
  if ! flock -n "$lock" true; then
    log "another lab.sh up/images is running for $LAB_STATE; waiting for it"
  fi
  K8SGPU_LAB_LOCKED="$lock" exec flock -o "$lock" "$0" "$@"
}

cmd_up() {
  lock_lab up
  trap undo_started EXIT
  need_cmd docker "install Debian's docker.io (apt-get install docker.io)"
  need_cmd ss "install iproute2"
  need_space "$K8SGPU_CACHE" 1000
  mkdir -p "$LAB_STATE"
  start_docker
  start_network
  start_apt_proxy
  # The Go builds the lab needs (control plane, kwok, the container toolkit's
  # apt repository; not the tests' Prometheus, adapter and Karpenter) are
  # CPU-bound and debootstrap is network-bound: run them side by side.
  setsid "$LAB_ROOT/lab/build-binaries.sh" lab >"$LAB_STATE/build-binaries.log" 2>&1 < /dev/null &
  local builder=$! entry
  BUILDER_PID=$builder
  for suite in bookworm trixie; do build_image "$suite"; build_gpu_host_image "$suite"; done
  write_gpu_sysfs
  if ! wait "$builder"; then
    cat "$LAB_STATE/build-binaries.log" >&2
    die "building the control plane binaries failed (log above: $LAB_STATE/build-binaries.log)"
  fi
  BUILDER_PID=
  sed 's/^/  /' "$LAB_STATE/build-binaries.log" >&2
  NODE_RUN_ARGS=(); add_gpu_host_run_args
  for entry in "${GPU_NODES[@]}"; do
    start_node_container "${entry%%:*}" "${entry##*:}" "$(gpu_host_tag "${entry##*:}")"
  done
  NODE_RUN_ARGS=()
  start_cluster
  apply_topology
  write_env
  trap - EXIT
  log "lab is up. Next: ansible-playbook site.yml -i inventories/lab"
  cmd_status
}

# Node images only (docker, network and apt proxy are started for debootstrap).
cmd_images() {
  lock_lab images
  trap undo_started EXIT
  start_docker; start_network; start_apt_proxy
  for suite in bookworm trixie; do build_image "$suite"; build_gpu_host_image "$suite"; done
  mkdir -p "$DKMS_CCACHE_DIR"
  write_env
  trap - EXIT
}

# Processes that tests start beside the control plane (Prometheus,
# prometheus-adapter, the stand-in DCGM exporter, Karpenter) leave a pid file
# here; a test run that was killed leaves them running until `down`.
stop_test_processes() {
  local pidf
  for pidf in "$LAB_STATE"/procs/*.pid; do
    [ -e "$pidf" ] || continue
    stop_pidfile "$pidf" "$(basename "$pidf" .pid)"
  done
}

cmd_down() {
  log "taking the lab down"
  stop_test_processes
  stop_cluster
  if docker info >/dev/null 2>&1; then
    stop_containers
    stop_network
    remove_scale_copies
  fi
  stop_apt_proxy
  stop_docker
  rm -rf "$LAB_STATE"
  log "lab is down"
}

cmd_status() {
  echo "state:      $LAB_STATE"
  echo "cache:      $K8SGPU_CACHE"
  if pid_alive "$LAB_STATE/apt-cacher-ng.pid"; then echo "apt proxy:  $(cat "$LAB_STATE/apt-proxy-url" 2>/dev/null || echo running)"; else echo "apt proxy:  down"; fi
  if docker info >/dev/null 2>&1; then
    echo "containers:"; docker ps --filter "label=k8sgpu.lab=$LAB_NAME" --format '  {{.Names}}\t{{.Status}}\t{{.Image}}'
  else
    echo "containers: (no Docker engine)"
  fi
  if [ -f "$KUBECONFIG_OUT" ] && cluster_up; then
    echo "nodes:"
    KUBECONFIG="$KUBECONFIG_OUT" "$(k8s_bin_dir)/kubectl" get nodes \
      -o custom-columns='NAME:.metadata.name,STATUS:.status.conditions[?(@.type=="Ready")].status,GPU:.status.capacity.nvidia\.com/gpu,TAINTS:.spec.taints[*].key' \
      | sed 's/^/  /'
  else
    echo "cluster:    down"
  fi
}

# One more node container of the lab's recipe (tests): lab.sh node NAME SUITE
# [IMAGE], IMAGE defaulting to the suite's node image (lab/upgrade-nodes.sh
# passes its starting image). The lab must be up; 'lab.sh down' removes it
# with the others.
cmd_node() {
  local gpu_host=false nvswitch="" args=() extra=()
  if [ "${1:-}" = --gpu-host ]; then gpu_host=true; shift; fi
  if $gpu_host && [ "${1:-}" = --nvswitch ]; then nvswitch=nvswitch; shift; fi
  while [ $# -gt 0 ]; do
    if [ "$1" = -- ]; then shift; extra=("$@"); break; fi
    args+=("$1"); shift
  done
  set -- "${args[@]}"
  { [ $# -eq 2 ] || [ $# -eq 3 ]; } \
    || { echo "usage: $0 node [--gpu-host [--nvswitch]] NAME bookworm|trixie [IMAGE] [-- DOCKER-RUN-ARGS]" >&2; exit 2; }
  local image="${3:-$(image_tag "$2")}"
  NODE_RUN_ARGS=()
  if $gpu_host; then image="${3:-$(gpu_host_tag "$2")}"; write_gpu_sysfs $nvswitch; add_gpu_host_run_args $nvswitch; fi
  NODE_RUN_ARGS+=("${extra[@]}")
  docker image inspect "$image" >/dev/null 2>&1 || die "no image $image: run lab/lab.sh up first"
  docker network inspect "$NETWORK" >/dev/null 2>&1 || die "no network $NETWORK: run lab/lab.sh up first"
  start_node_container "$1" "$2" "$image"
}

# `up` keeps GPU node containers that already run (a lab brought up again keeps what site.yml installed); `reset`
# starts them again from the gpu-host image, as a fresh lab has them (tests/lab/test_site.py, whose first run must
# find hosts with nothing installed).
cmd_reset() {
  [ $# -eq 0 ] || { echo "usage: $0 reset" >&2; exit 2; }
  lock_lab reset
  local entry suite
  docker network inspect "$NETWORK" >/dev/null 2>&1 || die "no network $NETWORK: run lab/lab.sh up first"
  for entry in "${GPU_NODES[@]}"; do
    suite=${entry##*:}
    docker image inspect "$(gpu_host_tag "$suite")" >/dev/null 2>&1 || die "no image $(gpu_host_tag "$suite"): run lab/lab.sh up first"
  done
  write_gpu_sysfs
  NODE_RUN_ARGS=(); add_gpu_host_run_args
  for entry in "${GPU_NODES[@]}"; do
    docker rm -f -v "${entry%%:*}" >/dev/null 2>&1 || true
    start_node_container "${entry%%:*}" "${entry##*:}" "$(gpu_host_tag "${entry##*:}")"
  done
  log "reset: ${#GPU_NODES[@]} GPU hosts as the gpu-host image has them"
}

# Extra GPU hosts for scale benchmarks (bench/site_scale.py): lab.sh scale N leaves N GPU hosts in the lab, the
# ones of GPU_NODES and the extras $LAB_NAME-gpu-3..N, Debian bookworm and trixie in turn as gpu-1 and gpu-2. Each
# extra is a node container of the lab's recipe, started side by side, and a kwok Node of topology.py's shape with
# the label SCALE_LABEL (its container: SCALE_CONTAINER_LABEL). Extras above N are removed with their Nodes and the
# pods bound to those Nodes (DaemonSets' pods). Opt-in: `up` starts none, `down` removes them with the rest. Other
# lab users count Nodes: hold the lab's lock for as long as extras exist, and scale back to 2 before letting go.
# With --from-hosts each extra starts from a commit of the GPU host of its suite as it is now (SCALE_COPY_TAG): a lab
# that site.yml converged scales to converged extras, without a DKMS build on each. `scale 2` removes the copies.
SCALE_LABEL=k8sgpu.lab/scale-extra
SCALE_CONTAINER_LABEL=k8sgpu.lab.scale-extra
SCALE_COPY_TAG=k8sgpu-lab/gpu-host-copy
SCALE_MAX=64
# Extra GPU host $1's Debian suite: gpu-3, gpu-5... bookworm as gpu-1; gpu-4, gpu-6... trixie as gpu-2.
extra_suite() { if [ $(($1 % 2)) -eq 1 ]; then echo bookworm; else echo trixie; fi; }
# The lab's GPU host of Debian suite $1 as it is now, committed as $SCALE_COPY_TAG:$1.
copy_gpu_host() {
  local entry host
  for entry in "${GPU_NODES[@]}"; do
    if [ "${entry##*:}" = "$1" ]; then host=${entry%%:*}; fi
  done
  [ "$(docker inspect -f '{{.State.Running}}' "$host" 2>/dev/null)" = true ] \
    || die "scale --from-hosts: $host is not running: run lab/lab.sh up first"
  log "scale: copying $host (Debian $1) as it is now to $SCALE_COPY_TAG:$1"
  docker commit "$host" "$SCALE_COPY_TAG:$1" >/dev/null
}
remove_scale_copies() { docker image ls -q "$SCALE_COPY_TAG" | sort -u | xargs -r docker rmi -f >/dev/null 2>&1 || true; }
cmd_scale() {
  local from_hosts=false flags=()
  [ "${2:-}" != --from-hosts ] || { from_hosts=true; flags=(--from-hosts); set -- "$1"; }
  { [ $# -eq 1 ] && [[ "$1" =~ ^[0-9]+$ ]]; } \
    || { echo "usage: $0 scale N [--from-hosts] (GPU hosts in all, ${#GPU_NODES[@]}..$SCALE_MAX)" >&2; exit 2; }
  local want=$((10#$1)) base=${#GPU_NODES[@]} kubectl name i suite pids=() failed=0 add=() drop=()
  local -A image=()
  [ "$want" -ge "$base" ] \
    || die "scale $want: the lab has $base GPU hosts of its own and N counts them (lab.sh scale $base removes the extras)"
  [ "$want" -le "$SCALE_MAX" ] || die "scale $want: at most $SCALE_MAX GPU hosts"
  lock_lab scale "$want" "${flags[@]}"
  kubectl=("$(k8s_bin_dir)/kubectl" --kubeconfig "$KUBECONFIG_OUT")
  docker network inspect "$NETWORK" >/dev/null 2>&1 || die "no network $NETWORK: run lab/lab.sh up first"
  { [ -f "$KUBECONFIG_OUT" ] && cluster_up; } || die "the lab's API server is not up: run lab/lab.sh up first"
  for suite in bookworm trixie; do
    docker image inspect "$(gpu_host_tag "$suite")" >/dev/null 2>&1 || die "no image $(gpu_host_tag "$suite"): run lab/lab.sh up first"
    image[$suite]=$(gpu_host_tag "$suite")
  done
  write_gpu_sysfs

  # Extras above N: containers and Nodes (either may be left alone by an interrupted run).
  while read -r name; do
    [ -n "$name" ] || continue
    i=${name##*-gpu-}
    [[ "$i" =~ ^[0-9]+$ ]] && [ "$i" -le "$want" ] || drop+=("$name")
  done < <({ docker ps -a --filter "label=$SCALE_CONTAINER_LABEL" --format '{{.Names}}'
             "${kubectl[@]}" get nodes -l "$SCALE_LABEL" -o jsonpath='{range .items[*]}{.metadata.name}{"\n"}{end}'; } | sort -u)
  if [ "${#drop[@]}" -gt 0 ]; then
    log "scale: removing ${#drop[@]} extra GPU host(s): ${drop[*]}"
    docker rm -f -v "${drop[@]}" >/dev/null 2>&1 || true
    "${kubectl[@]}" delete node --ignore-not-found --wait=true "${drop[@]}" >/dev/null
    # Pods bound to a deleted Node (DaemonSets') would wait for the pod garbage collector.
    for name in "${drop[@]}"; do
      "${kubectl[@]}" delete pods -A --field-selector "spec.nodeName=$name" --force --grace-period=0 \
        --ignore-not-found >/dev/null 2>&1 || true
    done
  fi
  [ "$want" -gt "$base" ] || remove_scale_copies
  if [ "$from_hosts" = true ]; then
    # The lab host of each extra's suite, copied as it is now (the first two extras name both suites).
    for ((i = base + 1; i <= want && i <= base + 2; i++)); do
      suite=$(extra_suite "$i")
      copy_gpu_host "$suite"
      image[$suite]="$SCALE_COPY_TAG:$suite"
    done
  fi

  # Extras up to N, started side by side (each waits for its systemd).
  for ((i = base + 1; i <= want; i++)); do
    name="$LAB_NAME-gpu-$i"
    suite=$(extra_suite "$i")
    add+=("$name")
    NODE_RUN_ARGS=(--label "$SCALE_CONTAINER_LABEL=true"); add_gpu_host_run_args
    # dockerd renames directories under /var/lib/docker when it starts, which overlayfs refuses (EXDEV) for a
    # directory of a lower layer, as the copy's is: an anonymous volume, filled from the copy, holds it instead.
    [ "$from_hosts" = false ] || NODE_RUN_ARGS+=(-v /var/lib/docker)
    start_node_container "$name" "$suite" "${image[$suite]}" &
    pids+=($!)
  done
  for i in "${pids[@]}"; do wait "$i" || failed=$((failed + 1)); done
  [ "$failed" -eq 0 ] || die "scale: $failed extra node container(s) did not start (messages above); lab.sh scale $base removes them"
  if [ "${#add[@]}" -gt 0 ]; then
    python3 "$LAB_ROOT/lab/topology.py" --lab-name "$LAB_NAME" --gpus "$GPU_PER_NODE" --gpu-only "${add[@]}" \
      | "${kubectl[@]}" apply --server-side --field-manager k8sgpu-lab -f - >/dev/null
    "${kubectl[@]}" wait --for=condition=Ready --timeout=60s "${add[@]/#/node/}" >/dev/null \
      || die "scale: the extra kwok Nodes did not become Ready in 60 s; see: kwokctl --name $KWOK_CLUSTER logs kwok-controller"
  fi
  log "scale: $want GPU hosts ($((want - base)) extra: node containers and kwok Nodes labelled $SCALE_LABEL)"
}

# The daemons the lab starts (dockerd, apt-cacher-ng, the control plane through kwokctl) would inherit every open
# descriptor of the caller: started as `flock LOCK lab/lab.sh up`, they would hold LOCK for as long as they run.
# Only stdin, stdout, stderr and bash's own script descriptor (255) stay open.
close_inherited_fds() {
  local fd fds=(/proc/$$/fd/*)
  for fd in "${fds[@]}"; do
    fd=${fd##*/}
    case "$fd" in 0|1|2|255) continue ;; esac
    eval "exec $fd>&-" 2>/dev/null || true
  done
}
close_inherited_fds

case "${1:-}" in
  up) cmd_up ;;
  node) shift; cmd_node "$@" ;;
  scale) shift; cmd_scale "$@" ;;
  reset) shift; cmd_reset "$@" ;;
  images) cmd_images ;;
  down) cmd_down ;;
  status) cmd_status ;;
  *) echo "usage: $0 up|down|status|images|node [--gpu-host] NAME SUITE [IMAGE] [-- ARGS]|scale N [--from-hosts]|reset" >&2; exit 2 ;;
esac
