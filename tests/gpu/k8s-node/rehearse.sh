# shellcheck shell=bash
# Sourced by tests/gpu/k8s-node.sh rehearse: the non-GPU part on a machine
# without a GPU. The cluster comes up (real etcd, API server, controllers,
# scheduler, containerd, runc, CNI bridge and kubelet; the images built and
# imported as on the GPU machine), a plain pod runs on the real kubelet, and
# the cuda-vector-add pod, given no GPU, fails saying why. Everything is
# stopped and removed at the end, also on failure.
trap down EXIT
mkdir -p "$OUT"
up
mark rehearsal_pods
cat <<YAML | kubectl apply -f - >/dev/null || die "creating the rehearsal pods failed"
apiVersion: v1
kind: Pod
metadata: {name: rehearsal-pause, namespace: default}
spec:
  containers:
    - {name: pause, image: $PAUSE_IMAGE, imagePullPolicy: IfNotPresent}
---
apiVersion: v1
kind: Pod
metadata: {name: rehearsal-vectoradd, namespace: default}
spec:
  restartPolicy: Never
  containers:
    - {name: cuda-vector-add, image: $VERIFY_IMAGE, imagePullPolicy: IfNotPresent}
YAML
kubectl wait --for jsonpath='{.status.phase}'=Running --timeout 90s pod/rehearsal-pause >/dev/null \
  || { kubectl describe pod rehearsal-pause; tail -n 30 "$LOGS/kubelet.log"; die "the pause pod did not run"; }
kubectl wait --for jsonpath='{.status.phase}'=Failed --timeout 90s pod/rehearsal-vectoradd >/dev/null \
  || { kubectl describe pod rehearsal-vectoradd; die "the cuda-vector-add pod did not fail"; }
{
  echo "== nodes"; kubectl get nodes -o wide
  echo "== pods"; kubectl get pods -A -o wide
  echo "== rehearsal-vectoradd log (no GPU allocated: must fail loading libcuda.so.1)"
  kubectl logs rehearsal-vectoradd
} 2>&1 | tee "$OUT/rehearsal.txt"
grep -q 'Failed to load libcuda.so.1' "$OUT/rehearsal.txt" || die "the cuda-vector-add log does not say why it failed"
ip=$(kubectl get pod rehearsal-pause -o jsonpath='{.status.podIP}')
case "$ip" in 10.244.0.*) ;; *) die "the pause pod's IP '$ip' is not from the CNI bridge's 10.244.0.0/24" ;; esac
python3 - "$STATE/times" <<'PY' | tee -a "$OUT/rehearsal.txt"
import sys
t = dict(line.split() for line in open(sys.argv[1]))
t = {k: float(v) for k, v in t.items()}
for k in ("apiserver_ready", "containerd_ready", "images_imported", "kubelet_start", "node_registered", "node_ready", "rehearsal_pods"):
    print(f"{k:18s} +{t[k] - t['start']:6.1f} s")
print(f"kubelet start -> Node Ready: {t['node_ready'] - t['kubelet_start']:.1f} s")
PY
echo "REHEARSAL PASSED: pause pod Running at $ip; cuda-vector-add failed without a GPU, saying why" | tee -a "$OUT/rehearsal.txt"
