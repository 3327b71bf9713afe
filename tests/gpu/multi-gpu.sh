#!/usr/bin/env bash
# Multi-GPU checks at node level (issue 13), on a machine with two or more
# NVIDIA GPUs and a loaded driver, no network: the collection's own modules
# through ansible -c local, as tests/gpu/run.sh runs them on one GPU.
#   - gpu_facts reports every GPU (index, UUID, name, memory, compute capability);
#   - the GFD labels the node_labels role would set (nvidia.com/gpu.count);
#   - cuda_vector_add on every GPU, one result per GPU with its time;
#   - cuda_vector_add with devices restricted to one index runs that GPU only;
#   - the whole module's wall time on one GPU and on all of them (5 runs each);
#   - verify.yml's summary (a line per GPU).
# Needs ansible-core on PATH (see tests/gpu/run.sh for the carried wheels).
# Output goes to ${OUT:-/tmp/k8sgpu-multi-gpu}; exit status 1 when a check fails.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
OUT=${OUT:-/tmp/k8sgpu-multi-gpu}
mkdir -p "$OUT"
export ANSIBLE_CONFIG=$PWD/ansible.cfg ANSIBLE_FORCE_COLOR=0 PYTHONUNBUFFERED=1
INV=tests/gpu/inventory.yml
fail=0

TMP=$(mktemp -d); trap 'rm -rf "$TMP"' EXIT
# One module call, its result as JSON on stdout (ansible-core's tree callback,
# -t: the json callback is in ansible.posix, which a bare ansible-core lacks).
module_json() {
  rm -rf "$TMP/tree"
  ansible -i "$INV" localhost -t "$TMP/tree" -m "k8sgpu.nvidia.$1" ${2:+-a "$2"} >"$TMP/ansible.out" 2>&1
  if [ -s "$TMP/tree/localhost" ]; then cat "$TMP/tree/localhost"; else cat "$TMP/ansible.out" >&2; echo '{}'; fi
}

# Everything printed also goes to run.log (the GPU machine's tool brings back
# at most 8 files: run.log, facts.json, vector-add-all.json,
# vector-add-one.json, wall.log, verify.log, result.txt).
exec > >(tee "$OUT/run.log") 2>&1

echo "== host"; uname -r; nvidia-smi -L; head -1 /proc/driver/nvidia/version; nproc
count=$(nvidia-smi -L | grep -c '^GPU ')
if [ "$count" -lt 2 ]; then echo "this machine has $count GPU(s); multi-gpu.sh needs two or more"; exit 2; fi

echo "== gpu_facts"
module_json gpu_facts >"$OUT/facts.json"
python3 - "$OUT/facts.json" "$count" <<'PY' 2>&1
import json, sys
r = json.load(open(sys.argv[1])); n = int(sys.argv[2])
gpus = r["ansible_facts"]["nvidia_gpus"]
for g in gpus:
    print({k: g.get(k) for k in ("index", "uuid", "name", "memory_total_mib", "compute_capability", "pci_bus_id")})
ok = (len(gpus) == n and len({g["uuid"] for g in gpus}) == n and sorted(g["index"] for g in gpus) == list(range(n)))
print(f"facts: {len(gpus)} GPUs, distinct UUIDs and indexes 0..{n-1}: {'PASS' if ok else 'FAIL'}")
sys.exit(0 if ok else 1)
PY
[ "${PIPESTATUS[0]}" -eq 0 ] || fail=1

echo "== GFD labels from these facts (what node_labels sets from GPU facts)"
rm -rf "$TMP/tree"
ansible -i "$INV" localhost -t "$TMP/tree" -m ansible.builtin.debug \
  -a "msg={{ (lookup('file', '$OUT/facts.json') | from_json).ansible_facts | k8sgpu.nvidia.gfd_labels }}" >"$TMP/ansible.out" 2>&1
if python3 -c 'import json,sys; m=json.load(open(sys.argv[1]))["msg"]; print(json.dumps(m, indent=1, sort_keys=True)); sys.exit(0 if m.get("nvidia.com/gpu.count") == sys.argv[2] else 1)' \
     "$TMP/tree/localhost" "$count"; then
  echo "nvidia.com/gpu.count = $count: PASS"
else cat "$TMP/ansible.out"; echo "nvidia.com/gpu.count: FAIL"; fail=1; fi

echo "== cuda_vector_add on every GPU"
module_json cuda_vector_add >"$OUT/vector-add-all.json"
echo "== cuda_vector_add with devices=[$((count - 1))] (that GPU only)"
module_json cuda_vector_add "{\"devices\": [$((count - 1))]}" >"$OUT/vector-add-one.json"
python3 - "$OUT/vector-add-all.json" "$OUT/vector-add-one.json" "$count" <<'PY' 2>&1
import json, sys
every, one, n = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), int(sys.argv[3])
ok = True
for label, r, want in (("every GPU", every, list(range(n))), (f"devices=[{n-1}]", one, [n - 1])):
    print(f"{label}: passed={r['passed']} device_count={r['device_count']} init_ms={r['init_ms']}")
    for g in r["results"]:
        print(f"  GPU {g['index']} {g['name']} {g['uuid']} cc {g['compute_capability']}: "
              f"{'PASS' if g['passed'] else 'FAIL'} init {g['init_ms']} ms, vectors {g['time_ms']} ms, kernel {g['kernel_ms']} ms"
              + (f" error: {g['error']}" if g["error"] else ""))
    tested = [g["index"] for g in r["results"]]
    good = r["passed"] and tested == want and all(g["passed"] for g in r["results"])
    print(f"  tested {tested}, expected {want}: {'PASS' if good else 'FAIL'}")
    ok = ok and good
sys.exit(0 if ok else 1)
PY
[ "${PIPESTATUS[0]}" -eq 0 ] || fail=1

echo "== whole module wall time (ansible -m cuda_vector_add, 5 runs each): devices=[0] vs every GPU" | tee "$OUT/wall.log"
for what in one every; do
  args=$([ "$what" = one ] && echo '{"devices": [0]}' || echo "")
  for i in 1 2 3 4 5; do
    s=$(date +%s.%N); module_json cuda_vector_add "$args" >"$TMP/wall-$what-$i.json"; e=$(date +%s.%N)
    python3 - "$TMP/wall-$what-$i.json" "$what" "$i" "$s" "$e" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
wall = float(sys.argv[5]) - float(sys.argv[4])
gpus = r.get("results") or []
print(f"{sys.argv[2]:5} run {sys.argv[3]}: wall {wall:.3f} s, module init_ms {r.get('init_ms')}, "
      f"GPUs {len(gpus)}, per GPU init/vectors ms {[(g['init_ms'], g['time_ms']) for g in gpus]}, passed {r.get('passed')}")
PY
  done
done 2>&1 | tee -a "$OUT/wall.log"

echo "== verify.yml (facts and node-level vectorAdd on every GPU), -c local" | tee "$OUT/verify.log"
ansible-playbook -i "$INV" playbooks/verify.yml 2>&1 | tee -a "$OUT/verify.log"
rc=${PIPESTATUS[0]}; echo "rc=$rc" | tee -a "$OUT/verify.log"; [ "$rc" -eq 0 ] || fail=1

echo "multi-gpu.sh: $([ $fail -eq 0 ] && echo PASS || echo FAIL)" | tee "$OUT/result.txt"
exit $fail
