# shellcheck shell=bash
# Sourced by tests/gpu/k8s-node.sh rehearse: the non-GPU part on a machine
# without a GPU. The cluster comes up (real etcd, API server, controllers,
# scheduler, containerd, runc, CNI bridge and kubelet; the images built and
# imported as on the GPU machine); the collection's container_runtime_config
# module makes the NVIDIA runtime containerd's default (the toolkit's binaries
# unpacked under the prefix, not installed), containerd is restarted as the GPU
# run does, and then a plain pod runs on the real kubelet through
# nvidia-container-runtime and runc, and the cuda-vector-add Job, given no GPU,
# fails saying why (its log kept by watch.py). Everything is stopped and
# removed at the end, also on failure.
[ -n "${K8SNODE_KEEP:-}" ] || trap down EXIT
mkdir -p "$OUT"
up
python3 tests/gpu/k8s-node/watch.py "$KUBECONFIG" "$OUT/timeline.jsonl" --logs "$STATE/podlogs" &
echo $! >"$PIDS/watch.pid"

toolkit=$P/toolkit
mkdir -p "$toolkit"
for deb in "$K8SNODE_ROOT"/toolkit-repo/libnvidia-container/stable/deb/amd64/nvidia-container-toolkit{-base,}_*.deb; do
  dpkg-deb -x "$deb" "$toolkit"
done
args=$(python3 -c 'import json, sys; print(json.dumps(dict(runtime="containerd", config_path=sys.argv[1], drop_in_path=sys.argv[2],
  nvidia_ctk=sys.argv[3] + "/usr/bin/nvidia-ctk", runtime_path=sys.argv[3] + "/usr/bin/nvidia-container-runtime",
  set_as_default=True, backup_dir=sys.argv[4])))' "$CONTAINERD_CONFIG" "$CONTAINERD_DROP_IN" "$toolkit" "$STATE/backups")
ANSIBLE_CONFIG=$REPO/ansible.cfg ansible localhost -m k8sgpu.nvidia.container_runtime_config -a "$args" >"$OUT/runtime-config.txt" 2>&1 \
  || { cat "$OUT/runtime-config.txt"; die "container_runtime_config failed"; }
grep -q "CHANGED" "$OUT/runtime-config.txt" || { cat "$OUT/runtime-config.txt"; die "container_runtime_config changed nothing"; }
# GPU isolation (issue 19): the runtime's config.toml under the prefix, set by
# the collection's container_toolkit_config module (nvidia-ctk config) as the
# container_toolkit role sets it, with the runtime's debug log; containerd
# passes NVIDIA_CTK_CONFIG_FILE_PATH on to nvidia-container-runtime.
TOOLKIT_CONFIG=$P/etc/nvidia-container-runtime/config.toml
RUNTIME_LOG=$P/var/log/nvidia-container-runtime.log
mkdir -p "$(dirname "$RUNTIME_LOG")"
args=$(python3 -c 'import json, sys; print(json.dumps(dict(path=sys.argv[1], nvidia_ctk=sys.argv[2] + "/usr/bin/nvidia-ctk",
  backup_dir=sys.argv[4], settings={"accept-nvidia-visible-devices-envvar-when-unprivileged": False,
  "accept-nvidia-visible-devices-as-volume-mounts": True, "nvidia-container-runtime.debug": sys.argv[3],
  "nvidia-container-runtime.log-level": "debug"})))' "$TOOLKIT_CONFIG" "$toolkit" "$RUNTIME_LOG" "$STATE/backups")
ANSIBLE_CONFIG=$REPO/ansible.cfg ansible localhost -m k8sgpu.nvidia.container_toolkit_config -a "$args" >"$OUT/toolkit-config.txt" 2>&1 \
  || { cat "$OUT/toolkit-config.txt"; die "container_toolkit_config failed"; }
PATH=$toolkit/usr/bin:$PATH NVIDIA_CTK_CONFIG_FILE_PATH=$TOOLKIT_CONFIG restart_containerd
mark containerd_restarted
say "containerd restarted with the nvidia runtime as its default ($CONTAINERD_DROP_IN)"

mark rehearsal_pods
cat <<YAML | kubectl apply -f - >/dev/null || die "creating the rehearsal pod and Job failed"
apiVersion: v1
kind: Pod
metadata: {name: rehearsal-pause, namespace: default}
spec:
  containers:
    - {name: pause, image: $PAUSE_IMAGE, imagePullPolicy: IfNotPresent}
---
apiVersion: batch/v1
kind: Job
metadata: {name: rehearsal-vectoradd, namespace: default}
spec:
  backoffLimit: 0
  template:
    spec:
      restartPolicy: Never
      containers:
        - {name: cuda-vector-add, image: $VERIFY_IMAGE, imagePullPolicy: IfNotPresent}
YAML
kubectl wait --for jsonpath='{.status.phase}'=Running --timeout 90s pod/rehearsal-pause >/dev/null \
  || { kubectl describe pod rehearsal-pause; tail -n 30 "$LOGS/kubelet.log"; die "the pause pod did not run"; }
kubectl wait --for condition=Failed --timeout 90s job/rehearsal-vectoradd >/dev/null \
  || { kubectl describe job,pod -l job-name=rehearsal-vectoradd; die "the cuda-vector-add Job did not fail"; }
sleep 1  # watch.py's next poll saves the pod's log
cid=$(kubectl get pod rehearsal-pause -o jsonpath='{.status.containerStatuses[0].containerID}')
{
  echo "== nodes"; kubectl get nodes -o wide
  echo "== pods"; kubectl get pods -A -o wide
  echo "== the pause container's runtime (containerd's default: nvidia)"
  ctr -a "$CONTAINERD_SOCK" -n k8s.io containers info "${cid#containerd://}" | python3 -c 'import base64, json, re, sys
r = json.load(sys.stdin)["Runtime"]  # the runc shim options (protobuf): BinaryName is the OCI runtime it runs
m = re.search(rb"/[!-~]+", base64.b64decode(r["Options"]["value"]))
print(r["Name"], "runs", m.group().decode() if m else "runc (no BinaryName)")'
  echo "== the cuda-vector-add Job's log, kept by watch.py (no GPU allocated: must fail loading libcuda.so.1)"
  cat "$STATE"/podlogs/default_rehearsal-vectoradd-*.log
} 2>&1 | tee "$OUT/rehearsal.txt"
grep -q 'nvidia-container-runtime' "$OUT/rehearsal.txt" || die "the pause container did not run through nvidia-container-runtime"
grep -q 'Failed to load libcuda.so.1' "$OUT/rehearsal.txt" || die "the cuda-vector-add log does not say why it failed"
# The decision, read from nvidia-container-runtime's own debug log: a pod that
# sets NVIDIA_VISIBLE_DEVICES=all gets nothing injected (and runs), a pod with
# the device plugin's /dev/null mount under /var/run/nvidia-container-devices/
# is asked for that GPU (no GPU here: its container cannot be created).
mark isolation_pods
cat <<YAML | kubectl apply -f - >/dev/null || die "creating the isolation pods failed"
apiVersion: v1
kind: Pod
metadata: {name: isolation-envvar, namespace: default}
spec:
  containers:
    - name: pause
      image: $PAUSE_IMAGE
      imagePullPolicy: IfNotPresent
      env: [{name: NVIDIA_VISIBLE_DEVICES, value: all}]
---
apiVersion: v1
kind: Pod
metadata: {name: isolation-mount, namespace: default}
spec:
  containers:
    - name: pause
      image: $PAUSE_IMAGE
      imagePullPolicy: IfNotPresent
      volumeMounts: [{name: gpu, mountPath: /var/run/nvidia-container-devices/GPU-rehearsal, readOnly: true}]
  volumes:
    - {name: gpu, hostPath: {path: /dev/null, type: CharDevice}}
YAML
kubectl wait --for jsonpath='{.status.phase}'=Running --timeout 60s pod/isolation-envvar >/dev/null \
  || { kubectl describe pod isolation-envvar; die "the pod with NVIDIA_VISIBLE_DEVICES=all did not run"; }
for _ in $(seq 60); do grep -q 'runtime.nvidia.com/gpu=GPU-rehearsal' "$RUNTIME_LOG" 2>/dev/null && break; sleep 0.5; done
{
  echo "== isolation: $TOOLKIT_CONFIG (accept-* keys, set by container_toolkit_config)"
  grep 'accept-nvidia-visible-devices' "$TOOLKIT_CONFIG"
  echo "== isolation: nvidia-container-runtime's log (mode, requests, decisions)"
  python3 - "$RUNTIME_LOG" <<'PY'
import json, re, sys
for line in open(sys.argv[1], encoding="utf-8", errors="replace"):
    try:
        msg = json.loads(line).get("msg", "")
    except ValueError:
        msg = line.strip()
    if re.search(r"Auto-detected mode|Ignoring devices requested|No devices requested|automatic CDI|in-memory CDI|error running|failed to", msg):
        print(msg[:300])
PY
  echo "== isolation: pods"
  kubectl get pod isolation-envvar isolation-mount -o wide
  echo "isolation-envvar's environment asks for all GPUs: $(kubectl get pod isolation-envvar -o jsonpath='{.spec.containers[0].env}')"
  echo "isolation-mount waiting: $(kubectl get pod isolation-mount -o jsonpath='{.status.containerStatuses[0].state.waiting.reason}')"
} 2>&1 | tee -a "$OUT/rehearsal.txt"
grep -q 'Ignoring devices requested by environment variable' "$OUT/rehearsal.txt" \
  || die "the runtime's log does not say it ignored NVIDIA_VISIBLE_DEVICES=all ($RUNTIME_LOG)"
grep -q 'runtime.nvidia.com/gpu=GPU-rehearsal' "$OUT/rehearsal.txt" \
  || die "the runtime's log does not show the mounted GPU request ($RUNTIME_LOG)"
kubectl delete pod isolation-envvar isolation-mount --wait=false >/dev/null
ip=$(kubectl get pod rehearsal-pause -o jsonpath='{.status.podIP}')
case "$ip" in 10.244.0.*) ;; *) die "the pause pod's IP '$ip' is not from the CNI bridge's 10.244.0.0/24" ;; esac
stop watch
python3 tests/gpu/k8s-node/measure.py "$STATE/times" "$OUT/timeline.jsonl" "$STATE/podlogs" "$NODE_NAME" | tee -a "$OUT/rehearsal.txt"
echo "REHEARSAL PASSED: pause pod Running at $ip through nvidia-container-runtime; cuda-vector-add failed without a GPU, saying why" | tee -a "$OUT/rehearsal.txt"
