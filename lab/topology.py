"""Print the lab's kwok Node objects as a JSON List for `kubectl apply -f -`.

Nodes carry the annotation kwok.x-k8s.io/node=fake, so the kwok controller
manages their status (Ready, heartbeats) and runs pods bound to them.

With --gpu-only, only the named GPU Nodes are printed, each with the label
SCALE_LABEL: the extra GPU hosts of `lab/lab.sh scale N`, which removes them
again by that label.
"""
from __future__ import annotations

import argparse
import json

# Marks the kwok Nodes of the extra GPU hosts that `lab/lab.sh scale N` adds (and deletes by this label).
SCALE_LABEL = "k8sgpu.lab/scale-extra"


def node(name: str, labels: dict, taints: list, capacity: dict) -> dict:
    base = {"cpu": "32", "memory": "256Gi", "pods": "110", "ephemeral-storage": "500Gi"}
    base.update(capacity)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
                **labels,
            },
        },
        "spec": {"taints": taints} if taints else {},
        "status": {"capacity": base, "allocatable": base},
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--lab-name", required=True)
    p.add_argument("--gpus", type=int, default=8, help="nvidia.com/gpu capacity per GPU node")
    p.add_argument("--gpu-only", action="store_true",
                   help=f"only the GPU Nodes, labelled {SCALE_LABEL} (lab.sh scale's extra hosts)")
    p.add_argument("gpu_nodes", nargs="+", help="names of the GPU node containers")
    a = p.parse_args()
    gpu_labels = {SCALE_LABEL: "true"} if a.gpu_only else {}
    items = [node(n, gpu_labels, [], {"nvidia.com/gpu": str(a.gpus)}) for n in a.gpu_nodes]
    if not a.gpu_only:
        items = [
            node(f"{a.lab_name}-cp-1",
                 {"node-role.kubernetes.io/control-plane": ""},
                 [{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}], {}),
            node(f"{a.lab_name}-cp-legacy",
                 {"node-role.kubernetes.io/master": ""},
                 [{"key": "node-role.kubernetes.io/master", "effect": "NoSchedule"}], {}),
            node(f"{a.lab_name}-cpu-1", {}, [], {}),
        ] + items
    print(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}, indent=1))


if __name__ == "__main__":
    main()
