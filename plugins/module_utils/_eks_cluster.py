# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private to k8sgpu.nvidia: planning for the eks_cluster module.

Pure functions, no AWS calls: from the task's options and the live cluster (DescribeCluster's ``cluster``, the
API's camelCase) they compute what cannot change, the UpdateClusterConfig requests to send (one per kind of
change: EKS runs one cluster update at a time) and the fields shown in diff mode.
"""
from __future__ import annotations

from collections.abc import Mapping

# The five control-plane log types (LogType in the EKS API).
LOG_TYPES = ("api", "audit", "authenticator", "controllerManager", "scheduler")
# CONFIG_MAP -> API_AND_CONFIG_MAP -> API: EKS changes the authentication mode only in this direction.
AUTH_MODE_ORDER = ("CONFIG_MAP", "API_AND_CONFIG_MAP", "API")


class PlanError(ValueError):
    """The task asks for something that cannot be done; the message names the field and the fix."""


def enabled_logs(cluster: Mapping) -> list[str]:
    """The log types enabled on a live cluster (logging.clusterLogging[].types where enabled)."""
    out: set[str] = set()
    for entry in ((cluster.get("logging") or {}).get("clusterLogging") or []):
        if entry.get("enabled"):
            out.update(entry.get("types") or [])
    return sorted(out)


def logging_request(enabled: list[str], allowed=LOG_TYPES) -> dict:
    """CreateCluster/UpdateClusterConfig logging: the given types enabled, the others disabled."""
    on = sorted(set(enabled))
    off = sorted(set(allowed) - set(on))
    entries = []
    if on:
        entries.append({"types": on, "enabled": True})
    if off:
        entries.append({"types": off, "enabled": False})
    return {"clusterLogging": entries}


def immutable_changes(live: Mapping, p: Mapping) -> list[tuple[str, str, object, object]]:
    """(option, API field, live value, wanted value) for what this module does not change on a cluster."""
    vpc = live.get("resourcesVpcConfig") or {}
    out = []
    checks = (("role_arn", "roleArn", live.get("roleArn"), p.get("role_arn"), False),
              ("subnets", "resourcesVpcConfig.subnetIds", vpc.get("subnetIds"), p.get("subnets"), True),
              ("security_groups", "resourcesVpcConfig.securityGroupIds", vpc.get("securityGroupIds"),
               p.get("security_groups"), True))
    for option, field, old, new, unordered in checks:
        if new is None:
            continue
        differs = sorted(old or []) != sorted(new) if unordered else old != new
        if differs:
            out.append((option, field, old, new))
    version = p.get("version")
    if version is not None and live.get("version") and str(version) != str(live["version"]):
        out.append(("version", "version", live["version"], str(version)))
    return out


def immutable_message(name: str, changes: list[tuple[str, str, object, object]]) -> str:
    parts = [f"{option} (EKS field {field}) is {old!r}, the task asks for {new!r}" for option, field, old, new in changes]
    fixes = []
    if any(c[0] == "version" for c in changes):
        fixes.append("upgrade the control plane one minor version at a time yourself (aws eks update-cluster-version; "
                     "then the nodegroups), then set version to the new one")
    if any(c[0] in ("subnets", "security_groups") for c in changes):
        fixes.append("change subnets or security groups with aws eks update-cluster-config --resources-vpc-config")
    if any(c[0] == "role_arn" for c in changes):
        fixes.append("a cluster's IAM role cannot change: keep it, or create a new cluster")
    return (f"EKS cluster {name}: this module does not change {', '.join(c[0] for c in changes)} of an existing "
            f"cluster: {'; '.join(parts)}. Keep the live values, or {'; '.join(fixes)}")


def config_updates(live: Mapping, p: Mapping) -> list[dict]:
    """UpdateClusterConfig bodies (without name) for what differs, one per kind of change."""
    updates: list[dict] = []
    if p.get("logging") is not None and enabled_logs(live) != sorted(set(p["logging"])):
        updates.append({"logging": logging_request(p["logging"])})
    vpc = live.get("resourcesVpcConfig") or {}
    access = {}
    for option, field in (("endpoint_public_access", "endpointPublicAccess"),
                          ("endpoint_private_access", "endpointPrivateAccess")):
        if p.get(option) is not None and vpc.get(field) != p[option]:
            access[field] = p[option]
    cidrs = p.get("public_access_cidrs")
    if cidrs is not None and sorted(vpc.get("publicAccessCidrs") or []) != sorted(cidrs):
        access["publicAccessCidrs"] = list(cidrs)
    if access:
        updates.append({"resourcesVpcConfig": access})
    mode = p.get("authentication_mode")
    live_mode = (live.get("accessConfig") or {}).get("authenticationMode")
    if mode and live_mode and mode != live_mode:
        if mode in AUTH_MODE_ORDER and live_mode in AUTH_MODE_ORDER and \
                AUTH_MODE_ORDER.index(mode) < AUTH_MODE_ORDER.index(live_mode):
            raise PlanError(f"authentication_mode (EKS field accessConfig.authenticationMode) is {live_mode!r}, the "
                            f"task asks for {mode!r}: EKS changes it only from CONFIG_MAP to API_AND_CONFIG_MAP to "
                            "API, never back; keep the live mode")
        updates.append({"accessConfig": {"authenticationMode": mode}})
    return updates


def compared(cluster: Mapping | None) -> dict:
    """The fields of a cluster the module compares, for diff mode."""
    if not cluster:
        return {}
    vpc = cluster.get("resourcesVpcConfig") or {}
    out = {"version": cluster.get("version"), "roleArn": cluster.get("roleArn"),
           "subnetIds": sorted(vpc.get("subnetIds") or []), "securityGroupIds": sorted(vpc.get("securityGroupIds") or []),
           "endpointPublicAccess": vpc.get("endpointPublicAccess"),
           "endpointPrivateAccess": vpc.get("endpointPrivateAccess"),
           "publicAccessCidrs": sorted(vpc.get("publicAccessCidrs") or []),
           "logging": enabled_logs(cluster), "tags": dict(cluster.get("tags") or {})}
    mode = (cluster.get("accessConfig") or {}).get("authenticationMode")
    if mode:
        out["authenticationMode"] = mode
    if cluster.get("status"):
        out["status"] = cluster["status"]
    return out


def planned(live: Mapping | None, create: Mapping | None, updates: list[dict], tags: Mapping | None) -> dict:
    """The compared fields as they will be after the task (diff mode in check mode)."""
    if live is None:
        if create is None:
            return {}
        return compared({**create, "status": "ACTIVE"})
    after = compared(live)
    for u in updates:
        if "logging" in u:
            after["logging"] = sorted(t for e in u["logging"]["clusterLogging"] if e["enabled"] for t in e["types"])
        for field, value in (u.get("resourcesVpcConfig") or {}).items():
            after[field] = sorted(value) if isinstance(value, list) else value
        if "accessConfig" in u:
            after["authenticationMode"] = u["accessConfig"]["authenticationMode"]
    if tags is not None:
        after["tags"] = dict(tags)
    return after


def exposure_warnings(live: Mapping | None, p: Mapping) -> list[str]:
    """Warnings for a cluster left open (AWS's EKS best practices, CIS EKS benchmark 5.4.2 and 2.1.1): its API
    server endpoint public to any address (the option, else the live cluster's, else EKS's create default: public,
    0.0.0.0/0), or no audit log. With state present, from what the run asks for and what is there."""
    vpc = (live or {}).get("resourcesVpcConfig") or {}
    public = p.get("endpoint_public_access")
    if public is None:
        public = vpc.get("endpointPublicAccess", True)
    cidrs = p.get("public_access_cidrs")
    if cidrs is None:
        cidrs = vpc.get("publicAccessCidrs") or ["0.0.0.0/0"]
    out = []
    if public and "0.0.0.0/0" in cidrs:
        out.append(f"EKS cluster {p.get('name')}: its API server endpoint is public to any address (0.0.0.0/0). Set "
                   "public_access_cidrs to the addresses that must reach it, or endpoint_public_access: false with "
                   "endpoint_private_access: true.")
    logs = p.get("logging")
    if logs is None:
        logs = enabled_logs(live) if live else []
    if "audit" not in logs:
        out.append(f"EKS cluster {p.get('name')}: the control plane's audit log is off. Set logging to include audit "
                   "(playbooks/eks.yml's default: api, audit, authenticator).")
    return out
