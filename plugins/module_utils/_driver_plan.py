# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private to k8sgpu.nvidia (filters driver_plan, driver_outcome and driver_kernel_modules of the driver role).

The driver role's decisions for one host, in one place.

``driver_plan`` takes the host's facts (after gpu_facts), the role's variables and what the tasks have read so far
(the headers probe, the installed packages) and says what to install, hold, configure and whether a reboot may be
done, each with the reason. ``driver_outcome`` says, after the install, what the role reports (loaded, reboot
required, not loaded and why). The role's tasks only carry these out.

Choose the NVIDIA kernel-module flavour (open or proprietary) for a host.

NVIDIA's open GPU kernel modules run on Turing and later GPUs only. The
"Compatible GPUs" table of NVIDIA's open-gpu-kernel-modules README ("can be
used on any Turing or later GPU") starts at PCI device id 0x1E02 (TITAN RTX);
every Volta, Pascal and older device id is below 0x1E00 (V100 0x1DB4,
P100 0x15F8), every Turing and later one at or above (T4 0x1EB8, A100 0x20B0,
H100 0x2330). Turing is also compute capability 7.5.
"""
from __future__ import annotations

import re
from typing import Any, Mapping

from ansible_collections.k8sgpu.nvidia.plugins.module_utils._driver_kernels import (
    headers_metapackages, kernel_metapackages)
from ansible_collections.k8sgpu.nvidia.plugins.module_utils._plan_values import as_bool, as_text


class DriverPlanError(ValueError):
    """Facts or settings the driver role cannot plan with, with a message naming them."""


REQUESTS = ("auto", "open", "proprietary")
FIRST_TURING_DEVICE_ID = 0x1E00
FIRST_TURING_COMPUTE_CAPABILITY = (7, 5)

# Packages whose installation tells the flavour: Debian's DKMS packages (of the
# suite's own driver, and of its Tesla branches: nvidia-tesla-<branch>-kernel-dkms)
# and Ubuntu's nvidia-driver-<branch>[-server][-open] metapackages.
_OPEN_PACKAGE = re.compile(r"^(nvidia-(tesla-\d+-)?open-kernel-dkms|nvidia-driver-\d+(-server)?-open)$")
_PROPRIETARY_PACKAGE = re.compile(r"^(nvidia-(tesla-\d+-)?kernel-dkms|nvidia-driver-\d+(-server)?)$")
_BRANCH = re.compile(r"^(?:\d+:)?(\d+)\.")


def _device_id(text: Any) -> int | None:
    try:
        return int(str(text), 16)
    except ValueError:
        return None


def _compute_capability(text: Any) -> tuple[int, int] | None:
    match = re.match(r"^(\d+)\.(\d+)$", str(text or ""))
    return (int(match.group(1)), int(match.group(2))) if match else None


def older_than_turing(facts: dict) -> tuple[list[str], int]:
    """Return (descriptions of the GPUs the open modules cannot drive, number of GPUs seen).

    The GPUs are the display/3D functions of ``nvidia_pci_devices`` (sysfs, always
    there), judged by PCI device id. Only where sysfs shows none (no sysfs in a
    container, say) are ``nvidia_gpus`` from nvidia-smi judged by compute capability.
    """
    old: list[str] = []
    pci_gpus = [d for d in facts.get("nvidia_pci_devices") or [] if d.get("gpu")]
    for dev in pci_gpus:
        device = _device_id(dev.get("device_id"))
        if device is None or device < FIRST_TURING_DEVICE_ID:
            old.append(f"{dev.get('pci_bus_id')} (PCI device id {dev.get('device_id')})")
    if pci_gpus:
        return old, len(pci_gpus)
    smi_gpus = facts.get("nvidia_gpus") or []
    for gpu in smi_gpus:
        cap = _compute_capability(gpu.get("compute_capability"))
        if cap is None or cap < FIRST_TURING_COMPUTE_CAPABILITY:
            old.append(f"{gpu.get('pci_bus_id')} ({gpu.get('name')}, compute capability "
                       f"{gpu.get('compute_capability') or 'unknown'})")
    return old, len(smi_gpus)


def installed_flavour(packages: dict | None, branch: str = "") -> tuple[str | None, str]:
    """Return (flavour, package and version) of the installed driver package of ``branch`` (any when empty).

    ``packages`` maps package names to dicts with ``installed`` (bool) and ``version``,
    as the ``packages`` of M(k8sgpu.nvidia.dpkg_packages). Both flavours installed, or
    neither, gives (None, "").
    """
    found: dict[str, str] = {}
    for name, info in sorted((packages or {}).items()):
        if not isinstance(info, dict) or not info.get("installed"):
            continue
        match = _BRANCH.match(str(info.get("version") or ""))
        if branch and (not match or match.group(1) != str(branch)):
            continue
        for flavour, pattern in (("open", _OPEN_PACKAGE), ("proprietary", _PROPRIETARY_PACKAGE)):
            if pattern.match(name):
                found.setdefault(flavour, f"{name} {info.get('version')}")
    if len(found) != 1:
        return None, ""
    flavour, what = next(iter(found.items()))
    return flavour, what


def driver_kernel_modules(facts: dict, requested: str = "auto", packages: dict | None = None,
                          branch: Any = "", host: str = "", open_packaged: bool = True) -> dict:
    """Decide the kernel-module flavour for one host.

    ``facts`` is the host's ansible_facts after M(k8sgpu.nvidia.gpu_facts);
    ``requested`` is driver_kernel_modules; ``packages`` the installed packages
    (None where they were not read: then only the loaded module counts);
    ``branch`` driver_branch; ``open_packaged`` false where the branch's packages have no open kernel module
    (Debian's Tesla branches): auto then takes the proprietary one and open fails. Returns ``flavour``, ``reason``, ``switch`` (a loaded or
    installed flavour is replaced: only when the user asks for that flavour) and
    ``error`` (non-empty when the request cannot work on this host).
    """
    if not isinstance(facts, dict):
        raise DriverPlanError(f"driver_kernel_modules expects a host's ansible_facts (a dict), got {type(facts).__name__}")
    if requested not in REQUESTS:
        raise DriverPlanError(f"{host}: driver_kernel_modules must be one of {', '.join(REQUESTS)}, not {requested!r}")
    branch = str(branch or "")
    loaded = facts.get("nvidia_kernel_module_flavour") if facts.get("nvidia_driver_loaded") else None
    on_disk, on_disk_what = installed_flavour(packages, branch)
    old, seen = older_than_turing(facts)
    # What is there now: the loaded module first, else the installed package of the branch.
    current, current_what = (loaded, f"the loaded {loaded} kernel module") if loaded else (
        (on_disk, f"the installed {on_disk_what}") if on_disk else (None, ""))
    result = {"flavour": None, "reason": "", "switch": False, "error": ""}

    if requested == "open" and old:
        result["error"] = (
            f"{host}: driver_kernel_modules=open, but GPU {', '.join(old)} is older than Turing, and NVIDIA's "
            "open kernel modules support Turing (PCI device id 0x1e00 and up, compute capability 7.5) and later "
            "only. Set driver_kernel_modules to auto (keeps what is there, else chooses by GPU) or proprietary "
            "for this host.")
        return result
    if requested == "open" and not open_packaged:
        result["error"] = (
            f"{host}: driver_kernel_modules=open, but the packages of driver branch {branch} have no open kernel "
            "module (Debian packages its Tesla branches, nvidia-tesla-<branch>-*, with the proprietary one only). "
            "Set driver_kernel_modules to auto or proprietary, or driver_branch to the suite's own branch.")
        return result
    if requested != "auto":
        result["flavour"] = requested
        if current and current != requested:
            result["switch"] = True
            result["reason"] = (f"driver_kernel_modules={requested} asks to switch from {current_what} "
                                f"to {requested} (the new module loads after a reboot)")
        else:
            result["reason"] = f"driver_kernel_modules={requested}"
        return result
    if current == "open" and old:
        # Left by an earlier run or by hand: these modules cannot drive the GPU, there is nothing to keep.
        result.update(flavour="proprietary", switch=True, reason=(
            f"auto: replaces {current_what}, which cannot drive GPU {', '.join(old)} (older than Turing), "
            "with the proprietary one"))
    elif current == "open" and not open_packaged:
        result.update(flavour="proprietary", switch=True, reason=(
            f"auto: replaces {current_what}: the packages of driver branch {branch} have the proprietary kernel "
            "module only"))
    elif current:
        result["flavour"] = current
        result["reason"] = f"auto: keeps {current_what}"
    elif not open_packaged:
        result["flavour"] = "proprietary"
        result["reason"] = (f"auto: new install; the packages of driver branch {branch} have the proprietary kernel "
                            "module only")
    elif old:
        result["flavour"] = "proprietary"
        result["reason"] = (f"auto: new install; GPU {', '.join(old)} is older than Turing, which the open "
                            "kernel modules do not support")
    elif seen:
        result["flavour"] = "open"
        result["reason"] = f"auto: new install; every GPU ({seen}) is Turing or later, where NVIDIA recommends the open modules"
    else:
        result["flavour"] = "open"
        result["reason"] = ("auto: new install without a GPU in sysfs (driver_no_gpu=install): open, NVIDIA's "
                            "choice for Turing and later; set driver_kernel_modules=proprietary for older GPUs")
    return result


# Debian packages its own driver branch as nvidia-driver (Debian 12: 535, 13: 550) and other branches for
# data-centre GPUs as nvidia-tesla-<branch>-* (Debian 12: 470, 535; Debian 13: 535, whose 550 does not build for
# its 6.12 kernel), with the proprietary kernel module only.
DEBIAN_SUITE_BRANCH = {"12": "535", "13": "550"}
DEBIAN_ARCH = {"x86_64": "amd64", "aarch64": "arm64"}
# Packages built from the driver's source carry its version.
_VERSIONED = re.compile(r"^nvidia-(tesla-[0-9]+-)?(driver|kernel-dkms|open-kernel-dkms|smi|utils)")
_CONTAINER_CONNECTIONS = ("community.docker.docker", "docker")
_LOCAL_HOSTS = ("localhost", "127.0.0.1")

# Packages of the driver's own families (Debian's and Ubuntu's), less the container toolkit's: those a stopped run
# of another branch may have left unfinished. Their version's first component is the driver branch.
_DRIVER_FAMILY = re.compile(r"^(nvidia-|libnvidia-|libcuda1|libcudadebugger1|libnvcuvid1|libnvoptix1|libgl1-nvidia|"
                            r"libegl-nvidia|libgles-nvidia|libglx-nvidia|xserver-xorg-video-nvidia|firmware-nvidia-gsp|"
                            r"linux-modules-nvidia-|linux-objects-nvidia-|linux-signatures-nvidia-)")
_NOT_DRIVER = re.compile(r"^(nvidia-container|libnvidia-container|nvidia-docker)")
_BRANCH_OF_VERSION = re.compile(r"^(?:\d+:)?(\d{3,})\.")


def other_branch_unfinished(unfinished: Mapping, branch: str, keep: Any = ()) -> list[str]:
    """The unfinished driver packages (dpkg_packages' ``unfinished``) of a driver branch other than ``branch``.

    A run stopped while installing another branch leaves them unpacked or half-configured; finishing them
    (``dpkg --configure -a``) would build that branch's kernel module, and apt would refuse or mix the branches.
    Packages in ``keep`` (the run's own) never count; without a known ``branch`` nothing does.
    """
    if not branch:
        return []
    keep = set(keep)
    found = []
    for name, info in sorted((unfinished or {}).items()):
        if name in keep or not _DRIVER_FAMILY.match(name) or _NOT_DRIVER.match(name):
            continue
        match = _BRANCH_OF_VERSION.match(as_text((info or {}).get("version")))
        if match and match.group(1) != branch:
            found.append(name)
    return found


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
        raise DriverPlanError(f"driver_plan expects a host's ansible_facts (a dict), got {type(facts).__name__}")
    if not isinstance(settings, Mapping):
        raise DriverPlanError(f"driver_plan expects the driver role's variables (a dict), got {type(settings).__name__}")
    missing = [name for name in SETTINGS if name not in settings]
    if missing:
        raise DriverPlanError(f"driver_plan: the settings lack {', '.join(missing)}")
    if packages is not None and not isinstance(packages, Mapping):
        raise DriverPlanError(f"driver_plan expects the dpkg_packages result (a dict) or none, got {packages!r}")
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
    # The headers metapackage of each installed kernel metapackage (linux-image-amd64 -> linux-headers-amd64): the
    # next kernel the site's patching installs comes with its headers, and DKMS builds the module for it.
    kernel_metas = (kernel_metapackages(distribution, as_text(facts.get("distribution_version")),
                                        as_text(facts.get("architecture")))
                    if as_bool(settings.get("driver_kernel_headers", True)) else {})
    header_metas = [name for name in headers_metapackages(
        distribution, as_text(facts.get("distribution_version")), as_text(facts.get("architecture")),
        (packages or {}).get("packages")) if kernel_metas and name != header_package]
    driver_packages = _packages(distribution, prefix, branch, flavour, as_bool(settings["driver_ubuntu_server"]))
    wanted = driver_packages + [header_package] + header_metas
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

    # What a stopped run left: another branch's unfinished packages removed; before apt, the rest finished.
    run_branch = branch or (DEBIAN_SUITE_BRANCH.get(as_text(facts.get("distribution_major_version")), "")
                            if distribution == "Debian" else "")
    unfinished = (packages or {}).get("unfinished") or {}
    remove = other_branch_unfinished(unfinished, run_branch, keep=candidates + [header_package] + header_metas)
    left = [name for name in unfinished if name not in remove]
    finish = install_needed and (bool(left) or bool((packages or {}).get("interrupted")))

    result_detail = header_detail if header_detail and packages is not None else detail
    return {
        "status": status,
        "skip": satisfied or skipped_no_gpu,
        "has_gpu": has_gpu,
        "error": kernel["error"],
        "kernel_modules": kernel,
        "open_packaged": open_packaged,
        # The packages to read: both flavours and the headers, with the version they must have.
        "read": {"names": candidates + [header_package] + [n for n in kernel_metas if n != header_package]
                 + [n for n in kernel_metas.values() if n != header_package], "versions": versions},
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
        "headers": {"name": header_package, "detail": header_detail, "metapackages": header_metas},
        "repair": {
            "needed": bool(remove) or finish,
            "remove": remove,
            "configure": finish,
            "reason": "; ".join(filter(None, [
                f"{', '.join(remove)} of another branch than {run_branch} left unfinished by a stopped run" if remove else "",
                (f"dpkg has unfinished work ({', '.join(left[:8])}{' ...' if len(left) > 8 else ''}"
                 f"{'; journal of an interrupted run' if (packages or {}).get('interrupted') else ''}) and apt must run")
                if finish else ""])) or "nothing unfinished",
        },
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
        raise DriverPlanError("driver_outcome expects driver_plan's result")
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
