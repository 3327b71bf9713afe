# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private to k8sgpu.nvidia: planning for the eks_nodegroup module.

Pure functions, no AWS calls: from the task's options and the live nodegroup
(DescribeNodegroup's ``nodegroup``, the API's camelCase) they compute the
requests to send (UpdateNodegroupConfig's labels/taints/scalingConfig/
updateConfig, TagResource/UntagResource, UpdateNodegroupVersion) and the
cluster-autoscaler node-template tags of the nodegroup's Auto Scaling groups.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping

from ansible_collections.k8sgpu.nvidia.plugins.module_utils._aws_common import tag_update

# Kubernetes' effect names -> EKS's (TaintEffect in the EKS API).
K8S_TO_EKS_EFFECT = {
    "NoSchedule": "NO_SCHEDULE",
    "NoExecute": "NO_EXECUTE",
    "PreferNoSchedule": "PREFER_NO_SCHEDULE",
}
EKS_TO_K8S_EFFECT = {v: k for k, v in K8S_TO_EKS_EFFECT.items()}

TEMPLATE_PREFIX = "k8s.io/cluster-autoscaler/node-template/"
GPU_RESOURCE_SUFFIX = "resources/nvidia.com/gpu"
ACCELERATOR_LABEL = "k8s.amazonaws.com/accelerator"
# The ASG tag that records which node-template tags this module wrote (suffixes after TEMPLATE_PREFIX,
# comma-separated). ASG tag values are at most 256 characters: longer lists continue in "<key>-2", "<key>-3"...
MARKER_KEY = "k8sgpu.nvidia/managed-template-tags"
MARKER_VALUE_MAX = 256

# Fields EKS cannot change in place: option name -> DescribeNodegroup/CreateNodegroup field.
IMMUTABLE = {
    "ami_type": "amiType",
    "capacity_type": "capacityType",
    "instance_types": "instanceTypes",
    "subnets": "subnets",
    "node_role": "nodeRole",
    "disk_size": "diskSize",
}
# Compared as sets: EKS keeps them in no order the task controls.
UNORDERED = {"instance_types", "subnets"}


class PlanError(ValueError):
    """The task asks for something that cannot be done; the message names the field and the fix."""


def check_enum(option: str, value: str | None, allowed: Iterable[str], shape: str) -> None:
    """Fail when value is not one of allowed (an enum of botocore's EKS service model)."""
    allowed = list(allowed)
    if value is not None and value not in allowed:
        raise PlanError(f"{option}={value!r} is not a value EKS accepts (botocore's EKS model, shape {shape}): "
                        f"use one of {', '.join(allowed)}")


def eks_effect(effect: str, allowed: Iterable[str]) -> str:
    """EKS's effect name for effect given in EKS's (NO_SCHEDULE) or Kubernetes' (NoSchedule) spelling."""
    allowed = list(allowed)
    mapped = K8S_TO_EKS_EFFECT.get(effect, effect)
    if mapped not in allowed:
        raise PlanError(f"taint effect {effect!r} is not one EKS accepts (botocore's EKS model, shape TaintEffect): "
                        f"use one of {', '.join(allowed)} (or Kubernetes' "
                        f"{', '.join(EKS_TO_K8S_EFFECT.get(a, a) for a in allowed)})")
    return mapped


def normalize_taints(taints: Iterable[Mapping], allowed_effects: Iterable[str]) -> list[dict]:
    """The task's taints as EKS Taint objects (key, value when set, EKS effect), sorted; duplicates refused."""
    allowed_effects = list(allowed_effects)
    out: dict[tuple[str, str], dict] = {}
    for t in taints:
        if not t.get("key"):
            raise PlanError(f"taint {dict(t)!r} has no key")
        effect = eks_effect(t.get("effect") or "", allowed_effects)
        taint = {"key": t["key"], "effect": effect}
        if t.get("value") not in (None, ""):
            taint["value"] = str(t["value"])
        if (t["key"], effect) in out:
            raise PlanError(f"taint {t['key']}:{effect} is given twice; Kubernetes keeps one taint per key and effect")
        out[(t["key"], effect)] = taint
    return [out[k] for k in sorted(out)]


def live_taints(nodegroup: Mapping) -> list[dict]:
    """The live nodegroup's taints, in the same form as normalize_taints' (value dropped when empty)."""
    out = {}
    for t in nodegroup.get("taints") or []:
        taint = {"key": t["key"], "effect": t["effect"]}
        if t.get("value") not in (None, ""):
            taint["value"] = t["value"]
        out[(t["key"], t["effect"])] = taint
    return [out[k] for k in sorted(out)]


def desired_labels(labels: Mapping | None, accelerator: str | None) -> dict[str, str] | None:
    """The Kubernetes labels the nodegroup should carry: the task's, plus the accelerator label when set."""
    if labels is None and not accelerator:
        return None
    out = {str(k): str(v) for k, v in (labels or {}).items()}
    if accelerator:
        if out.get(ACCELERATOR_LABEL, accelerator) != accelerator:
            raise PlanError(f"labels sets {ACCELERATOR_LABEL}={out[ACCELERATOR_LABEL]!r} and accelerator is "
                            f"{accelerator!r}: give one of them")
        out[ACCELERATOR_LABEL] = accelerator
    return out


def label_update(live: Mapping, want: Mapping) -> dict:
    """UpdateNodegroupConfig's labels: only the keys to add or change, and the keys to remove."""
    add, remove = tag_update(live, want, purge=True)
    upd = {}
    if add:
        upd["addOrUpdateLabels"] = add
    if remove:
        upd["removeLabels"] = remove
    return upd


def taint_update(live: list[dict], want: list[dict]) -> dict:
    """UpdateNodegroupConfig's taints: a taint is one per (key, effect); a changed value is an addOrUpdate."""
    live_by = {(t["key"], t["effect"]): t for t in live}
    want_by = {(t["key"], t["effect"]): t for t in want}
    add = [t for k, t in want_by.items() if live_by.get(k) != t]
    remove = [live_by[k] for k in live_by if k not in want_by]
    upd = {}
    if add:
        upd["addOrUpdateTaints"] = sorted(add, key=lambda t: (t["key"], t["effect"]))
    if remove:
        upd["removeTaints"] = sorted(remove, key=lambda t: (t["key"], t["effect"]))
    return upd


def scaling_config(scaling: Mapping | None) -> dict:
    """NodegroupScalingConfig from the task's scaling option (only the sizes given)."""
    names = {"min_size": "minSize", "max_size": "maxSize", "desired_size": "desiredSize"}
    out = {names[k]: v for k, v in (scaling or {}).items() if k in names and v is not None}
    for field, value in out.items():
        if value < 0:
            raise PlanError(f"scaling: {field} is {value}; EKS accepts 0 or more")
    if out.get("maxSize") == 0:
        raise PlanError("scaling: max_size must be 1 or more (EKS NodegroupScalingConfig.maxSize)")
    lo, hi = out.get("minSize"), out.get("maxSize")
    if lo is not None and hi is not None and lo > hi:
        raise PlanError(f"scaling: min_size {lo} is more than max_size {hi}")
    desired = out.get("desiredSize")
    if desired is not None and ((lo is not None and desired < lo) or (hi is not None and desired > hi)):
        raise PlanError(f"scaling: desired_size {desired} is outside min_size {lo}..max_size {hi}")
    return out


def scaling_update(live: Mapping | None, want: Mapping) -> dict:
    """The scalingConfig to send (the live one with the task's sizes) when any size given differs, else {}."""
    live = dict(live or {})
    if all(live.get(k) == v for k, v in want.items()):
        return {}
    merged = {**live, **want}
    # The desired size the autoscaler set must stay inside the new bounds, or EKS refuses the request.
    if "desiredSize" not in want and "desiredSize" in merged:
        if "minSize" in merged:
            merged["desiredSize"] = max(merged["desiredSize"], merged["minSize"])
        if "maxSize" in merged:
            merged["desiredSize"] = min(merged["desiredSize"], merged["maxSize"])
    return merged


def update_config(opt: Mapping | None) -> dict:
    """NodegroupUpdateConfig from the task's update_config option."""
    if not opt:
        return {}
    out = {}
    if opt.get("max_unavailable") is not None:
        out["maxUnavailable"] = opt["max_unavailable"]
    if opt.get("max_unavailable_percentage") is not None:
        out["maxUnavailablePercentage"] = opt["max_unavailable_percentage"]
    if len(out) > 1:
        raise PlanError("update_config: give max_unavailable or max_unavailable_percentage, not both")
    return out


def update_config_update(live: Mapping | None, want: Mapping) -> dict:
    """The updateConfig to send when it differs from the live one, else {}."""
    live = {k: v for k, v in (live or {}).items() if k in ("maxUnavailable", "maxUnavailablePercentage")}
    return dict(want) if want and live != want else {}


def immutable_changes(live: Mapping, want: Mapping) -> list[tuple[str, str, object, object]]:
    """(option, API field, live value, wanted value) for each field that cannot change in place and differs.

    want holds the task's options by option name (None: not given, not compared)."""
    out = []
    for option, field in IMMUTABLE.items():
        new = want.get(option)
        if new is None or field not in live:
            continue
        old = live[field]
        if option in UNORDERED:
            differs = sorted(old or []) != sorted(new)
        elif option == "disk_size":
            differs = int(old) != int(new)
        else:
            differs = old != new
        if differs:
            out.append((option, field, old, new))
    return out


def launch_template(opt: Mapping | None, disk_size: int | None = None) -> dict | None:
    """CreateNodegroup's launchTemplate ({id or name, version}) from the task's launch_template option.

    EKS refuses diskSize with a launch template (the root volume is the template's block device mapping), so
    disk_size given with it fails here, before any request. The version is a version number (EKS records the
    number, so a number is what a second run can compare); unset, EKS uses the template's default version and the
    version is not compared."""
    if not opt:
        return None
    ref = {k: str(opt[k]) for k in ("id", "name") if opt.get(k) not in (None, "")}
    if len(ref) != 1:
        raise PlanError("launch_template: give its id or its name (one of them)")
    version = opt.get("version")
    if version not in (None, ""):
        version = str(version)
        if not version.isdigit() or int(version) < 1:
            raise PlanError(f"launch_template: version {version!r} is not a launch template version number (1, 2, "
                            "...); give the number (amazon.aws.ec2_launch_template returns it as latest_version)")
        ref["version"] = version
    if disk_size is not None:
        raise PlanError("disk_size cannot be given with launch_template (EKS refuses diskSize with a launch "
                        "template): set the root volume's size in the launch template's block device mappings")
    return ref


def launch_template_plan(live: Mapping, want: Mapping | None) -> tuple[list[tuple[str, str, object, object]], dict]:
    """(immutable changes, UpdateNodegroupVersion's launchTemplate or {}) for the task's launch template.

    A nodegroup's launch template cannot be added, removed or replaced by another in place (EKS); its version can
    change with UpdateNodegroupVersion. want is launch_template()'s result (None: not compared)."""
    if want is None:
        return [], {}
    live_lt = live.get("launchTemplate") or {}
    key = "id" if "id" in want else "name"
    if not live_lt or live_lt.get(key) != want[key]:
        shown = {k: v for k, v in live_lt.items() if k in ("id", "name", "version")} or None
        return [("launch_template", "launchTemplate", shown, dict(want))], {}
    if "version" in want and str(live_lt.get("version")) != want["version"]:
        return [], {key: want[key], "version": want["version"]}
    return [], {}


def immutable_message(cluster: str, name: str, changes: list[tuple[str, str, object, object]]) -> str:
    """The failure message for immutable_changes' result."""
    parts = [f"{option} (EKS field {field}) is {old!r}, the task asks for {new!r}" for option, field, old, new in changes]
    return (f"nodegroup {name} of cluster {cluster}: EKS cannot change these in place: {'; '.join(parts)}. "
            "Keep the live values, or delete the nodegroup (state: absent) and create it again, or create a "
            "nodegroup under another name and delete this one after its pods have moved.")


def template_tags(labels: Mapping, taints: Iterable[Mapping], gpu_count: int | None) -> dict[str, str]:
    """The cluster-autoscaler node-template tags for labels, EKS taints and the GPU count (key -> value).

    Taint values are "<value>:<Kubernetes effect>", as the cluster-autoscaler's AWS provider reads them."""
    tags = {f"{TEMPLATE_PREFIX}label/{k}": str(v) for k, v in labels.items()}
    for t in taints:
        effect = EKS_TO_K8S_EFFECT.get(t["effect"], t["effect"])
        tags[f"{TEMPLATE_PREFIX}taint/{t['key']}"] = f"{t.get('value') or ''}:{effect}"
    if gpu_count:
        tags[f"{TEMPLATE_PREFIX}{GPU_RESOURCE_SUFFIX}"] = str(gpu_count)
    return dict(sorted(tags.items()))


def duplicate_taint_keys(taints: Iterable[Mapping]) -> list[str]:
    """Taint keys given with more than one effect: one node-template tag per key can carry only one."""
    seen: dict[str, int] = {}
    for t in taints:
        seen[t["key"]] = seen.get(t["key"], 0) + 1
    return sorted(k for k, n in seen.items() if n > 1)


def marker_keys(tags: Mapping) -> list[str]:
    """The marker tag keys present (MARKER_KEY, MARKER_KEY-2, ...)."""
    numbered = {1 if k == MARKER_KEY else int(k[len(MARKER_KEY) + 1:]): k for k in tags
                if k == MARKER_KEY or (k.startswith(MARKER_KEY + "-") and k[len(MARKER_KEY) + 1:].isdigit())}
    return [numbered[n] for n in sorted(numbered)]


def read_marker(tags: Mapping) -> set[str]:
    """Full tag keys that the marker tags say this module wrote."""
    suffixes = ",".join(tags[k] for k in marker_keys(tags)).split(",")
    return {TEMPLATE_PREFIX + s for s in suffixes if s}


def write_marker(keys: Iterable[str]) -> dict[str, str]:
    """Marker tags listing keys (suffixes after TEMPLATE_PREFIX), split at MARKER_VALUE_MAX characters."""
    suffixes = sorted(k[len(TEMPLATE_PREFIX):] for k in keys)
    chunks: list[str] = []
    for s in suffixes:
        if len(s) > MARKER_VALUE_MAX:
            raise PlanError(f"node-template tag {TEMPLATE_PREFIX}{s} is too long to record "
                            f"({len(s)} > {MARKER_VALUE_MAX} characters)")
        if chunks and len(chunks[-1]) + 1 + len(s) <= MARKER_VALUE_MAX:
            chunks[-1] += "," + s
        else:
            chunks.append(s)
    return {(MARKER_KEY if i == 0 else f"{MARKER_KEY}-{i + 1}"): c for i, c in enumerate(chunks)}


def asg_tag_plan(live: Mapping[str, str], want: Mapping[str, str]) -> tuple[dict[str, str], list[str], dict[str, str]]:
    """(tags to create or update, keys to delete, tags after) for one Auto Scaling group.

    live: the group's tags (key -> value). want: the node-template tags wanted. Deleted are the node-template
    tags that the marker lists and that are no longer wanted; node-template tags that someone else wrote are left
    alone (or adopted when wanted). The marker tags are rewritten to list exactly the wanted keys."""
    owned = read_marker(live)
    new_marker = write_marker(want.keys())
    target = {**want, **new_marker}
    put = {k: v for k, v in target.items() if live.get(k) != v}
    delete = sorted((owned - set(want)) & set(live))
    delete += sorted(k for k in marker_keys(live) if k not in new_marker)
    after = {k: v for k, v in live.items() if k not in delete}
    after.update(put)
    return dict(sorted(put.items())), delete, dict(sorted(after.items()))


def gpu_count_for(instance_types: Iterable[str], gpu_info: Mapping[str, int]) -> tuple[int, str | None]:
    """(GPUs per node, warning) from DescribeInstanceTypes' GpuInfo counts per instance type.

    Mixed counts: the smallest, so that the template never promises more GPUs than a node brings."""
    counts = {t: gpu_info.get(t, 0) for t in instance_types}
    if not counts:
        return 0, None
    low = min(counts.values())
    if len(set(counts.values())) > 1:
        return low, (f"instance types have different GPU counts ({', '.join(f'{t}: {n}' for t, n in counts.items())}); "
                     f"the node-template tag says {low}; set gpu_count to choose")
    return low, None


# EC2 DescribeInstanceTypes' GpuInfo.Gpus[].Name -> the value of the k8s.amazonaws.com/accelerator label. The
# cluster-autoscaler's AWS provider treats a node with the label (any value) as a GPU node and waits for its GPUs
# to become allocatable; the values follow the names its AWS provider and GKE use (nvidia-tesla-* for the Tesla
# generations, nvidia-<name> for the later ones). A name not listed here gives nvidia-<name in lower case>.
GPU_NAME_TO_ACCELERATOR = {
    "K80": "nvidia-tesla-k80",
    "M60": "nvidia-tesla-m60",
    "P100": "nvidia-tesla-p100",
    "V100": "nvidia-tesla-v100",
    "T4": "nvidia-tesla-t4",
    "A100": "nvidia-tesla-a100",
    "A10G": "nvidia-a10g",
    "T4g": "nvidia-t4g",
    "L4": "nvidia-l4",
    "L40S": "nvidia-l40s",
    "H100": "nvidia-h100",
    "H200": "nvidia-h200",
    "B200": "nvidia-b200",
}


def accelerator_for(instance_types: Iterable[str], gpu_names: Mapping[str, Iterable[str]]) -> tuple[str | None, str | None]:
    """(k8s.amazonaws.com/accelerator value, warning) from the NVIDIA GPU names of each instance type.

    None without NVIDIA GPUs; None with a warning when the instance types have different GPUs (the label would be
    wrong for some of the nodes)."""
    names = {t: sorted(set(gpu_names.get(t) or [])) for t in instance_types}
    distinct = {tuple(n) for n in names.values()}
    if not names or distinct == {()}:
        return None, None
    if len(distinct) > 1 or len(next(iter(distinct))) > 1:
        listed = ", ".join(f"{t}: {'/'.join(n) or 'none'}" for t, n in names.items())
        return None, (f"instance types have different GPUs ({listed}); no {ACCELERATOR_LABEL} label is derived: "
                      "set accelerator to choose one")
    name = next(iter(distinct))[0]
    return GPU_NAME_TO_ACCELERATOR.get(name, f"nvidia-{name.lower()}"), None
