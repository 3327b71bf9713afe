# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private to k8sgpu.nvidia: planning for the gke_node_pool module.

Pure functions, no Google calls. Pools are dicts in the form google.protobuf's MessageToDict gives with
``preserving_proto_field_name=True`` (the v1 API's fields in snake_case, enums by name, int64 as strings): the
module turns both the live NodePool and the wanted one (built from the task by ``wanted_pool`` and passed
through the proto type) into that form, so a value compares equal whichever side it came from. From them
these functions compute the fields GKE cannot change in place and the requests to send
(UpdateNodePoolRequest per group of fields - the GPU driver installation through its ``accelerators`` -,
SetNodePoolAutoscalingRequest, SetNodePoolSizeRequest), and which zones lack an accelerator type.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping

# The taint GKE puts on every GPU node pool itself: never compared, never sent.
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NO_SCHEDULE"}
# Kubernetes' effect names -> GKE's (NodeTaint.Effect).
K8S_TO_GKE_EFFECT = {"NoSchedule": "NO_SCHEDULE", "PreferNoSchedule": "PREFER_NO_SCHEDULE",
                     "NoExecute": "NO_EXECUTE"}
GKE_TO_K8S_EFFECT = {v: k for k, v in K8S_TO_GKE_EFFECT.items()}
# Labels GKE itself puts on the nodes of a pool (used for node selectors, not in config.labels).
NODEPOOL_LABEL = "cloud.google.com/gke-nodepool"
ACCELERATOR_LABEL = "cloud.google.com/gke-accelerator"

# Fields GKE cannot change on an existing pool: option -> path in NodePool.
IMMUTABLE = {
    "accelerator": "config.accelerators",
    "spot": "config.spot",
    "preemptible": "config.preemptible",
    "service_account": "config.service_account",
    "oauth_scopes": "config.oauth_scopes",
}
# Changed in place by UpdateNodePoolRequest (one request per group): option -> request field.
MACHINE_FIELDS = ("machine_type", "disk_type", "disk_size_gb")
AUTOSCALING_KEYS = ("enabled", "min_node_count", "max_node_count", "total_min_node_count",
                    "total_max_node_count", "location_policy")


class PlanError(ValueError):
    """The task asks for something that cannot be done; the message names the field and the fix."""


def check_enum(option: str, value: str | None, allowed: Iterable[str], enum: str) -> None:
    """Fail when value is not one of allowed (the names of a google-cloud-container proto enum)."""
    allowed = [a for a in allowed if not a.endswith("_UNSPECIFIED")]
    if value is not None and value not in allowed:
        raise PlanError(f"{option}={value!r} is not a value of {enum} (google-cloud-container's "
                        f"google.cloud.container_v1 types): use one of {', '.join(allowed)}")


def normalize_taints(taints: Iterable[Mapping], allowed_effects: Iterable[str]) -> list[dict]:
    """The task's taints as NodeTaint dicts (GKE effect names), sorted, without GKE's own GPU taint."""
    allowed = [a for a in allowed_effects if not a.endswith("_UNSPECIFIED")]
    out: dict[tuple[str, str], dict] = {}
    for t in taints:
        if not t.get("key"):
            raise PlanError(f"taint {dict(t)!r} has no key")
        effect = K8S_TO_GKE_EFFECT.get(t.get("effect") or "", t.get("effect") or "")
        if effect not in allowed:
            raise PlanError(f"taint {t['key']}: effect {t.get('effect')!r} is not a value of NodeTaint.Effect: use "
                            f"one of {', '.join(allowed)} (or Kubernetes' "
                            f"{', '.join(GKE_TO_K8S_EFFECT.get(a, a) for a in allowed)})")
        taint = {"key": str(t["key"]), "effect": effect}
        if t.get("value") not in (None, ""):
            taint["value"] = str(t["value"])
        if (taint["key"], effect) in out:
            raise PlanError(f"taint {t['key']}:{effect} is given twice; Kubernetes keeps one taint per key and effect")
        out[(taint["key"], effect)] = taint
    return [out[k] for k in sorted(out) if out[k] != GPU_TAINT]


def live_taints(config: Mapping) -> list[dict]:
    """A pool config's taints in normalize_taints' form, without GKE's GPU taint."""
    out = {}
    for t in config.get("taints") or []:
        taint = {"key": t.get("key", ""), "effect": t.get("effect", "EFFECT_UNSPECIFIED")}
        if t.get("value"):
            taint["value"] = t["value"]
        out[(taint["key"], taint["effect"])] = taint
    return [out[k] for k in sorted(out) if out[k] != GPU_TAINT]


def accelerator_config(acc: Mapping | None) -> list[dict] | None:
    """AcceleratorConfig list (proto input form) for the accelerator option."""
    if not acc:
        return None
    cfg: dict = {"accelerator_type": acc["type"], "accelerator_count": acc.get("count", 1)}
    if acc.get("gpu_partition_size"):
        cfg["gpu_partition_size"] = acc["gpu_partition_size"]
    clients = acc.get("max_shared_clients_per_gpu")
    if acc.get("gpu_sharing_strategy") and clients is None:
        # GKE refuses a sharing strategy without the number of clients (GPUSharingConfig; gcloud's
        # --accelerator ...,gpu-sharing-strategy=time-sharing,max-shared-clients-per-gpu=N).
        raise PlanError(f"accelerator.gpu_sharing_strategy={acc['gpu_sharing_strategy']} needs "
                        "accelerator.max_shared_clients_per_gpu (GPUSharingConfig.max_shared_clients_per_gpu, the "
                        "containers that share one GPU, for example 4): GKE refuses the strategy without it")
    if clients is not None and clients < 1:
        raise PlanError(f"accelerator.max_shared_clients_per_gpu is {clients}; give 1 or more")
    if acc.get("gpu_sharing_strategy") or clients is not None:
        sharing: dict = {}
        if acc.get("gpu_sharing_strategy"):
            sharing["gpu_sharing_strategy"] = acc["gpu_sharing_strategy"]
        if acc.get("max_shared_clients_per_gpu") is not None:
            sharing["max_shared_clients_per_gpu"] = acc["max_shared_clients_per_gpu"]
        cfg["gpu_sharing_config"] = sharing
    if acc.get("gpu_driver_version"):
        cfg["gpu_driver_installation_config"] = {"gpu_driver_version": acc["gpu_driver_version"]}
    return [cfg]


def autoscaling_config(auto: Mapping | None) -> dict | None:
    """NodePoolAutoscaling (proto input form) for the autoscaling option."""
    if auto is None:
        return None
    enabled = auto.get("enabled")
    enabled = True if enabled is None else enabled
    out: dict = {"enabled": enabled}
    if not enabled:
        return out
    per_zone = [k for k in ("min_node_count", "max_node_count") if auto.get(k) is not None]
    total = [k for k in ("total_min_node_count", "total_max_node_count") if auto.get(k) is not None]
    if per_zone and total:
        raise PlanError(f"autoscaling: {', '.join(per_zone)} (per zone) and {', '.join(total)} (whole pool) "
                        "exclude each other in NodePoolAutoscaling: give one pair")
    for k in AUTOSCALING_KEYS[1:]:
        if auto.get(k) is not None:
            out[k] = auto[k]
    for lo, hi in (("min_node_count", "max_node_count"), ("total_min_node_count", "total_max_node_count")):
        if out.get(lo) is not None and out.get(hi) is not None and out[lo] > out[hi]:
            raise PlanError(f"autoscaling: {lo}={out[lo]} is greater than {hi}={out[hi]}")
    if not out.get("max_node_count") and not out.get("total_max_node_count"):
        raise PlanError("autoscaling is enabled without max_node_count or total_max_node_count: give one")
    return out


def wanted_pool(p: Mapping, taints: list[dict] | None) -> dict:
    """The NodePool the task asks for (proto input form), only with the fields the task sets."""
    config: dict = {}
    for option in ("machine_type", "disk_size_gb", "disk_type", "image_type", "service_account", "spot",
                   "preemptible"):
        if p.get(option) is not None:
            config[option] = p[option]
    if p.get("oauth_scopes") is not None:
        config["oauth_scopes"] = list(p["oauth_scopes"])
    if p.get("labels") is not None:
        config["labels"] = {str(k): str(v) for k, v in p["labels"].items()}
    if taints is not None:
        config["taints"] = taints
    acc = accelerator_config(p.get("accelerator"))
    if acc:
        config["accelerators"] = acc
    pool: dict = {"name": p["name"], "config": config}
    if p.get("node_locations") is not None:
        pool["locations"] = list(p["node_locations"])
    auto = autoscaling_config(p.get("autoscaling"))
    if auto is not None:
        pool["autoscaling"] = auto
    return pool


def initial_node_count(node_count: int | None, autoscaling: Mapping | None) -> int:
    """NodePool.initial_node_count for a create: node_count, else the autoscaler's per-zone minimum, else 0."""
    if node_count is not None:
        return node_count
    if autoscaling and autoscaling.get("enabled"):
        return int(autoscaling.get("min_node_count") or 0)
    raise PlanError("the node pool does not exist; to create it give node_count (nodes per zone) or autoscaling")


def _accel_view(accs: list | None, keys: Mapping | None) -> list[dict]:
    """The accelerators, reduced to the sub-fields the task sets (all of them when keys is None)."""
    out = []
    for a in accs or []:
        if keys is None:
            out.append(dict(a))
            continue
        view = {k: a.get(k) for k in keys if not isinstance(keys[k], Mapping)}
        for k, sub in keys.items():
            if isinstance(sub, Mapping):
                view[k] = {s: (a.get(k) or {}).get(s) for s in sub}
        out.append(view)
    return out


DRIVER_KEY = "gpu_driver_installation_config"


def _without_driver(accs: list | None) -> list[dict]:
    return [{k: v for k, v in a.items() if k != DRIVER_KEY} for a in accs or []]


def immutable_changes(live: Mapping, want: Mapping) -> list[tuple[str, object, object]]:
    """(field, live value, wanted value) for each field the task sets that GKE cannot change in place.

    The GPU driver installation (gpu_driver_installation_config) is not one of them: it changes in place through
    UpdateNodePoolRequest.accelerators (see accelerator_update); the accelerators' type, count, partition size
    and sharing are.
    """
    lc, wc = live.get("config") or {}, want.get("config") or {}
    changes = []
    if "accelerators" in wc:
        keys = {k: v for k, v in wc["accelerators"][0].items() if k != DRIVER_KEY}
        live_view = _accel_view(lc.get("accelerators"), keys)
        if live_view != _without_driver(wc["accelerators"]) or len(lc.get("accelerators") or []) != 1:
            changes.append(("config.accelerators", lc.get("accelerators") or [], wc["accelerators"]))
    for field in ("spot", "preemptible", "service_account"):
        if field in want.get("_set", ()) and lc.get(field) != wc.get(field):
            changes.append((f"config.{field}", lc.get(field, _zero(field)), wc.get(field, _zero(field))))
    if "oauth_scopes" in want.get("_set", ()) and sorted(lc.get("oauth_scopes") or []) != sorted(
            wc.get("oauth_scopes") or []):
        changes.append(("config.oauth_scopes", lc.get("oauth_scopes") or [], wc.get("oauth_scopes") or []))
    return changes


def _zero(field: str):
    return False if field in ("spot", "preemptible") else ""


def immutable_message(ident: str, changes: list[tuple[str, object, object]]) -> str:
    parts = "; ".join(f"{f}: live {old!r}, asked {new!r}" for f, old, new in changes)
    return (f"{ident}: GKE cannot change {', '.join(f for f, _o, _n in changes)} of an existing node pool ({parts}). "
            "Set recreate: true to delete the pool and create it again (its nodes and their pods go away), "
            "or create a pool under a new name")


def accelerator_update(live: Mapping, want: Mapping) -> list[dict] | None:
    """UpdateNodePoolRequest.accelerators when the task's GPU driver installation differs from the live one.

    The live AcceleratorConfig is sent whole (type, count, partition size, sharing) with the wanted
    gpu_driver_installation_config, as gcloud's `node-pools update --accelerator type=...,count=...,
    gpu-driver-version=...` does; None when the driver is not given or does not differ (or when the other fields
    differ: that is an immutable change, see immutable_changes).
    """
    lc, wc = live.get("config") or {}, want.get("config") or {}
    if "accelerators" not in wc or DRIVER_KEY not in wc["accelerators"][0] or len(lc.get("accelerators") or []) != 1:
        return None
    la, wa = lc["accelerators"][0], wc["accelerators"][0]
    if (la.get(DRIVER_KEY) or {}).get("gpu_driver_version") == wa[DRIVER_KEY].get("gpu_driver_version"):
        return None
    acc: dict = {"accelerator_type": la.get("accelerator_type", ""), "accelerator_count": int(la.get("accelerator_count", 0))}
    if la.get("gpu_partition_size"):
        acc["gpu_partition_size"] = la["gpu_partition_size"]
    sharing = la.get("gpu_sharing_config") or {}
    if sharing:
        acc["gpu_sharing_config"] = {k: (int(v) if k == "max_shared_clients_per_gpu" else v)
                                     for k, v in sharing.items()}
    acc[DRIVER_KEY] = dict(wa[DRIVER_KEY])
    return [acc]


def update_requests(live: Mapping, want: Mapping) -> list[dict]:
    """UpdateNodePoolRequest bodies (without name) for what differs, one per group of fields GKE updates.

    Each carries the required node_version (the pool's own: no upgrade) and image_type (the wanted one when
    the task sets it, else the live one). A changed image type alone is a request of its own.
    """
    lc, wc, given = live.get("config") or {}, want.get("config") or {}, want.get("_set", ())
    image = wc.get("image_type") or lc.get("image_type", "")
    base = {"node_version": live.get("version", ""), "image_type": image}
    groups: list[dict] = []
    if "labels" in given and (lc.get("labels") or {}) != (wc.get("labels") or {}):
        groups.append({"labels": {"labels": wc.get("labels") or {}}})
    if "taints" in given and live_taints(lc) != live_taints(wc):
        groups.append({"taints": {"taints": live_taints(wc)}})
    if "node_locations" in given and sorted(live.get("locations") or []) != sorted(want.get("locations") or []):
        groups.append({"locations": list(want.get("locations") or [])})
    machine = {f: wc[f] for f in MACHINE_FIELDS if f in given and wc.get(f) != lc.get(f)}
    if machine:
        groups.append(machine)
    accelerators = accelerator_update(live, want)
    if accelerators:
        groups.append({"accelerators": accelerators})
    if not groups and image != lc.get("image_type", ""):
        groups.append({})
    return [{**base, **g} for g in groups]


def autoscaling_request(live: Mapping, want: Mapping, given: Iterable[str] = ()) -> dict | None:
    """SetNodePoolAutoscalingRequest's autoscaling when the task's differs from the live one, else None.

    Compared - enabled, the sub-options the task gives (``given``), and the other kind of limits (per-zone or
    whole-pool), which must be unset. A field GKE fills itself (location_policy's default) is not compared
    unless given.
    """
    if "autoscaling" not in want.get("_set", ()):
        return None
    la, wa = live.get("autoscaling") or {}, want.get("autoscaling") or {}
    if not wa.get("enabled"):
        return {"enabled": False} if la.get("enabled") else None
    keys = {"enabled", *given}
    if keys & {"min_node_count", "max_node_count"}:
        keys |= {"total_min_node_count", "total_max_node_count"}
    if keys & {"total_min_node_count", "total_max_node_count"}:
        keys |= {"min_node_count", "max_node_count"}
    if all(la.get(k) == wa.get(k) for k in keys):
        return None
    return dict(wa)


def node_selector(name: str, accelerator: Mapping | None) -> dict:
    """Labels GKE gives every node of the pool, for a pod's nodeSelector."""
    sel = {NODEPOOL_LABEL: name}
    if accelerator:
        sel[ACCELERATOR_LABEL] = accelerator["type"]
    return sel


def tolerations(taints: list[dict], gpu: bool) -> list[dict]:
    """Kubernetes tolerations for the pool's taints (GKE's GPU taint included on a GPU pool)."""
    all_taints = ([GPU_TAINT] if gpu else []) + list(taints)
    return [{"key": t["key"], "operator": "Equal", "value": t.get("value", ""),
             "effect": GKE_TO_K8S_EFFECT.get(t["effect"], t["effect"])} for t in all_taints]


def compared(pool: Mapping | None) -> dict:
    """The fields of a pool the module compares, for diff mode (GKE's GPU taint left out)."""
    if not pool:
        return {}
    cfg = pool.get("config") or {}
    out = {k: cfg[k] for k in ("machine_type", "disk_size_gb", "disk_type", "image_type", "service_account",
                               "oauth_scopes", "spot", "preemptible", "accelerators", "labels") if k in cfg}
    out["taints"] = live_taints(cfg)
    for k in ("locations", "autoscaling", "version", "status"):
        if k in pool:
            out[k] = pool[k]
    if "node_count" in pool:
        out["node_count"] = pool["node_count"]
    return out


def zones_lacking(accelerator_type: str, offered: Mapping[str, Iterable[str]]) -> dict[str, list[str]]:
    """Zones (of offered: zone -> accelerator type names from the Compute API) that do not offer the type,
    each with the types it does offer."""
    return {z: sorted(types) for z, types in sorted(offered.items()) if accelerator_type not in set(types)}


def accelerator_type_message(ident: str, accelerator_type: str, lacking: Mapping[str, list[str]]) -> str:
    where = "; ".join(f"{z} offers {', '.join(t) or 'no accelerator type'}" for z, t in lacking.items())
    return (f"{ident}: accelerator.type {accelerator_type!r} is not offered in zone(s) {', '.join(lacking)} "
            f"(Compute API acceleratorTypes.list: {where}). Choose a type offered there, set node_locations to "
            "zones that offer it, or check_accelerator_type: false to skip this check")
