"""A fake cluster autoscaler for lab tests: a GPU node pool that scales from zero.

Cloud GPU pools (a GKE node pool, an EKS nodegroup with the cluster-autoscaler, Karpenter) start with no node; a
node is added only after a pod that needs it is Pending, and removed after it is empty. The lab has no cloud, so
this module plays the autoscaler against the lab's real API server and scheduler, with kwok Nodes as the machines:

    from k8sgpu_testlib.scale_from_zero import FakeAutoscaler

    with FakeAutoscaler(core, node_prefix="k8sgpu-gke-sfz", labels={"role": "train-gpu"},
                        taints=[{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
                        gpus=1, delay=3.0, namespaces=["my-test-ns"]) as pool:
        ...  # run the playbook / k8s_gpu_verify whose pod requests nvidia.com/gpu
    # on exit every node it created is deleted (scale back to 0) and gone
    ev = pool.scale_ups[0]
    ev.pending_seen, ev.node_created, ev.pod_running   # time.time() stamps; ev.pod_to_running_s etc.

What it does, in one background thread (a watch on pods, re-listed when the watch ends or expires):
- A pod is a candidate when it is in one of ``namespaces`` (all namespaces when None), is not bound to a node,
  the scheduler marked it ``PodScheduled=False`` with reason ``Unschedulable`` (as the real cluster-autoscaler waits
  for), requests ``nvidia.com/gpu`` (limits or requests, any container), and would fit a node of the pool:
  its ``spec.nodeSelector`` contains every item of ``node_selector`` (default: the pool's ``labels``) and asks for no
  label the pool's nodes lack, and its tolerations tolerate every NoSchedule/NoExecute taint in ``taints``. Pods
  that do not select the pool explicitly are ignored, so other tests' pods in the shared lab never get a node.
- For a candidate it reserves room on a node it created before (GPU accounting by the pods it placed), or, below
  ``max_nodes``, waits ``delay`` seconds (a machine booting) and creates a kwok Node: annotation
  ``kwok.x-k8s.io/node: fake`` (the lab's kwok controller makes it Ready and "runs" pods bound to it), name
  ``<node_prefix>-<5 hex>``, the pool's labels and taints, ``nvidia.com/gpu: gpus`` in capacity and allocatable,
  shaped like the lab's own nodes (lab/topology.py). The real scheduler then binds the pod; kwok makes it Running,
  and a Job's pod Succeeded.
- It records per scale-up: the pod, the scheduler's message, when the pending pod was seen, when the node was
  created, and when the pod was Running (or Succeeded) on a node of the pool. Errors in the thread are kept in
  ``errors`` and raised by ``__exit__`` (a test never passes on a silently broken autoscaler).
- With ``scale_down_after`` (seconds) a node that has carried no pod (other than DaemonSet pods and finished pods)
  for that long is deleted while running, as the cluster-autoscaler's scale-down-unneeded-time does; ``removed``
  maps node name to the deletion time. On exit every node it created that still exists is deleted and waited for.

Stable interface (other tests use it): the constructor's keyword arguments, ``scale_ups`` (list of ``ScaleUp``),
``nodes`` (names created, in order), ``removed``, ``errors``, ``wait_for(predicate, timeout)`` and
``wait_scaled_to_zero(timeout)``.
"""
from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Callable

from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from k8sgpu_testlib import lab_module

kwok_node = lab_module("topology").node  # the lab's own kwok Node shape

GPU = "nvidia.com/gpu"
CREATED_BY = "k8sgpu.nvidia/fake-autoscaler"


@dataclass
class ScaleUp:
    """One pending pod that made the pool add a node (or reuse room on one it added)."""

    pod: str                      # namespace/name
    uid: str
    reason: str                   # the scheduler's PodScheduled message when the pod was seen pending
    pending_seen: float           # time.time() when the autoscaler saw the pod unschedulable
    node: str                     # the node the pod was given room on
    node_created: float | None    # when that node was created (None: room on an existing node of the pool)
    pod_running: float | None = None   # when the pod was Running/Succeeded on a node of the pool
    pod_node: str | None = None        # the node the scheduler bound it to

    @property
    def pending_to_node_s(self) -> float | None:
        return None if self.node_created is None else round(self.node_created - self.pending_seen, 3)

    @property
    def pending_to_running_s(self) -> float | None:
        return None if self.pod_running is None else round(self.pod_running - self.pending_seen, 3)


def _gpu_request(pod: client.V1Pod) -> int:
    total = 0
    for c in pod.spec.containers or []:
        res = c.resources
        if not res:
            continue
        value = (res.limits or {}).get(GPU) or (res.requests or {}).get(GPU)
        if value:
            total += int(value)
    return total


def _tolerates(tolerations: list, taint: dict) -> bool:
    for t in tolerations or []:
        if t.effect and t.effect != taint.get("effect"):
            continue
        if t.operator == "Exists":
            if not t.key or t.key == taint["key"]:
                return True
        elif t.key == taint["key"] and (t.value or "") == (taint.get("value") or ""):
            return True
    return False


@dataclass
class _Node:
    name: str
    created: float
    reserved: dict = field(default_factory=dict)   # pod uid -> GPUs
    empty_since: float | None = None


class FakeAutoscaler:
    """Context manager: a node pool of kwok GPU nodes that scales from zero for matching pending pods."""

    def __init__(self, core: client.CoreV1Api, *, node_prefix: str, labels: dict, taints: list | None = None,
                 node_selector: dict | None = None, gpus: int = 1, delay: float = 0.0, max_nodes: int = 1,
                 namespaces: list[str] | None = None, scale_down_after: float | None = None,
                 capacity: dict | None = None, annotations: dict | None = None):
        if not node_prefix:
            raise ValueError("node_prefix is required (nodes of the shared lab are told apart by it)")
        self.core = core
        self.node_prefix = node_prefix
        self.labels = dict(labels)
        self.taints = [dict(t) for t in (taints or [])]
        self.node_selector = dict(self.labels if node_selector is None else node_selector)
        if not self.node_selector:
            raise ValueError("an empty node_selector would scale up for every GPU pod of the shared lab")
        self.gpus = gpus
        self.delay = delay
        self.max_nodes = max_nodes
        self.namespaces = list(namespaces) if namespaces else None
        self.scale_down_after = scale_down_after
        self.capacity = dict(capacity or {})
        self.annotations = dict(annotations or {})
        self.scale_ups: list[ScaleUp] = []
        self.nodes: list[str] = []
        self.removed: dict[str, float] = {}
        self.errors: list[str] = []
        self._live: dict[str, _Node] = {}
        self._pods: dict[str, client.V1Pod] = {}
        self._lock = threading.Condition()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._watch: watch.Watch | None = None

    # ---- matching -------------------------------------------------------------------------------------------
    def node_labels(self) -> dict:
        return {**self.node_selector, **self.labels}

    def matches(self, pod: client.V1Pod) -> bool:
        """Would a node of this pool take this pod, and does the pod ask for the pool explicitly?"""
        if self.namespaces is not None and pod.metadata.namespace not in self.namespaces:
            return False
        if _gpu_request(pod) < 1 or _gpu_request(pod) > self.gpus:
            return False
        selector = pod.spec.node_selector or {}
        if any(selector.get(k) != v for k, v in self.node_selector.items()):
            return False
        labels = self.node_labels()
        if any(labels.get(k) != v for k, v in selector.items()):
            return False
        return all(_tolerates(pod.spec.tolerations, t) for t in self.taints
                   if t.get("effect") in ("NoSchedule", "NoExecute"))

    @staticmethod
    def _unschedulable(pod: client.V1Pod) -> str | None:
        if pod.spec.node_name or pod.metadata.deletion_timestamp or pod.status.phase != "Pending":
            return None
        for c in pod.status.conditions or []:
            if c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable":
                return c.message or c.reason
        return None

    # ---- threads --------------------------------------------------------------------------------------------
    def _list_and_watch(self) -> None:
        if self.namespaces and len(self.namespaces) == 1:
            fn, args = self.core.list_namespaced_pod, (self.namespaces[0],)
        else:
            fn, args = self.core.list_pod_for_all_namespaces, ()
        version = None
        while not self._stop.is_set():
            try:
                if version is None:
                    listed = fn(*args)
                    version = listed.metadata.resource_version
                    with self._lock:
                        self._pods = {p.metadata.uid: p for p in listed.items}
                        self._lock.notify_all()
                # Short server-side timeouts so that __exit__ ends the thread within seconds; each new stream
                # resumes from the last resourceVersion seen.
                self._watch = watch.Watch()
                for ev in self._watch.stream(fn, *args, resource_version=version, timeout_seconds=2,
                                             _request_timeout=10):
                    pod = ev["object"]
                    version = self._watch.resource_version
                    with self._lock:
                        if ev["type"] == "DELETED":
                            self._pods.pop(pod.metadata.uid, None)
                        else:
                            self._pods[pod.metadata.uid] = pod
                        self._lock.notify_all()
                    if self._stop.is_set():
                        break
            except ApiException as exc:
                version = None          # 410 Gone (resourceVersion too old) and the rest: list again
                if exc.status != 410 and not self._stop.is_set():
                    self.errors.append(f"pod watch: {exc.status} {exc.reason}")
                    self._stop.wait(1)
            except Exception:  # a read timeout or reset connection: list again
                version = None
                if not self._stop.is_set():
                    self._stop.wait(0.5)

    def _create_node(self) -> str:
        name = f"{self.node_prefix}-{uuid.uuid4().hex[:5]}"
        body = kwok_node(name, self.node_labels(), self.taints, {GPU: str(self.gpus), **self.capacity})
        body["metadata"]["annotations"].update({CREATED_BY: "true", **self.annotations})
        self.core.create_node(body)
        return name

    def _reconcile(self) -> None:
        now = time.time()
        with self._lock:
            pods = dict(self._pods)
        placed = {e.uid: e for e in self.scale_ups}
        # Running pods of ours: record when they reached a node of the pool.
        for uid, e in placed.items():
            pod = pods.get(uid)
            if e.pod_running is None and pod and pod.spec.node_name and pod.status.phase in ("Running", "Succeeded"):
                e.pod_running, e.pod_node = now, pod.spec.node_name
        # Reservations end when the pod is gone or finished.
        for n in self._live.values():
            for uid in list(n.reserved):
                pod = pods.get(uid)
                if pod is None or pod.status.phase in ("Succeeded", "Failed"):
                    n.reserved.pop(uid)
        # Scale up for new unschedulable candidates.
        for uid, pod in pods.items():
            if uid in placed:
                continue
            reason = self._unschedulable(pod)
            if reason is None or not self.matches(pod):
                continue
            want = _gpu_request(pod)
            room = next((n for n in self._live.values() if self.gpus - sum(n.reserved.values()) >= want), None)
            created = None
            if room is None:
                if len(self._live) >= self.max_nodes:
                    continue
                if self.delay:
                    self._stop.wait(self.delay)
                    if self._stop.is_set():
                        return
                name = self._create_node()
                created = time.time()
                room = self._live[name] = _Node(name, created)
                self.nodes.append(name)
            room.reserved[uid] = want
            self.scale_ups.append(ScaleUp(f"{pod.metadata.namespace}/{pod.metadata.name}", uid, reason, now,
                                          room.name, created))
        # Scale down empty nodes.
        if self.scale_down_after is not None:
            for n in list(self._live.values()):
                busy = n.reserved or any(
                    p.spec.node_name == n.name and p.status.phase not in ("Succeeded", "Failed")
                    and not any(o.kind == "DaemonSet" for o in p.metadata.owner_references or [])
                    for p in pods.values())
                if busy:
                    n.empty_since = None
                    continue
                n.empty_since = n.empty_since or now
                if now - n.empty_since >= self.scale_down_after:
                    self._delete_node(n.name)

    def _delete_node(self, name: str) -> None:
        try:
            self.core.delete_node(name)
        except ApiException as exc:
            if exc.status != 404:
                raise
        self._live.pop(name, None)
        self.removed[name] = time.time()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._reconcile()
            except Exception as exc:
                self.errors.append(f"autoscaler: {type(exc).__name__}: {exc}")
            with self._lock:
                self._lock.wait(0.25)

    # ---- public ---------------------------------------------------------------------------------------------
    def wait_for(self, predicate: Callable[[FakeAutoscaler], bool], timeout: float) -> bool:
        """Poll predicate(self) until true or timeout seconds pass; returns the last result."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if predicate(self):
                return True
            time.sleep(0.2)
        return bool(predicate(self))

    def wait_scaled_to_zero(self, timeout: float) -> bool:
        """With scale_down_after: wait until every node this pool created was removed and is gone from the API."""
        return self.wait_for(lambda s: not s._live and not s._existing(), timeout)

    def _existing(self) -> list[str]:
        return [n.metadata.name for n in self.core.list_node().items
                if n.metadata.name in self.nodes]

    def __enter__(self) -> FakeAutoscaler:
        for target in (self._list_and_watch, self._run):
            t = threading.Thread(target=target, name=f"fake-autoscaler-{self.node_prefix}", daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def __exit__(self, *exc_info) -> None:
        self._stop.set()
        with self._lock:
            self._lock.notify_all()
        if self._watch:
            self._watch.stop()
        for t in self._threads:
            t.join(timeout=15)
        for name in list(self._live):
            try:
                self._delete_node(name)
            except Exception as exc:
                self.errors.append(f"delete node {name}: {exc}")
        end = time.monotonic() + 30
        while self._existing() and time.monotonic() < end:
            time.sleep(0.3)
        left = self._existing()
        if left:
            self.errors.append(f"nodes still present after scale down: {left}")
        if self.errors and exc_info[0] is None:
            raise AssertionError("fake autoscaler: " + "; ".join(self.errors))
