# shellcheck shell=bash
# Sourced by tests/gpu/k8s-node.sh (gpu mode): the cluster, then the
# collection's playbooks in site.yml's order against it, then time-slicing.
# $OUT gets at most 8 files (what the GPU machine's tool brings back):
#   run.log          everything this run printed (host, cluster start, steps)
#   playbooks.log    every ansible-playbook run in full, with its PLAY RECAP
#   nodes.txt        kubectl get nodes -o wide, capacity/allocatable, labels, pods
#   device-plugin.log  the device plugin pod's log (1 GPU, then 4 replicas)
#   job.log          the cuda-vector-add Jobs' own pod logs, and the module's result;
#                    the isolation probe's log (no GPU asked for, NVIDIA_VISIBLE_DEVICES=all)
#                    and the four time-sliced pods' logs (issue 19)
#   timeline.jsonl   watch.py's timeline (Node, pods, Jobs, with times)
#   bench.txt        the measurements (measure.py; bench/site_nochange.py's round)
#   logs.tar.xz      the last lines of each daemon's log
mkdir -p "$OUT"
# Everything must end, output written, inside the GPU machine's 10-minute call.
DEADLINE=$(( $(date +%s) + ${K8SNODE_BUDGET:-550} ))
exec > >(tee -a "$OUT/run.log") 2>&1
PLAYLOG=$OUT/playbooks.log
: >"$PLAYLOG"

collect() {
  local rc=$?
  set +e
  stop watch
  cat "$STATE"/podlogs/*.log >/dev/null 2>&1 && for f in "$STATE"/podlogs/*.log; do echo "== $(basename "$f")"; cat "$f"; done >>"$OUT/job.log"
  python3 tests/gpu/k8s-node/measure.py "$STATE/times" "$OUT/timeline.jsonl" "$STATE/podlogs" "${NODE_NAME:-?}" 2>&1 | tee "$OUT/bench.txt"
  [ -f "$STATE/nochange.json" ] && { echo "site.yml with nothing to change, beside ping and by hand (bench/site_nochange.py):"; cat "$STATE/nochange.json"; } >>"$OUT/bench.txt"
  (cd "$LOGS" && for f in *.log; do tail -n 3000 "$f" >"$STATE/tail-$f"; done
   cd "$STATE" && tar -cJf "$OUT/logs.tar.xz" tail-*.log 2>/dev/null)
  echo "== exit status $rc"
}
trap collect EXIT

# A second run on the same (still held) machine starts from a new cluster.
if ls "$PIDS"/*.pid >/dev/null 2>&1; then
  say "processes of an earlier run: stopping them, removing its cluster state and containerd configuration"
  down
  rm -rf "$STATE/etcd" "$STATE/facts" "$STATE/podlogs" "$STATE/nochange.json" "$CONTAINERD_CONFIG" "$CONTAINERD_DROP_IN"
fi
GPU_COUNT=$(nvidia-smi -L | grep -c '^GPU ')
{ echo "== host"; uname -a; nvidia-smi -L; head -1 /proc/driver/nvidia/version; python3 --version
  echo "cgroup: $(stat -fc %T /sys/fs/cgroup), controllers: $(cat /sys/fs/cgroup/cgroup.controllers)"; nproc; free -g | head -2; }
up
python3 tests/gpu/k8s-node/watch.py "$KUBECONFIG" "$OUT/timeline.jsonl" --logs "$STATE/podlogs" &
echo $! >"$PIDS/watch.pid"
ansible --version | head -1

# The toolkit's packages, put in place with dpkg as an image build would
# (Ansible's apt module needs python3-apt, which this machine lacks); the role
# must find them and not call apt (as tests/gpu/run.sh).
dpkg -i "$K8SNODE_ROOT"/toolkit-repo/libnvidia-container/stable/deb/amd64/nvidia-container-toolkit{-base,}_*.deb | tail -n 2

cat >"$STATE/vars.yml" <<YAML
k8sgpu_kubeconfig: $PKI/admin.kubeconfig
k8sgpu_node_name: $NODE_NAME
driver_branch: "580"
container_toolkit_repo_url: file://$K8SNODE_ROOT/toolkit-repo/libnvidia-container
container_toolkit_repo_key: "{{ lookup('ansible.builtin.file', '$K8SNODE_ROOT/toolkit-repo/libnvidia-container/gpgkey') }}"
# The lab's own repository key (lab/build-toolkit-repo.sh), not NVIDIA's: pinned by its fingerprint, as
# inventories/lab does (the role refuses a key other than the pinned one).
container_toolkit_repo_key_fingerprint: "{{ lookup('ansible.builtin.file', '$K8SNODE_ROOT/toolkit-repo/libnvidia-container/gpgkey') | k8sgpu.nvidia.openpgp_fingerprints | first }}"
container_toolkit_repo_proxy: ""
container_toolkit_runtimes: [containerd]
container_toolkit_containerd_config: $CONTAINERD_CONFIG
container_toolkit_containerd_drop_in: $CONTAINERD_DROP_IN
verify_image: $VERIFY_IMAGE
# The role's rollout wait polls k8s_info every 2 s plus the module's own time.
device_plugin_wait_timeout: 60
verify_timeout: 120
YAML

# Each playbook is its own ansible-playbook run (containerd is restarted between
# host.yml and kubernetes.yml), so the GPU facts that preflight and host gather
# reach node_labels through a fact cache, as a site running them apart would.
export ANSIBLE_CACHE_PLUGIN=jsonfile ANSIBLE_CACHE_PLUGIN_CONNECTION=$STATE/facts ANSIBLE_CACHE_PLUGIN_TIMEOUT=86400

# play NAME PLAYBOOK [ARGS...]: run, log in full, time it.
play() {
  local name=$1 book=$2 t0 rc limit; shift 2
  limit=$(( DEADLINE - $(date +%s) - 25 )); [ "$limit" -gt 200 ] && limit=200
  if [ "$limit" -lt 30 ]; then echo "===== $name: skipped, too little time left in this call" | tee -a "$PLAYLOG"; return 1; fi
  echo "===== $name: ansible-playbook $book $*" | tee -a "$PLAYLOG"
  t0=$(now)
  # Bounded, so a hung step still leaves time for the output (the call's limit is 10 min).
  timeout "$limit" ansible-playbook -i tests/gpu/k8s-node/inventory.yml -e "@$STATE/vars.yml" "$book" "$@" >>"$PLAYLOG" 2>&1; rc=$?
  mark "play_${name}_end"; echo "play_${name}_start $t0" >>"$STATE/times"
  sed -n '/^PLAY RECAP/,/^$/p' "$PLAYLOG" | tail -n 3
  echo "===== $name: rc=$rc, $(python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$t0" "$(now)") s" | tee -a "$PLAYLOG"
  return $rc
}
containerd_sum() { cat "$CONTAINERD_CONFIG" "$CONTAINERD_DROP_IN" 2>/dev/null | sha256sum; }
nodes() {
  echo "===== $1"
  kubectl get nodes -o wide
  kubectl get node "$NODE_NAME" -o jsonpath='capacity: {.status.capacity}{"\n"}allocatable: {.status.allocatable}{"\n"}'
  # shellcheck disable=SC2016 # a Go template, not shell
  kubectl get node "$NODE_NAME" -o go-template='labels:{{range $k, $v := .metadata.labels}}{{"\n  "}}{{$k}}={{$v}}{{end}}{{"\n"}}'
  kubectl get pods -A -o wide
}

echo "== site.yml's order, step by step (containerd restarted by this script after host.yml: no systemd)"
mark site_first_start
play preflight playbooks/preflight.yml || die "preflight failed (playbooks.log)"
before=$(containerd_sum)
play host playbooks/host.yml || die "host.yml failed (playbooks.log)"
if [ "$(containerd_sum)" != "$before" ]; then
  echo "containerd's configuration changed (the role's drop-in): restarting containerd, as the role's handler would with systemd"
  restart_containerd; mark containerd_restarted
  { echo "== $CONTAINERD_CONFIG"; cat "$CONTAINERD_CONFIG"; echo "== $CONTAINERD_DROP_IN"; cat "$CONTAINERD_DROP_IN"; } >>"$PLAYLOG"
fi
# GPU isolation (issue 19): the toolkit's config.toml as container_toolkit left it.
{ echo "== /etc/nvidia-container-runtime/config.toml (accept-* keys)"
  grep -n 'accept-nvidia-visible-devices' /etc/nvidia-container-runtime/config.toml; } 2>&1 | tee -a "$PLAYLOG"
grep -qx 'accept-nvidia-visible-devices-envvar-when-unprivileged = false' /etc/nvidia-container-runtime/config.toml \
  || die "container_toolkit did not set accept-nvidia-visible-devices-envvar-when-unprivileged = false"
play kubernetes playbooks/kubernetes.yml || { nodes "after kubernetes.yml (failed)" >>"$OUT/nodes.txt"; die "kubernetes.yml failed (playbooks.log)"; }
nodes "after kubernetes.yml: the device plugin deployed" | tee -a "$OUT/nodes.txt"
kubectl -n kube-system logs ds/nvidia-device-plugin-daemonset >"$OUT/device-plugin.log" 2>&1
allocatable=$(kubectl get node "$NODE_NAME" -o jsonpath='{.status.allocatable.nvidia\.com/gpu}')
echo "the Node advertises nvidia.com/gpu: $allocatable (GPUs on this machine: $GPU_COUNT)"
[ "$allocatable" = "$GPU_COUNT" ] || die "the Node advertises nvidia.com/gpu: $allocatable, this machine has $GPU_COUNT GPUs"
play verify playbooks/verify.yml -v
mark site_first_end

# GPU isolation (issue 19): a pod that asks for no nvidia.com/gpu and sets
# NVIDIA_VISIBLE_DEVICES=all must not reach a GPU (the runtime ignores the
# variable in an unprivileged container); its own log says why.
echo "== isolation: a pod with NVIDIA_VISIBLE_DEVICES=all and no nvidia.com/gpu request"
mark isolation_probe_start
cat <<YAML | kubectl apply -f - >/dev/null || die "creating the isolation probe pod failed"
apiVersion: v1
kind: Pod
metadata: {name: isolation-probe, namespace: default, labels: {k8sgpu-test: isolation}}
spec:
  restartPolicy: Never
  containers:
    - name: cuda-vector-add
      image: $VERIFY_IMAGE
      imagePullPolicy: IfNotPresent
      env: [{name: NVIDIA_VISIBLE_DEVICES, value: all}]
YAML
phase=
for _ in $(seq 90); do
  phase=$(kubectl get pod isolation-probe -o jsonpath='{.status.phase}')
  case "$phase" in Succeeded|Failed) break ;; esac
  sleep 1
done
mark isolation_probe_end
probe_log=$(kubectl logs isolation-probe 2>&1)
{ echo "== isolation-probe (no nvidia.com/gpu, env NVIDIA_VISIBLE_DEVICES=all): phase $phase"
  echo "$probe_log"; } | tee -a "$OUT/job.log"
kubectl delete pod isolation-probe --wait=false >/dev/null
if grep -q 'Test PASSED' <<<"$probe_log"; then
  die "ISOLATION BROKEN: a pod without nvidia.com/gpu used the GPU through NVIDIA_VISIBLE_DEVICES=all"
fi
grep -qiE 'error|failed' <<<"$probe_log" || die "the isolation probe's log does not say why it could not use a GPU (phase $phase)"
echo "isolation: the unallocated pod with NVIDIA_VISIBLE_DEVICES=all got no GPU ($(grep -iE 'error|failed' <<<"$probe_log" | head -1))"

# GPU health (issue 39): health.yml with its default policy (report) reads the real GPUs' health (nvidia-smi -q -x,
# the kernel log from /dev/kmsg). Healthy: the run changes nothing, the Node gets neither the role's taint nor its
# record. Never a recovery here (report only), so the GPU is never reset or reconfigured.
echo "== health.yml: the real GPUs' health, policy report"
mark health_start
play health playbooks/health.yml -v || die "health.yml failed (playbooks.log)"
mark health_end
health_read=$(sed -n '/^===== health: /,/^===== health: rc=/p' "$PLAYLOG" | sed -n "/^TASK \[.*: Read the GPUs' health\]/,/^TASK/p")
{ echo "== the health read (health.yml -v)"; echo "$health_read"; } >>"$OUT/job.log"
# The module's result, as the yaml callback printed it under "ok: [localhost] =>": its top-level status.
health_status=$(python3 -c 'import sys, textwrap, yaml
text = sys.stdin.read().split("=>", 1)[1].split("\nTASK", 1)[0]
print(yaml.safe_load(textwrap.dedent(text.strip("\n"))).get("status", "?"))' <<<"$health_read" 2>/dev/null)
health_marks=$(kubectl get node "$NODE_NAME" -o go-template='{{range .spec.taints}}{{if eq .key "nvidia.com/gpu-health"}}taint {{.value}} {{end}}{{end}}{{with index .metadata.annotations "k8sgpu.nvidia/gpu-health"}}record {{.}}{{end}}')
health_recap=$(sed -n '/^===== health: /,/^===== health: rc=/p' "$PLAYLOG" | sed -n '/^PLAY RECAP/,/^$/p' | grep -o 'changed=[0-9]*' | sort -u | tr '\n' ' ')
echo "health: the read says '${health_status:-?}'; the Node's gpu-health taint and record: '${health_marks:-none}'; recap $health_recap"
[ "$health_status" = healthy ] || die "health.yml did not read the GPUs healthy (job.log)"
[ -z "$health_marks" ] || die "health.yml tainted or annotated the Node of a healthy GPU: $health_marks"
[ "$health_recap" = "changed=0 " ] || die "health.yml changed something on a healthy GPU host: $health_recap"

# Several GPUs (issue 13): one cuda-vector-add Job per GPU at once on this one
# Node (k8s_gpu_verify with the Node listed once per GPU); the device plugin
# gives each pod a GPU of its own, which each Job's log names (PCI bus id).
if [ "$GPU_COUNT" -ge 2 ]; then
  echo "== one cuda-vector-add Job per GPU at once ($GPU_COUNT Jobs, 1 GPU each)"
  mark jobs_per_gpu_start
  nodes_json=$(python3 -c 'import json,sys; print(json.dumps([sys.argv[1]] * int(sys.argv[2])))' "$NODE_NAME" "$GPU_COUNT")
  # The result through ansible-core's tree callback (-t; the json callback is in ansible.posix, not carried).
  rm -rf "$STATE/jobs-per-gpu"
  timeout 200 ansible -i tests/gpu/k8s-node/inventory.yml localhost -t "$STATE/jobs-per-gpu" \
    -m k8sgpu.nvidia.k8s_gpu_verify -a "{\"image\": \"$VERIFY_IMAGE\", \"per_node\": true, \"nodes\": $nodes_json,
      \"kubeconfig\": \"$PKI/admin.kubeconfig\", \"timeout\": 120, \"cleanup\": false}" >>"$PLAYLOG" 2>&1
  mark jobs_per_gpu_end
  python3 - "$STATE/jobs-per-gpu/localhost" <<'PY' | tee -a "$OUT/job.log"
import json, sys
r = json.load(open(sys.argv[1]))
print(json.dumps({k: r.get(k) for k in ("failed", "msg", "jobs", "results")}, indent=1)[:6000])
PY
  for job in $(kubectl get jobs -o name | grep k8sgpu); do
    echo "== $job: $(kubectl get "$job" -o jsonpath='{.status.conditions[*].type}')"; kubectl logs "$job"
  done 2>&1 | tee -a "$OUT/job.log"
  passed=$(for job in $(kubectl get jobs -o name | grep k8sgpu); do kubectl logs "$job"; done 2>/dev/null | grep -c 'Test PASSED')
  buses=$(for job in $(kubectl get jobs -o name | grep k8sgpu); do kubectl logs "$job"; done 2>/dev/null | sed -n 's/^GPU Device 0 PCI bus id \([^ ]*\).*/\1/p' | sort -u | wc -l)
  echo "Jobs with Test PASSED: $passed of $GPU_COUNT; distinct GPUs (PCI bus ids) among them: $buses"
  kubectl get jobs -o name | grep k8sgpu | xargs -r kubectl delete --wait=false >/dev/null
  if [ "$passed" != "$GPU_COUNT" ] || [ "$buses" != "$GPU_COUNT" ]; then die "not one passing cuda-vector-add Job per GPU"; fi
fi

echo "== the whole site.yml again, nothing to change, beside ansible -m ping and the same checks by hand (bench/site_nochange.py, three rounds)"
mark site_start
{ echo "===== site (bench/site_nochange.py)"
  timeout 200 python3 bench/site_nochange.py -i tests/gpu/k8s-node/inventory.yml -e "@$STATE/vars.yml" --rounds 3 \
    --no-converge --allow-changed --kubeconfig "$PKI/admin.kubeconfig" --json "$STATE/nochange.json"; } >>"$PLAYLOG" 2>&1 \
  || echo "== bench/site_nochange.py failed (playbooks.log)"
mark site_end
[ -f "$STATE/nochange.json" ] && { echo "== site.yml with nothing to change (bench/site_nochange.py)"; cat "$STATE/nochange.json"; }
# The same run once more, task by task, to see where the steady-state time goes here: ansible-core's own junit
# callback records each task's time per host (ansible.posix's profile_tasks is not in the bundle).
echo "== site.yml, nothing to change, task by task (profile.txt)"
rm -rf "$STATE/junit"
ANSIBLE_CALLBACKS_ENABLED=ansible.builtin.junit JUNIT_OUTPUT_DIR="$STATE/junit" play profile site.yml >/dev/null || true
python3 - "$STATE/junit" >"$OUT/profile.txt" <<'PY' || true
import glob, sys, xml.etree.ElementTree as ET
rows = []
for f in glob.glob(sys.argv[1] + "/*.xml"):
    for case in ET.parse(f).getroot().iter("testcase"):
        rows.append((float(case.get("time") or 0), case.get("name") or ""))
rows.sort(reverse=True)
print(f"{len(rows)} task results, {sum(t for t, _ in rows):.1f} s in all (junit callback, per host)")
for t, name in rows[:60]:
    print(f"{t:7.2f} s  {name[:150]}")
PY

SLICED=$(( 4 * GPU_COUNT ))
echo "== time-slicing: 4 replicas, the Node must advertise nvidia.com/gpu: $SLICED (4 per GPU)"
mark slicing_start
play slicing playbooks/kubernetes.yml -e device_plugin_time_slicing_replicas=4
for _ in $(seq 60); do
  [ "$(kubectl get node "$NODE_NAME" -o jsonpath='{.status.allocatable.nvidia\.com/gpu}')" = "$SLICED" ] && break; sleep 1
done
mark slicing_gpu4
nodes "after time-slicing with 4 replicas per GPU" | tee -a "$OUT/nodes.txt"
{ echo "===== device plugin pod log, time-slicing (4 replicas)"; kubectl -n kube-system logs ds/nvidia-device-plugin-daemonset; } >>"$OUT/device-plugin.log" 2>&1
[ "$(kubectl get node "$NODE_NAME" -o jsonpath='{.status.allocatable.nvidia\.com/gpu}')" = "$SLICED" ] || die "the Node does not advertise nvidia.com/gpu: $SLICED"

# Four allocated pods (1 nvidia.com/gpu each, time-sliced) at once: the
# scheduler binds all four before any finishes, and each log says Test PASSED.
echo "== time-slicing: four pods with 1 nvidia.com/gpu each at once"
mark sliced_pods_start
for i in 1 2 3 4; do cat <<YAML; done | kubectl apply -f - >/dev/null || die "creating the time-sliced pods failed"
---
apiVersion: v1
kind: Pod
metadata: {name: sliced-$i, namespace: default, labels: {k8sgpu-test: sliced}}
spec:
  restartPolicy: Never
  containers:
    - name: cuda-vector-add
      image: $VERIFY_IMAGE
      imagePullPolicy: IfNotPresent
      resources: {limits: {nvidia.com/gpu: 1}}
YAML
for _ in $(seq 120); do
  finished=$(kubectl get pods -l k8sgpu-test=sliced -o jsonpath='{range .items[*]}{.status.phase}{"\n"}{end}' | grep -cE 'Succeeded|Failed')
  [ "$finished" = 4 ] && break
  sleep 1
done
mark sliced_pods_end
sliced_passed=0
for i in 1 2 3 4; do
  log=$(kubectl logs "sliced-$i" 2>&1)
  # shellcheck disable=SC2016 # a jsonpath, not shell
  { echo "== sliced-$i (nvidia.com/gpu: 1 of $SLICED): $(kubectl get pod "sliced-$i" -o jsonpath='{.status.phase}, scheduled {.status.conditions[?(@.type=="PodScheduled")].lastTransitionTime}, ran {.status.containerStatuses[0].state.terminated.startedAt} to {.status.containerStatuses[0].state.terminated.finishedAt}')"
    echo "$log"; } | tee -a "$OUT/job.log"
  if grep -q 'Test PASSED' <<<"$log"; then sliced_passed=$((sliced_passed + 1)); fi
done
# At once: the last of the four was bound no later than the first one finished.
kubectl get pods -l k8sgpu-test=sliced -o json | python3 -c '
import json, sys
pods = json.load(sys.stdin)["items"]
sched = [c["lastTransitionTime"] for p in pods for c in p["status"].get("conditions", []) if c["type"] == "PodScheduled"]
fin = [s["state"]["terminated"]["finishedAt"] for p in pods for s in p["status"].get("containerStatuses", []) if "terminated" in s["state"]]
print(f"time-sliced pods: {len(sched)} scheduled, the last at {max(sched) if sched else None}; the first finished at {min(fin) if fin else None}")
sys.exit(0 if len(sched) == 4 and fin and max(sched) <= min(fin) else 1)' | tee -a "$OUT/job.log"
together=${PIPESTATUS[1]}
kubectl delete pods -l k8sgpu-test=sliced --wait=false >/dev/null
echo "time-slicing: $sliced_passed of 4 pods with 1 nvidia.com/gpu each say Test PASSED"
[ "$together" = 0 ] || die "the four time-sliced pods were not all bound before the first one finished"
[ "$sliced_passed" = 4 ] || die "only $sliced_passed of the 4 time-sliced pods passed"
echo "K8S-NODE PASSED"
