# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private to k8sgpu.nvidia (filters driver_plan and driver_outcome of the driver role).

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
# NVIDIA's repository (driver_source=nvidia): its metapackages nvidia-open[-<branch>] and cuda-drivers[-<branch>],
# and its own name of the open DKMS package, nvidia-kernel-open-dkms.
_OPEN_PACKAGE = re.compile(r"^(nvidia-(tesla-\d+-)?open-kernel-dkms|nvidia-driver-\d+(-server)?-open|nvidia-open(-\d+)?|"
                           r"nvidia-kernel-open-dkms)$")
_PROPRIETARY_PACKAGE = re.compile(r"^(nvidia-(tesla-\d+-)?kernel-dkms|nvidia-driver-\d+(-server)?|cuda-drivers(-\d+)?)$")
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


# NVIDIA's CUDA network repository (driver_source=nvidia), as NVIDIA's Driver Installation Guide sets it up
# (docs.nvidia.com/datacenter/tesla/driver-installation-guide/: "Network Repository Installation" of the Debian and
# Ubuntu sections): https://developer.download.nvidia.com/compute/cuda/repos/<distro>/x86_64/, a flat repository
# ("Suites: /"), signed with the key the guide's cuda-keyring package installs. The key file of each directory and its
# fingerprint: 3bf863cc.pub, EB69 3B30 35CD 5710 E231 E123 A4B4 6996 3BF8 63CC ("cudatools <cudatools@nvidia.com>",
# the key of the guide's cuda-keyring 1.1, key id A4B469963BF863CC as NVIDIA's cuda-repo-management SIGNATURES.md
# shows it); Debian 13's directory is signed with a newer key, 8793F200.pub,
# 0218 2E60 104F CDC2 6EAE 1B85 97A5 D4CB 8793 F200 (Debian 13's apt refuses the SHA-1 self-signature of the older
# key). Read from public copies of those files (no NVIDIA server is reachable from the lab): a site checks them
# against its own copy and sets driver_nvidia_repo_key_fingerprint where they differ.
NVIDIA_REPOSITORIES = {("Debian", "12"): "debian12", ("Debian", "13"): "debian13",
                       ("Ubuntu", "22.04"): "ubuntu2204", ("Ubuntu", "24.04"): "ubuntu2404"}
NVIDIA_REPOSITORY_ARCH = {"x86_64": "x86_64"}
NVIDIA_KEYS = {"debian13": ("8793F200.pub", "02182E60104FCDC26EAE1B8597A5D4CB8793F200")}
NVIDIA_KEY_DEFAULT = ("3bf863cc.pub", "EB693B3035CD5710E231E123A4B469963BF863CC")
# Ubuntu's packages of NVIDIA's repository carry the branch in their names up to 580 (nvidia-open-580,
# cuda-drivers-580, nvidia-fabricmanager-580); from 590 they do not (the guide's "Ubuntu 590 and later packages").
# Debian's never do: the branch is pinned by version (apt preferences, the guide's "Version locking").
UBUNTU_UNBRANCHED_FROM = 590


def nvidia_repository(facts: Mapping) -> dict | None:
    """NVIDIA's repository directory for the host (``name``, ``arch``, ``key_file``, ``fingerprint``), or None where
    NVIDIA has none the role supports (another distribution, release or architecture)."""
    name = NVIDIA_REPOSITORIES.get((as_text(facts.get("distribution")), as_text(
        facts.get("distribution_major_version") if facts.get("distribution") == "Debian"
        else facts.get("distribution_version"))))
    arch = NVIDIA_REPOSITORY_ARCH.get(as_text(facts.get("architecture")))
    if not name or not arch:
        return None
    key_file, fingerprint = NVIDIA_KEYS.get(name, NVIDIA_KEY_DEFAULT)
    return {"name": name, "arch": arch, "key_file": key_file, "fingerprint": fingerprint}


def _branched(distribution: str, branch: str) -> bool:
    """Whether NVIDIA's package names carry the branch (Ubuntu before 590)."""
    return distribution == "Ubuntu" and branch.isdigit() and int(branch) < UBUNTU_UNBRANCHED_FROM


def nvidia_packages(distribution: str, branch: str, flavour: str | None) -> list[str]:
    """NVIDIA's repository: the guide's metapackage of the flavour (nvidia-open for the open kernel modules,
    cuda-drivers for the proprietary ones; Ubuntu before 590 with -<branch>) and, on Debian, gcc (as for Debian's)."""
    suffix = f"-{branch}" if _branched(distribution, branch) else ""
    meta = f"nvidia-open{suffix}" if flavour == "open" else f"cuda-drivers{suffix}"
    return [meta, "gcc"] if distribution == "Debian" else [meta]


def fabric_manager_package(distribution: str, branch: str) -> str:
    """nvidia-fabricmanager (Ubuntu before 590: nvidia-fabricmanager-<branch>), from NVIDIA's repository."""
    return f"nvidia-fabricmanager-{branch}" if _branched(distribution, branch) else "nvidia-fabricmanager"


def upstream_version(version: Any) -> str:
    """The driver's own version of a package version: 1:535.261.03-1~deb12u1 -> 535.261.03."""
    text = as_text(version)
    text = text.split(":", 1)[1] if re.match(r"^\d+:", text) else text
    return text.rsplit("-", 1)[0] if "-" in text else text


def source_error(facts: Mapping, settings: Mapping, host: str, has_gpu: bool) -> str:
    """Why driver_source cannot work on this host (before anything is touched), or ""."""
    source = as_text(settings.get("driver_source") or "distribution")
    switches = [s for s in facts.get("nvidia_nvswitches") or [] if isinstance(s, Mapping)]
    if source == "nvidia":
        if nvidia_repository(facts) is None:
            return (f"{host}: driver_source=nvidia supports NVIDIA's repositories for Debian 12 and 13 and Ubuntu "
                    f"22.04 and 24.04 on x86_64; this host runs {facts.get('distribution')} "
                    f"{facts.get('distribution_version')} on {facts.get('architecture')}. Set driver_source="
                    "distribution for it.")
        if not as_text(settings.get("driver_branch")):
            return (f"{host}: driver_source=nvidia needs driver_branch (for example \"580\"): NVIDIA's repository has "
                    "every branch, and the role pins the one asked for.")
        return ""
    if switches and has_gpu:
        found = ", ".join(f"{s.get('pci_bus_id')} ({s.get('generation') or s.get('device_id')})" for s in switches)
        return (f"{host}: {len(switches)} NVSwitch(es) on the PCI bus ({found}): the GPUs of an NVSwitch system run "
                "no CUDA work until nvidia-fabricmanager of exactly the driver's version registers them, and only "
                "NVIDIA's repository has it. Set driver_source=nvidia and driver_branch for this host.")
    return ""


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
    nvidia = as_text(settings.get("driver_source") or "distribution") == "nvidia"
    prefix = debian_prefix(facts, branch) if distribution == "Debian" and not nvidia else "nvidia-"
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

    if nvidia:
        candidates = list(dict.fromkeys(nvidia_packages(distribution, branch, "open")
                                        + nvidia_packages(distribution, branch, "proprietary")))
        versioned = [name for name in candidates if name != "gcc"]
    else:
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
    driver_packages = (nvidia_packages(distribution, branch, flavour) if nvidia else
                       _packages(distribution, prefix, branch, flavour, as_bool(settings["driver_ubuntu_server"])))
    wanted = driver_packages + [header_package] + header_metas
    pin = f"={version_wanted}*" if version_wanted else ""
    hold = [name for name in driver_packages if name.startswith(("nvidia", "cuda-drivers"))] if as_bool(
        settings["driver_hold"]) else []
    # NVSwitch systems: nvidia-fabricmanager of exactly the driver's version, installed after the driver (filter
    # driver_fabric_manager), held with it; a distribution source was refused above (source_error).
    switches = facts.get("nvidia_nvswitches") or []
    fabric = {"needed": bool(switches) and nvidia and has_gpu and not skipped_no_gpu,
              "package": fabric_manager_package(distribution, branch), "nvswitches": len(switches)}

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
    repository = nvidia_repository(facts) if nvidia else None
    return {
        "status": status,
        # A loaded driver is kept; on an NVSwitch host the steps still run (reads, no apt) for the fabric manager.
        "skip": (satisfied and not fabric["needed"]) or skipped_no_gpu,
        "has_gpu": has_gpu,
        "error": ("" if skipped_no_gpu else source_error(facts, settings, host, has_gpu)) or kernel["error"],
        "source": "nvidia" if nvidia else "distribution",
        "repository": repository,
        "fabric_manager": fabric,
        "kernel_modules": kernel,
        "open_packaged": open_packaged,
        # The packages to read: both flavours and the headers, with the version they must have.
        "read": {"names": candidates + [header_package] + [n for n in kernel_metas if n != header_package]
                 + [n for n in kernel_metas.values() if n != header_package]
                 + ([fabric["package"]] if fabric["needed"] else []), "versions": versions},
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
    if plan["status"] == "already_loaded" and not plan["install"]["needed"]:
        # An NVSwitch host's steps ran for its fabric manager: the driver was kept.
        result["version"] = version
        return result
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


def fabric_manager_step(plan: Any, packages: Any, installed_version: Any = "", check_mode: Any = False,
                        hold: Any = True) -> dict:
    """nvidia-fabricmanager on an NVSwitch host, after the driver's install: of exactly the driver's version.

    ``plan`` is driver_plan's result; ``packages`` the dpkg_packages read before the install (it holds the fabric
    manager's package); ``installed_version`` the driver package's version now (empty in check mode before the
    install: then the version asked for). Returns ``install`` (apt must run: missing, or of another version than the
    driver), ``name`` (apt's name=version), ``version`` (the driver's own version, e.g. 580.95.05), ``pin`` (the
    version of its apt preferences record: apt takes the first record that matches, so without one of its own the
    branch pin's would choose the newest of the branch), ``hold_needed``, ``reason``.
    """
    if not isinstance(plan, Mapping) or "fabric_manager" not in plan:
        raise DriverPlanError("driver_fabric_manager expects driver_plan's result")
    fabric = plan["fabric_manager"]
    name = fabric["package"]
    if not fabric["needed"]:
        return {"install": False, "name": name, "package": name, "version": "", "pin": "", "hold_needed": False,
                "reason": "no NVSwitch, or driver_source=distribution"}
    info = ((packages or {}).get("packages") or {}).get(name) or {}
    held = set((packages or {}).get("held") or [])
    driver = upstream_version(installed_version)
    have = upstream_version(info.get("version")) if info.get("installed") else ""
    if driver:
        install = have != driver
        pin = f"{driver}-*"
        apt_name = f"{name}={pin}"
        reason = (f"{name} {have or 'not installed'}, the driver {driver}" if install
                  else f"{name} {have}, the driver's version")
    else:
        # Check mode before the driver's install: the version asked for.
        wanted = as_text(plan.get("version_wanted"))
        install = not info.get("installed") or not have.startswith(wanted)
        pin = f"{wanted}*"
        apt_name = f"{name}={pin}"
        reason = f"{name} of {wanted} with the driver (not installed yet)"
    return {"install": install, "name": apt_name, "package": name, "version": driver, "pin": pin,
            "hold_needed": as_bool(hold) and (install or name not in held), "reason": reason}


def fabric_manager_service(plan: Any, facts: Any, result: Any, changed: Any = False) -> dict:
    """What systemd does with nvidia-fabricmanager after the install: ``state`` V(restarted) when the driver or the
    fabric manager changed in this run and the loaded module is the installed driver, V(started) when it is and
    nothing changed, None (enabled only: it starts at the next boot, with the new module) while the loaded module is
    another version or none; ``reason``."""
    if not isinstance(plan, Mapping) or "fabric_manager" not in plan:
        raise DriverPlanError("driver_fabric_manager_service expects driver_plan's result")
    result = result or {}
    loaded = as_text((facts or {}).get("nvidia_driver_version")) if (facts or {}).get("nvidia_driver_loaded") else ""
    installed = upstream_version(result.get("version")) or loaded
    if not loaded or loaded != installed:
        return {"state": None, "reason": (
            f"enabled; the loaded module is {loaded or 'none'}, not the installed driver {installed or '?'}: it "
            "starts at the next boot (a fabric manager of another version than the loaded module stops at once)")}
    if as_bool(changed) and not result.get("rebooted"):
        return {"state": "restarted", "reason": f"the driver or the fabric manager changed; driver {loaded} loaded"}
    return {"state": "started", "reason": f"driver {loaded} loaded"}
