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

# One module call, its result as JSON on stdout (ansible's json callback).
module_json() {
  ANSIBLE_LOAD_CALLBACK_PLUGINS=1 ANSIBLE_STDOUT_CALLBACK=json \
    ansible -i "$INV" localhost -m "k8sgpu.nvidia.$1" ${2:+-a "$2"} 2>/dev/null \
    | python3 -c 'import json,sys; d=json.load(sys.stdin); print(json.dumps(d["plays"][0]["tasks"][0]["hosts"]["localhost"]))'
}

{ echo "== host"; uname -r; nvidia-smi -L; head -1 /proc/driver/nvidia/version; nproc; } 2>&1 | tee "$OUT/host.txt"
count=$(nvidia-smi -L | grep -c '^GPU ')
if [ "$count" -lt 2 ]; then echo "this machine has $count GPU(s); multi-gpu.sh needs two or more" | tee -a "$OUT/host.txt"; exit 2; fi

echo "== gpu_facts" | tee "$OUT/facts.log"
module_json gpu_facts >"$OUT/facts.json"
python3 - "$OUT/facts.json" "$count" <<'PY' 2>&1 | tee -a "$OUT/facts.log"
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

echo "== GFD labels from these facts (what node_labels sets with node_labels_from_facts)" | tee "$OUT/labels.log"
ANSIBLE_LOAD_CALLBACK_PLUGINS=1 ANSIBLE_STDOUT_CALLBACK=json ansible -i "$INV" localhost -m ansible.builtin.debug \
  -a "msg={{ {'nvidia_gpus': (lookup('file', '$OUT/facts.json') | from_json).ansible_facts.nvidia_gpus,
              'nvidia_driver_version': (lookup('file', '$OUT/facts.json') | from_json).ansible_facts.nvidia_driver_version,
              'nvidia_cuda_driver_version': (lookup('file', '$OUT/facts.json') | from_json).ansible_facts.nvidia_cuda_driver_version}
             | k8sgpu.nvidia.gfd_labels }}" 2>/dev/null \
  | python3 -c 'import json,sys; d=json.load(sys.stdin); m=d["plays"][0]["tasks"][0]["hosts"]["localhost"]["msg"]; print(json.dumps(m, indent=1, sort_keys=True)); sys.exit(0 if m.get("nvidia.com/gpu.count") == sys.argv[1] else 1)' "$count" \
  2>&1 | tee -a "$OUT/labels.log"
if [ "${PIPESTATUS[1]}" -eq 0 ]; then echo "nvidia.com/gpu.count = $count: PASS" | tee -a "$OUT/labels.log"
else echo "nvidia.com/gpu.count: FAIL" | tee -a "$OUT/labels.log"; fail=1; fi

echo "== cuda_vector_add on every GPU" | tee "$OUT/vector-add.log"
module_json cuda_vector_add >"$OUT/vector-add-all.json"
echo "== cuda_vector_add with devices=[$((count - 1))] (that GPU only)" | tee -a "$OUT/vector-add.log"
module_json cuda_vector_add "{\"devices\": [$((count - 1))]}" >"$OUT/vector-add-one.json"
python3 - "$OUT/vector-add-all.json" "$OUT/vector-add-one.json" "$count" <<'PY' 2>&1 | tee -a "$OUT/vector-add.log"
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
  args=$([ "$what" = one ] && echo "{\"devices\": [0]}" || echo "")
  for i in 1 2 3 4 5; do
    s=$(date +%s.%N); module_json cuda_vector_add "$args" >"$OUT/wall-$what-$i.json"; e=$(date +%s.%N)
    python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(f"{sys.argv[2]:5} run {sys.argv[3]}: wall {float(sys.argv[5])-float(sys.argv[4]):.3f} s, module init_ms {r[\"init_ms\"]}, GPUs {len(r[\"results\"])}, passed {r[\"passed\"]}")' \
      "$OUT/wall-$what-$i.json" "$what" "$i" "$s" "$e"
  done
done 2>&1 | tee -a "$OUT/wall.log"

echo "== verify.yml (facts and node-level vectorAdd on every GPU), -c local" | tee "$OUT/verify.log"
ansible-playbook -i "$INV" playbooks/verify.yml 2>&1 | tee -a "$OUT/verify.log"
rc=${PIPESTATUS[0]}; echo "rc=$rc" | tee -a "$OUT/verify.log"; [ "$rc" -eq 0 ] || fail=1

echo "multi-gpu.sh: $([ $fail -eq 0 ] && echo PASS || echo FAIL)" | tee "$OUT/result.txt"
exit $fail
