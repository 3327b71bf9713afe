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

echo "== verify.yml (GPU facts and node-level vectorAdd), -c local" | tee "$OUT/verify.log"
ansible-playbook -i tests/gpu/inventory.yml playbooks/verify.yml -v 2>&1 | tee -a "$OUT/verify.log"
echo "rc=${PIPESTATUS[0]}" | tee -a "$OUT/verify.log"

echo "== second run (idempotence: changed must be 0)" | tee -a "$OUT/verify.log"
ansible-playbook -i tests/gpu/inventory.yml playbooks/verify.yml 2>&1 | grep -A3 'PLAY RECAP' | tee -a "$OUT/verify.log"

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
  { echo "== CDI spec: devices and size"; nvidia-ctk --version; nvidia-ctk cdi list; wc -c /etc/cdi/nvidia.yaml
    head -n 40 /etc/cdi/nvidia.yaml; echo "== containerd drop-in"; cat /etc/containerd/conf.d/99-nvidia.toml; } 2>&1 | tee -a "$OUT/toolkit.log"
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
