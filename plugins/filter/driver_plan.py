# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The driver role's decisions for one host, in one place.

``driver_plan`` takes the host's facts (after gpu_facts), the role's variables and what the tasks have read so far
(the headers probe, the installed packages) and says what to install, hold, configure and whether a reboot may be
done, each with the reason. ``driver_outcome`` says, after the install, what the role reports (loaded, reboot
required, not loaded and why). The role's tasks only carry these out.
"""
from __future__ import annotations

# The documentation of the filter this file is named after is here, not in a .yml beside it: Galaxy lists
# every filter .py and every documentation file, so a same-named pair showed the filter twice.
DOCUMENTATION = r"""
name: driver_plan
version_added: 1.0.0
short_description: The driver role's decisions for one host (what to install, hold, configure, reboot, and why)
description:
  - Used by the C(driver) role, whose tasks only carry its answer out. Called once with the facts (is a driver of
    the wanted branch, version and flavour loaded; is there a GPU), and again once the installed packages were read.
  - Chooses the kernel-module flavour through P(k8sgpu.nvidia.driver_kernel_modules#filter); the packages (Debian
    C(nvidia-driver), C(nvidia-[open-]kernel-dkms), C(nvidia-smi), C(nvidia-persistenced), C(gcc), or the suite's
    Tesla packages C(nvidia-tesla-<branch>-*) for another branch; Ubuntu C(nvidia-driver-<branch>[-server][-open])
    and C(nvidia-utils-<branch>[-server])) and the kernel headers (the running kernel's where the sources have them,
    else the generic ones); the apt names with the version pin; the packages to hold; whether held packages may be
    changed; the configuration (nouveau blacklist, nvidia-persistenced); whether the role may reboot the host.
positional: _input, settings
options:
  _input:
    description: The host's C(ansible_facts) after M(k8sgpu.nvidia.gpu_facts) (with C(distribution),
      C(distribution_major_version), C(kernel), C(architecture)).
    type: dict
    required: true
  settings:
    description: The role's variables by name (C(driver_branch), C(driver_version), C(driver_kernel_modules),
      C(driver_ubuntu_server), C(driver_hold), C(driver_no_gpu), C(driver_blacklist_nouveau), C(driver_persistenced),
      C(driver_reboot), C(driver_reboot_boot_time_command)) and C(ansible_connection), C(inventory_hostname).
    type: dict
    required: true
  packages:
    description: The result of M(k8sgpu.nvidia.dpkg_packages) for C(read.names) (C(packages), C(ready), C(held));
      null before they were read.
    type: dict
  headers_available:
    description: Whether the package sources have the running kernel's headers; null before that was asked.
    type: bool
  host:
    description: The inventory host name, for messages (default the settings' C(inventory_hostname)).
    type: str
    default: ""
"""

EXAMPLES = r"""
_driver_plan: >-
  {{ ansible_facts | k8sgpu.nvidia.driver_plan(_driver_settings, packages=__dpkg, headers_available=true) }}
# {"status": "pending", "skip": false, "install": {"needed": true, "names": ["nvidia-driver=535*", ...],
#  "allow_change_held": true, "reason": "nvidia-driver, ... missing or not of version 535"},
#  "hold": {"packages": [...], "needed": true, "reason": "..."}, "result": {...}, ...}
"""

RETURN = r"""
_value:
  description:
    - C(status) (V(already_loaded), V(skipped_no_gpu) or V(pending)), C(skip) (nothing to do), C(has_gpu), C(error)
      (the kernel modules asked for cannot drive a GPU), C(kernel_modules) (flavour, reason, switch, error),
      C(open_packaged).
    - C(read) (C(names), C(versions)) the packages to read; C(packages) the wanted ones; C(driver_package);
      C(version_wanted); C(install) (C(needed), C(names) for apt, C(allow_change_held), C(reason),
      C(allow_change_held_reason)); C(hold) (C(packages), C(needed), C(reason)); C(headers) (C(name), C(detail));
      C(configure) (C(blacklist_nouveau), C(persistenced), C(persistenced_start)); C(reboot) (C(allowed), C(reason)).
    - C(result), C(driver_result) as far as the plan knows it.
  type: dict
"""

import re
from typing import Any, Mapping

from ansible.errors import AnsibleFilterError

from ansible_collections.k8sgpu.nvidia.plugins.module_utils._plan_values import as_bool, as_text

from ansible_collections.k8sgpu.nvidia.plugins.filter.driver_kernel_modules import driver_kernel_modules

# Debian packages its own driver branch as nvidia-driver (Debian 12: 535, 13: 550) and other branches for
# data-centre GPUs as nvidia-tesla-<branch>-* (Debian 12: 470, 535; Debian 13: 535, whose 550 does not build for
# its 6.12 kernel), with the proprietary kernel module only.
DEBIAN_SUITE_BRANCH = {"12": "535", "13": "550"}
DEBIAN_ARCH = {"x86_64": "amd64", "aarch64": "arm64"}
# Packages built from the driver's source carry its version.
_VERSIONED = re.compile(r"^nvidia-(tesla-[0-9]+-)?(driver|kernel-dkms|open-kernel-dkms|smi|utils)")
_CONTAINER_CONNECTIONS = ("community.docker.docker", "docker")
_LOCAL_HOSTS = ("localhost", "127.0.0.1")

SETTINGS = ("driver_branch", "driver_version", "driver_kernel_modules", "driver_ubuntu_server", "driver_hold",
            "driver_no_gpu", "driver_blacklist_nouveau", "driver_persistenced", "driver_reboot",
            "driver_reboot_boot_time_command")


def debian_prefix(facts: Mapping, branch: str) -> str:
    """``nvidia-`` for the suite's own branch (or none asked), ``nvidia-tesla-<branch>-`` for another one."""
    suite = DEBIAN_SUITE_BRANCH.get(as_text(facts.get("distribution_major_version")), branch)
    return f"nvidia-tesla-{branch}-" if branch and branch != suite else "nvidia-"


def _packages(distribution: str, prefix: str, branch: str, flavour: str | None, server: bool) -> list[str]:
    """The driver packages of one flavour (the first is the driver itself)."""
    if distribution == "Debian":
        kernel = "open-kernel-dkms" if flavour == "open" else "kernel-dkms"
        # DKMS only recommends a compiler; Debian 13's headers bring gcc-14 but no "gcc", which NVIDIA's
        # kernel-module build calls.
        return [f"{prefix}driver", f"{prefix}{kernel}", f"{prefix}smi", "nvidia-persistenced", "gcc"]
    server_suffix = "-server" if server else ""
    open_suffix = "-open" if flavour == "open" else ""
    return [f"nvidia-driver-{branch}{server_suffix}{open_suffix}", f"nvidia-utils-{branch}{server_suffix}"]


def _candidates(distribution: str, prefix: str, branch: str) -> list[str]:
    """The driver packages of both flavours: read before the flavour is chosen."""
    if distribution == "Debian":
        return [f"{prefix}{p}" for p in ("driver", "kernel-dkms", "open-kernel-dkms", "smi")] + [
            "nvidia-persistenced", "gcc"]
    return [f"nvidia-driver-{branch}{s}" for s in ("", "-open", "-server", "-server-open")] + [
        f"nvidia-utils-{branch}", f"nvidia-utils-{branch}-server"]


def _headers(facts: Mapping, available: Any) -> tuple[str, str]:
    """(package, detail): the running kernel's headers when the sources have them, else the generic ones."""
    kernel = as_text(facts.get("kernel"))
    if available is None or as_bool(available):
        return f"linux-headers-{kernel}", ""
    arch = as_text(facts.get("architecture"))
    return (f"linux-headers-{DEBIAN_ARCH.get(arch, arch)}",
            f"no linux-headers-{kernel} in the package sources, so DKMS builds for the distribution kernel")


def _reboot(settings: Mapping) -> dict:
    """Whether the role may reboot the host itself (when the new module needs it), and why (not)."""
    connection = as_text(settings.get("ansible_connection")) or "ssh"
    host = as_text(settings.get("inventory_hostname"))
    if settings.get("driver_reboot") != "reboot":
        return {"allowed": False, "reason": "driver_reboot=report: a needed reboot is only reported"}
    if connection == "local" or host in _LOCAL_HOSTS:
        return {"allowed": False, "reason": "the control host (a local connection) is never rebooted"}
    if connection in _CONTAINER_CONNECTIONS and not as_text(settings.get("driver_reboot_boot_time_command")):
        return {"allowed": False, "reason": ("a container shares the host's boot_id: rebooted only with "
                                             "driver_reboot_boot_time_command")}
    return {"allowed": True, "reason": "driver_reboot=reboot"}


def driver_plan(facts: Any, settings: Any, packages: Any = None, headers_available: Any = None,
                host: str = "") -> dict:
    """What the driver role does on one host.

    ``facts``: the host's ansible_facts after gpu_facts (distribution, distribution_major_version, kernel,
    architecture, nvidia_*). ``settings``: the role's variables by name (``SETTINGS``, plus ``ansible_connection``
    and ``inventory_hostname`` for the reboot). ``packages``: the dpkg_packages result (packages, ready, held) once
    read, else None: before that only the loaded module and the GPUs decide. ``headers_available``: whether the
    package sources have the running kernel's headers (None: not asked yet).
    """
    if not isinstance(facts, Mapping):
        raise AnsibleFilterError(f"driver_plan expects a host's ansible_facts (a dict), got {type(facts).__name__}")
    if not isinstance(settings, Mapping):
        raise AnsibleFilterError(f"driver_plan expects the driver role's variables (a dict), got {type(settings).__name__}")
    missing = [name for name in SETTINGS if name not in settings]
    if missing:
        raise AnsibleFilterError(f"driver_plan: the settings lack {', '.join(missing)}")
    if packages is not None and not isinstance(packages, Mapping):
        raise AnsibleFilterError(f"driver_plan expects the dpkg_packages result (a dict) or none, got {packages!r}")
    host = host or as_text(settings.get("inventory_hostname"))
    distribution = as_text(facts.get("distribution"))
    branch = as_text(settings["driver_branch"])
    version = as_text(settings["driver_version"])
    no_gpu = settings["driver_no_gpu"]
    prefix = debian_prefix(facts, branch) if distribution == "Debian" else "nvidia-"
    open_packaged = distribution != "Debian" or prefix == "nvidia-"

    kernel = driver_kernel_modules(dict(facts), settings["driver_kernel_modules"],
                                   None if packages is None else packages.get("packages") or {},
                                   branch, host, open_packaged)
    has_gpu = any(d.get("gpu") for d in facts.get("nvidia_pci_devices") or [])
    loaded = as_text(facts.get("nvidia_driver_version") or "")
    satisfied = bool(loaded) and (not branch or loaded.split(".", maxsplit=1)[0] == branch) and (
        not version or loaded.startswith(version)) and not kernel["switch"]
    skipped_no_gpu = not has_gpu and no_gpu == "skip"
    if satisfied:
        status = "already_loaded"
        detail = f"driver {loaded} loaded ({facts.get('nvidia_kernel_module_flavour') or '?'} kernel module)"
    elif skipped_no_gpu:
        status, detail = "skipped_no_gpu", "no NVIDIA GPU in sysfs"
    else:
        status, detail = "pending", ("" if has_gpu else "no NVIDIA GPU in sysfs")
    flavour = kernel["flavour"] if not skipped_no_gpu else None

    candidates = _candidates(distribution, prefix, branch)
    versioned = [name for name in candidates if _VERSIONED.match(name)]
    version_wanted = version or branch
    versions = {name: version_wanted for name in versioned} if version_wanted else {}
    header_package, header_detail = _headers(facts, headers_available)
    driver_packages = _packages(distribution, prefix, branch, flavour, as_bool(settings["driver_ubuntu_server"]))
    wanted = driver_packages + [header_package]
    pin = f"={version_wanted}*" if version_wanted else ""
    hold = [name for name in driver_packages if name.startswith("nvidia")] if as_bool(settings["driver_hold"]) else []

    ready = set((packages or {}).get("ready") or [])
    held = set((packages or {}).get("held") or [])
    missing_packages = [name for name in wanted if name not in ready]
    install_needed = packages is not None and bool(missing_packages)
    allow_change_held = bool(kernel["switch"]) or bool(version_wanted)
    if packages is None:
        install_reason = "not read yet"
    elif install_needed:
        install_reason = (f"{', '.join(missing_packages)} missing or not of version {version_wanted}"
                          if version_wanted else f"{', '.join(missing_packages)} missing")
    else:
        install_reason = "every package installed" + (f" at {version_wanted}" if version_wanted else "")
    unheld = [name for name in hold if name not in held]

    result_detail = header_detail if header_detail and packages is not None else detail
    return {
        "status": status,
        "skip": satisfied or skipped_no_gpu,
        "has_gpu": has_gpu,
        "error": kernel["error"],
        "kernel_modules": kernel,
        "open_packaged": open_packaged,
        # The packages to read: both flavours and the headers, with the version they must have.
        "read": {"names": candidates + [header_package], "versions": versions},
        "packages": wanted,
        "driver_package": driver_packages[0],
        "version_wanted": version_wanted,
        "install": {
            "needed": install_needed,
            "names": [name + pin if name in versioned else name for name in wanted if name in versioned]
            + [name for name in wanted if name not in versioned],
            "allow_change_held": allow_change_held,
            "reason": install_reason,
            "allow_change_held_reason": (
                "the kernel-module flavour switches" if kernel["switch"] else
                f"version {version_wanted} asked for" if version_wanted else "nothing held is replaced"),
        },
        "hold": {
            "packages": hold,
            # Read (and hold) again after apt, or when a package is not held yet.
            "needed": bool(unheld),
            "reason": (f"{', '.join(unheld)} not held" if unheld else
                       "every driver package held" if hold else "driver_hold is false"),
        },
        "headers": {"name": header_package, "detail": header_detail},
        "configure": {
            "blacklist_nouveau": as_bool(settings["driver_blacklist_nouveau"]),
            "persistenced": as_bool(settings["driver_persistenced"]),
            # It can only run with the driver loaded.
            "persistenced_start": bool(facts.get("nvidia_driver_loaded")),
        },
        "reboot": _reboot(settings),
        # driver_result as far as the plan knows it.
        "result": {
            "status": status,
            "detail": result_detail,
            "reboot_required": False,
            "kernel_modules": flavour,
            "kernel_modules_reason": kernel["reason"] if not skipped_no_gpu else "",
            "packages": wanted if packages is not None else [],
        },
    }


def driver_outcome(plan: Any, facts: Any, installed_version: Any = "", boot: Any = None,
                   check_mode: Any = False) -> dict:
    """driver_result after the install: loaded, reboot required or not loaded (and why).

    ``plan`` is driver_plan's result after the packages were read; ``facts`` the host's facts; ``installed_version``
    the driver package's version now; ``boot`` driver_reboot_check's result (module_time, installed_since_boot,
    detail); ``check_mode`` true when nothing was installed for real: packages still to install then give
    ``would_install``.
    """
    if not isinstance(plan, Mapping) or "result" not in plan:
        raise AnsibleFilterError("driver_outcome expects driver_plan's result")
    result = dict(plan["result"])
    if as_bool(check_mode) and plan["install"]["needed"]:
        result["status"] = "would_install"
        return result
    version = as_text(installed_version)
    boot = boot or {}
    loaded_now = bool(facts.get("nvidia_driver_loaded")) and version.startswith(
        as_text(facts.get("nvidia_driver_version")) or "-") and (
        facts.get("nvidia_kernel_module_flavour") == plan["kernel_modules"]["flavour"])
    # No module file found where modules live: as before, a reboot.
    reboot = not loaded_now and (boot.get("module_time") is None or bool(boot.get("installed_since_boot")))
    result.update(
        status="installed_loaded" if loaded_now else "installed_reboot_required" if reboot else "installed_not_loaded",
        version=version,
        reboot_required=reboot,
        # Why a reboot would not load it.
        detail=result["detail"] if loaded_now or reboot else "; ".join(
            d for d in (result["detail"], as_text(boot.get("detail"))) if d),
    )
    return result


class FilterModule:
    def filters(self) -> dict:
        return {"driver_plan": driver_plan}
