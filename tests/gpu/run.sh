#!/usr/bin/env bash
# Real-GPU checks, run on a machine with an NVIDIA GPU and driver (no network
# needed): the verify role's node level through ansible-playbook -c local, and
# the node-level vectorAdd benchmark (wall time including CUDA initialisation).
# Output goes to ${OUT:-/tmp/k8sgpu-gpu}.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
OUT=${OUT:-/tmp/k8sgpu-gpu}
mkdir -p "$OUT"
export ANSIBLE_CONFIG=$PWD/ansible.cfg ANSIBLE_FORCE_COLOR=0 PYTHONUNBUFFERED=1
{
  echo "== host"; uname -a; nvidia-smi -L; head -1 /proc/driver/nvidia/version; python3 --version; ansible --version | head -1
} 2>&1 | tee "$OUT/host.txt"

echo "== preflight (gpu_facts, GPU required)" | tee "$OUT/preflight.log"
ansible-playbook -i tests/gpu/inventory.yml tests/gpu/preflight.yml 2>&1 | tee -a "$OUT/preflight.log"
echo "rc=${PIPESTATUS[0]}" | tee -a "$OUT/preflight.log"

echo "== verify.yml (GPU facts and node-level vectorAdd), -c local" | tee "$OUT/verify.log"
ansible-playbook -i tests/gpu/inventory.yml playbooks/verify.yml -v 2>&1 | tee -a "$OUT/verify.log"
echo "rc=${PIPESTATUS[0]}" | tee -a "$OUT/verify.log"

echo "== second run (idempotence: changed must be 0)" | tee -a "$OUT/verify.log"
ansible-playbook -i tests/gpu/inventory.yml playbooks/verify.yml 2>&1 | grep -A3 'PLAY RECAP' | tee -a "$OUT/verify.log"

# A GPU that cannot run the kernel: with PTX JIT disabled (and the JIT cache
# off, which would otherwise serve the earlier runs' binary) the driver cannot
# load the module's PTX, so vectorAdd fails on the real GPU. The summary must
# say FAILED with the GPU and the reason, and the play must fail after it.
echo "== verify.yml with CUDA_DISABLE_PTX_JIT=1 CUDA_CACHE_DISABLE=1: FAILED in the summary, play fails" | tee "$OUT/verify-failed.log"
CUDA_DISABLE_PTX_JIT=1 CUDA_CACHE_DISABLE=1 ansible-playbook -i tests/gpu/inventory.yml playbooks/verify.yml 2>&1 | tee -a "$OUT/verify-failed.log"
echo "rc=${PIPESTATUS[0]}" | tee -a "$OUT/verify-failed.log"

DRIVER_BRANCH=${DRIVER_BRANCH:-580}
echo "== driver role (branch $DRIVER_BRANCH): must change nothing and not call apt" | tee "$OUT/driver.log"
apt_state() { stat -c '%n %s %Y' /var/log/apt/history.log /var/log/dpkg.log /var/lib/dpkg/status 2>/dev/null; }
before=$(apt_state)
ansible-playbook -i tests/gpu/inventory.yml tests/gpu/driver.yml -e "driver_branch=$DRIVER_BRANCH" 2>&1 | tee -a "$OUT/driver.log"
echo "rc=${PIPESTATUS[0]}" | tee -a "$OUT/driver.log"
after=$(apt_state)
if [ "$before" = "$after" ]; then echo "package manager: not called (apt/dpkg logs and dpkg status unchanged)"; else
  echo "package manager: CHANGED"; echo "$before"; echo "$after"; fi | tee -a "$OUT/driver.log"

if [ -d .toolkit-repo ]; then
  echo "== container_toolkit role (file:// mirror), then again (changed must be 0)" | tee "$OUT/toolkit.log"
  # Ansible's apt module needs python3-apt, which this machine lacks and cannot
  # fetch (no network): the packages are put in place with dpkg first, as an
  # image build would, and the role must find them and not call apt.
  dpkg -i .toolkit-repo/libnvidia-container/stable/deb/amd64/nvidia-container-toolkit{-base,}_*.deb 2>&1 | tail -n 2 | tee -a "$OUT/toolkit.log"
  ansible-playbook -i tests/gpu/inventory.yml tests/gpu/container_toolkit.yml 2>&1 | tee -a "$OUT/toolkit.log"
  echo "rc=${PIPESTATUS[0]}" | tee -a "$OUT/toolkit.log"
  ansible-playbook -i tests/gpu/inventory.yml tests/gpu/container_toolkit.yml 2>&1 | grep -A3 'PLAY RECAP' | tee -a "$OUT/toolkit.log"
  # A file:// mirror with a proxy set (the README's air-gap setup): no proxy
  # file for a local mirror, nothing else changes.
  echo "== file:// mirror with container_toolkit_repo_proxy set: changed must be 0, no proxy file" | tee -a "$OUT/toolkit.log"
  ansible-playbook -i tests/gpu/inventory.yml tests/gpu/container_toolkit.yml -e container_toolkit_repo_proxy=http://192.0.2.1:3128 2>&1 \
    | grep -E 'fatal|FAILED|PLAY RECAP' -A3 | tee -a "$OUT/toolkit.log"
  f=/etc/apt/apt.conf.d/90k8sgpu-nvidia-container-toolkit-proxy
  echo "proxy file $f: $([ -e $f ] && echo PRESENT || echo absent)" | tee -a "$OUT/toolkit.log"
  { echo "== CDI spec: devices and size"; nvidia-ctk --version; nvidia-ctk cdi list; wc -c /etc/cdi/nvidia.yaml
    head -n 40 /etc/cdi/nvidia.yaml; echo "== containerd drop-in"; cat /etc/containerd/conf.d/99-nvidia.toml; } 2>&1 | tee -a "$OUT/toolkit.log"
fi

# Docker on the GPU machine: Debian 12's docker.io, containerd and runc
# binaries (this machine has no Docker and no network; lab/pack-docker-bin.sh
# packs them into .docker-bin), started without systemd as a VM image's own
# init would. The role merges daemon.json, cannot restart dockerd (no unit)
# and says so; dockerd is restarted here and the role's second run must change
# nothing and pass its check: docker run --rm --gpus all <image> nvidia-smi -L.
if [ -f .docker-bin/docker-bin.tar.xz ] && [ -d .toolkit-repo ]; then
  log=$OUT/docker.log
  echo "== Docker: the container_toolkit role with dockerd (no systemd unit), docker run --gpus all" | tee "$log"
  tar -C /usr/local/bin -xJf .docker-bin/docker-bin.tar.xz
  cp .docker-bin/lib/* /usr/local/lib/ && ldconfig
  start_dockerd() {
    setsid dockerd >>"$OUT/dockerd.log" 2>&1 </dev/null &
    for _ in $(seq 120); do docker version >/dev/null 2>&1 && return 0; sleep 0.5; done
    echo "dockerd did not start:"; tail -n 20 "$OUT/dockerd.log"; return 1
  }
  stop_dockerd() { pkill -x dockerd; for _ in $(seq 60); do pgrep -x dockerd >/dev/null || return 0; sleep 0.5; done; }
  mkdir -p /etc/docker
  # The site's own settings, which the role must keep. No bridge and no
  # iptables: this machine has no network for containers anyway.
  driver=$( [ "$(stat -f -c %T /var/lib)" = overlayfs ] && echo ', "storage-driver": "vfs"')
  printf '{"log-driver": "json-file", "log-opts": {"max-size": "10m"}, "bridge": "none", "iptables": false%s}\n' "$driver" >/etc/docker/daemon.json
  { echo "init: $(ps -o comm= -p 1)"; for b in dockerd containerd runc; do ldd "$(command -v $b)" | grep 'not found'; done
    start_dockerd && docker info --format 'Docker {{.ServerVersion}}, storage {{.Driver}}, cgroup {{.CgroupVersion}}, runtimes {{range $k, $v := .Runtimes}}{{$k}} {{end}}, default {{.DefaultRuntime}}'; } 2>&1 | tee -a "$log"
  # A CUDA base image's shape without a registry: the host's C library (what
  # nvidia-smi links), ldconfig, and the PATH NVIDIA's images set. The driver's
  # files come from the CDI spec the runtime builds.
  mapfile -t libs < <(ldd /usr/local/nvidia/bin/nvidia-smi | grep -o '/[^ ]*' | sed 's|^/||')
  tar -C / -chf - "${libs[@]}" sbin/ldconfig* etc/ld.so.conf usr/bin/sleep 2>/dev/null \
    | docker import -c 'ENV PATH=/usr/local/nvidia/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' - local/cuda-base:h100 2>&1 | tee -a "$log"
  extra='{"container_toolkit_runtimes": ["containerd", "docker"], "container_toolkit_gpu_check_image": "local/cuda-base:h100"}'
  echo "== role, first run: daemon.json merged, dockerd not restarted (no unit)" | tee -a "$log"
  ansible-playbook -i tests/gpu/inventory.yml tests/gpu/container_toolkit.yml -e "$extra" 2>&1 | tee -a "$log"
  echo "rc=${PIPESTATUS[0]}" | tee -a "$log"
  { echo "== /etc/docker/daemon.json"; cat /etc/docker/daemon.json; ls -l /etc/docker; } 2>&1 | tee -a "$log"
  echo "== dockerd restarted by hand" | tee -a "$log"
  { stop_dockerd; start_dockerd && docker info --format 'runtimes {{range $k, $v := .Runtimes}}{{$k}} {{end}}, default {{.DefaultRuntime}}'; } 2>&1 | tee -a "$log"
  echo "== role, second run: changed must be 0, GPU container check passes" | tee -a "$log"
  ansible-playbook -i tests/gpu/inventory.yml tests/gpu/container_toolkit.yml -e "$extra" 2>&1 | tee -a "$log"
  echo "rc=${PIPESTATUS[0]}" | tee -a "$log"
  { echo "== docker run --rm --gpus all local/cuda-base:h100 nvidia-smi"; docker run --rm --gpus all local/cuda-base:h100 nvidia-smi
    echo "rc=$?"; echo "== the same without --gpus (no GPU expected)"; docker run --rm local/cuda-base:h100 nvidia-smi -L; echo "rc=$?"
  } 2>&1 | tee -a "$log"
  stop_dockerd

  # A host set up by hand as the guide says: runtimeArgs (Docker's own key)
  # and the runtime's absolute path. The role must leave daemon.json as it is
  # and not restart dockerd: a container started before runs on.
  echo "== the guide's hand-made daemon.json: the role must change nothing, dockerd and its container keep running" | tee -a "$log"
  printf '{"bridge": "none", "iptables": false%s, "default-runtime": "nvidia", "runtimes": {"nvidia": {"path": "/usr/bin/nvidia-container-runtime", "runtimeArgs": []}}}\n' "$driver" >/etc/docker/daemon.json
  {
    start_dockerd; sum_before=$(sha256sum /etc/docker/daemon.json); pid_before=$(pgrep -x dockerd)
    docker run -d --name k8sgpu-keep local/cuda-base:h100 sleep 600 >/dev/null && echo "container k8sgpu-keep started"
    ansible-playbook -i tests/gpu/inventory.yml tests/gpu/container_toolkit.yml -e "$extra" 2>&1 | grep -E 'changed:|fatal|PLAY RECAP' -A3
    echo "daemon.json: $([ "$(sha256sum /etc/docker/daemon.json)" = "$sum_before" ] && echo unchanged || echo CHANGED)"
    echo "dockerd pid: before $pid_before, after $(pgrep -x dockerd)"
    echo "k8sgpu-keep: $(docker inspect -f '{{.State.Status}} since {{.State.StartedAt}}' k8sgpu-keep)"
    docker rm -f k8sgpu-keep >/dev/null
  } 2>&1 | tee -a "$log"
  stop_dockerd
fi

echo "== gpu_facts" | tee "$OUT/facts.json"
ansible localhost -i tests/gpu/inventory.yml -m k8sgpu.nvidia.gpu_facts 2>&1 | tee -a "$OUT/facts.json"

# Benchmark: one process per run, as a node would see it: Python start, module
# import, cuInit, context, PTX JIT, alloc, copy, kernel, copy back, check.
echo "== bench: cuda_vector_add module process, 50000 elements, 10 runs" | tee "$OUT/bench.txt"
args=$(mktemp)
echo '{"ANSIBLE_MODULE_ARGS": {}}' >"$args"
for i in $(seq 1 10); do
  s=$(date +%s.%N)
  (cd collections && python3 -m ansible_collections.k8sgpu.nvidia.plugins.modules.cuda_vector_add "$args") >"$OUT/run-$i.json"
  e=$(date +%s.%N)
  python3 - "$OUT/run-$i.json" "$s" "$e" <<'PY' | tee -a "$OUT/bench.txt"
import json, sys
r = json.load(open(sys.argv[1]))
g = r["results"][0]
print(f"wall_s={float(sys.argv[3]) - float(sys.argv[2]):.3f} passed={r['passed']} init_ms={r['init_ms']:.1f} gpu_time_ms={g['time_ms']:.2f} kernel_ms={g['kernel_ms']:.3f}")
PY
  rm -f "$OUT/run-$i.json"
done
echo "== bench: the same through ansible (ad hoc, -c local), 3 runs" | tee -a "$OUT/bench.txt"
for i in 1 2 3; do
  s=$(date +%s.%N)
  ansible localhost -i tests/gpu/inventory.yml -m k8sgpu.nvidia.cuda_vector_add >/dev/null 2>&1; rc=$?
  e=$(date +%s.%N)
  python3 -c "import sys; print(f\"ansible_wall_s={float(sys.argv[2]) - float(sys.argv[1]):.3f} rc={sys.argv[3]}\")" "$s" "$e" "$rc" | tee -a "$OUT/bench.txt"
done
