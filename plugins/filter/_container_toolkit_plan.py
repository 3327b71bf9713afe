# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The container_toolkit role's decisions for one host, in one place.

``container_toolkit_plan`` takes the host's facts, the role's variables and what the tasks have read so far (the
installed runtime units, the installed packages, the configuration changes) and says which runtimes to configure,
what to install and hold, the NVIDIA runtime's config.toml settings, the CDI spec, which runtimes to restart and
whether the Docker GPU container check runs, each with the reason. The role's tasks only carry it out.
"""
from __future__ import annotations

# The documentation of the filter this file is named after is here, not in a .yml beside it: Galaxy lists
# every filter .py and every documentation file, so a same-named pair showed the filter twice.
DOCUMENTATION = r"""
name: _container_toolkit_plan
version_added: 1.0.0
short_description: >-
  Private to the container_toolkit role, not API: the container_toolkit role's decisions for one host (runtimes,
  packages, config.toml, restarts, check)
description:
  - Used by the C(container_toolkit) role, whose tasks only carry its answer out. Called with what the tasks have
    read so far - the runtimes' systemd units, then the installed packages, then the configuration files changed.
  - Fails naming the keys when C(container_toolkit_config_settings) sets a key that undoes a defence (the isolation
    keys, C(nvidia-container-cli.ldconfig) other than the toolkit's C(@/sbin/ldconfig), C(nvidia-container-cli.root)
    and C(.path), C(nvidia-container-runtime.runtimes), hook and binary paths) unless
    C(container_toolkit_allow_unsafe_settings) is true; then C(config.unsafe_keys) names them for the role's warning.
  - Says which runtimes to configure (those asked for, else those whose unit is installed); the packages to read,
    install (apt names with the version pin; the legacy C(nvidia-docker2) unpinned) and hold; the NVIDIA runtime's
    C(config.toml) settings for GPU isolation (the site's own settings win); whether to generate the CDI spec; which
    runtimes to restart (changed in this run, or found running an older configuration than their files - a run
    stopped between the write and the restart; unit installed, C(container_toolkit_restart)) and which were left on
    their old configuration; whether the Docker GPU container check runs, or why not.
positional: _input, settings
options:
  _input:
    description: The host's C(ansible_facts) (C(architecture); C(nvidia_driver_version) from M(k8sgpu.nvidia.gpu_facts)).
    type: dict
    required: true
  settings:
    description: The role's variables by name (C(container_toolkit_packages), C(container_toolkit_version),
      C(container_toolkit_nvidia_docker2), C(container_toolkit_hold), C(container_toolkit_runtimes),
      C(container_toolkit_restart), C(container_toolkit_isolate_gpus), C(container_toolkit_config_settings),
      C(container_toolkit_cdi_spec), C(container_toolkit_gpu_check); C(container_toolkit_allow_unsafe_settings),
      false when missing).
    type: dict
    required: true
  units:
    description: The lines of C(systemctl list-unit-files --no-legend) for C(docker.service), C(containerd.service), C(crio.service).
    type: list
    elements: str
  packages:
    description: The result of M(k8sgpu.nvidia.dpkg_packages) for C(read.names); null before they were read.
    type: dict
  changes:
    description: The configuration files changed in this run per runtime (what a restart must restore); null before.
    type: dict
  loaded:
    description:
      - Per runtime, the C(loaded) result of M(k8sgpu.nvidia.docker_daemon_config) or
        M(k8sgpu.nvidia.container_runtime_config) (whether its daemon started after its files' last change); null
        before they ran. A runtime whose C(stale) is true is restarted as one whose files changed.
    type: dict
    version_added: 2.0.0
  driver_loaded:
    description: Whether an NVIDIA driver is loaded; null takes it from the facts.
    type: bool
  check_mode:
    description: Whether the role runs in check mode.
    type: bool
    default: false
"""

EXAMPLES = r"""
_container_toolkit_plan: >-
  {{ ansible_facts | k8sgpu.nvidia._container_toolkit_plan(_container_toolkit_settings, units=__units.stdout_lines,
     packages=__dpkg) }}
# {"runtimes": ["containerd", "docker"], "install": {"needed": true, "names": ["nvidia-container-toolkit=1.20.1-*", ...]},
#  "restart": [], "gpu_check": {"run": false, "probe_dockerd": false, "skip_reason": "no NVIDIA driver loaded"}, ...}
"""

RETURN = r"""
_value:
  description:
    - C(runtimes_installed), C(runtimes), C(runtimes_reason), C(ctk_runtimes) (configured through nvidia-ctk),
      C(driver_loaded), C(arch), C(packages), C(read) (C(names), C(versions)), C(install) (C(needed), C(names),
      C(allow_change_held), C(reason)), C(hold) (C(packages), C(needed), C(reason)), C(config) (C(settings),
      C(isolation), C(unsafe_keys)), C(cdi) (C(wanted), C(skip_reason)), C(restart), C(not_restarted), C(stale) (per
      runtime running an older configuration than its files, with C(unit), C(files), C(started)), C(restart_stale) (those
      of C(restart) restarted only for that), C(pending) (a line per
      runtime left on an older configuration than its files by this run, naming the unit and the files; in check
      mode, the stale ones), C(gpu_check) (C(run), C(probe_dockerd), C(skip_reason)).
  type: dict
"""

from typing import Any, Mapping

from ansible.errors import AnsibleFilterError

from ansible_collections.k8sgpu.nvidia.plugins.module_utils._plan_values import as_bool, as_text

# containerd before CRI-O and Docker (dockerd uses containerd).
RUNTIMES = ("containerd", "crio", "docker")
UNITS = {"docker": "docker.service", "containerd": "containerd.service", "crio": "crio.service"}
ARCH = {"x86_64": "amd64", "aarch64": "arm64", "ppc64le": "ppc64el"}
ENVVAR_KEY = "accept-nvidia-visible-devices-envvar-when-unprivileged"
VOLUME_MOUNTS_KEY = "accept-nvidia-visible-devices-as-volume-mounts"
LEGACY_PACKAGE = "nvidia-docker2"

SETTINGS = ("container_toolkit_packages", "container_toolkit_version", "container_toolkit_nvidia_docker2",
            "container_toolkit_hold", "container_toolkit_runtimes", "container_toolkit_restart",
            "container_toolkit_isolate_gpus", "container_toolkit_config_settings", "container_toolkit_cdi_spec",
            "container_toolkit_gpu_check")


def installed_runtimes(units: Any) -> list[str]:
    """The runtimes whose systemd unit is installed, from ``systemctl list-unit-files --no-legend`` lines."""
    found = []
    for line in units or []:
        words = str(line).split()
        name = words[0].removesuffix(".service") if words else ""
        if name in RUNTIMES and name not in found:
            found.append(name)
    return found


# The toolkit's own ldconfig values (its default, and Ubuntu's/Debian's ldconfig.real wrapper).
SAFE_LDCONFIG = ("@/sbin/ldconfig", "@/sbin/ldconfig.real", "/sbin/ldconfig", "/sbin/ldconfig.real")
# config.toml keys that undo a defence: GPU isolation, or the binaries and root the runtime runs as root.
UNSAFE_KEYS = (ENVVAR_KEY, VOLUME_MOUNTS_KEY, "accept-nvidia-visible-devices-envvar-as-volume-mounts",
               "nvidia-container-cli.root", "nvidia-container-cli.path", "nvidia-container-cli.ldconfig",
               "nvidia-container-cli.no-pivot", "nvidia-container-cli.no-cgroups", "nvidia-container-cli.user",
               "nvidia-container-runtime.runtimes", "nvidia-container-runtime.modes.csv.mount-spec-path",
               "nvidia-container-runtime-hook.path", "nvidia-ctk.path", "nvidia-container-runtime.modes.cdi.spec-dirs")


def unsafe_keys(config_settings: Any) -> list[str]:
    """The keys of container_toolkit_config_settings that undo a defence (UNSAFE_KEYS, any key ending in .path or
    holding "hook", the isolation keys under any prefix; nvidia-container-cli.ldconfig unless the toolkit's own)."""
    out = []
    for key, value in (config_settings or {}).items():
        name = str(key).strip().lower()
        if name == "nvidia-container-cli.ldconfig" and str(value).strip() in SAFE_LDCONFIG:
            continue
        if (name in UNSAFE_KEYS or name.endswith(".path") or "hook" in name
                or name.rsplit(".", 1)[-1].startswith("accept-nvidia-visible-devices")):
            out.append(str(key))
    return sorted(out)


def _config_settings(settings: Mapping) -> dict:
    """config.toml keys (nvidia-ctk config --set) for GPU isolation; the site's own settings win.

    Volume-mount requests stay accepted without isolation, so the device plugin's volume-mounts strategy still works.
    The site's keys that undo a defence (unsafe_keys) are refused unless container_toolkit_allow_unsafe_settings.
    """
    wanted = {ENVVAR_KEY: not as_bool(settings["container_toolkit_isolate_gpus"]), VOLUME_MOUNTS_KEY: True}
    own = settings.get("container_toolkit_config_settings") or {}
    if not isinstance(own, Mapping):
        raise AnsibleFilterError("container_toolkit_config_settings must be a mapping of config.toml keys to values")
    unsafe = unsafe_keys(own)
    if unsafe and not as_bool(settings.get("container_toolkit_allow_unsafe_settings", False)):
        raise AnsibleFilterError(
            "container_toolkit_config_settings: %s would undo a defence (GPU isolation, or the binaries and root the "
            "NVIDIA runtime runs as root) and is refused; nothing was changed. Use container_toolkit_isolate_gpus for "
            "isolation, leave these keys to the toolkit, or, only where whoever sets these variables may be root on "
            "the GPU hosts, set container_toolkit_allow_unsafe_settings: true (UNSAFE)." % ", ".join(unsafe))
    wanted.update(own)
    return wanted


def _gpu_check(settings: Mapping, runtimes: list[str], installed: list[str], not_restarted: list[str],
               driver_loaded: bool, check_mode: bool) -> dict:
    """Whether the Docker GPU container check runs; probe_dockerd: first ask a daemon without a unit."""
    if check_mode:
        reason = "check mode"
    elif not driver_loaded:
        reason = "no NVIDIA driver loaded"
    elif not as_bool(settings["container_toolkit_gpu_check"]):
        reason = "disabled"
    elif "docker" not in runtimes:
        reason = "Docker not configured"
    elif "docker" in not_restarted:
        reason = "Docker not restarted: restart it to load the nvidia runtime"
    elif "docker" in installed:
        return {"run": True, "probe_dockerd": False, "skip_reason": ""}
    else:
        # No docker.service: a dockerd may still answer (another init); the check runs when it does.
        return {"run": False, "probe_dockerd": True,
                "skip_reason": "no docker.service and no Docker daemon answering"}
    return {"run": False, "probe_dockerd": False, "skip_reason": reason}


def _stale(loaded: Any) -> dict:
    """The runtimes whose daemon runs an older configuration than its files, from the modules' ``loaded`` results."""
    if loaded is not None and not isinstance(loaded, Mapping):
        raise AnsibleFilterError(f"container_toolkit_plan expects the loaded state per runtime (a dict) or none, got {loaded!r}")
    out = {}
    for runtime in RUNTIMES:
        state = (loaded or {}).get(runtime) or {}
        if isinstance(state, Mapping) and as_bool(state.get("stale", False)):
            out[runtime] = {"unit": as_text(state.get("unit") or UNITS[runtime]),
                            "files": [as_text(f) for f in state.get("newer") or []],
                            "started": as_text(state.get("started") or "")}
    return out


def _pending(not_restarted: list[str], stale: Mapping, changes: Mapping, check_mode: bool) -> list[str]:
    """A line per runtime left on an older configuration than its files (in check mode: found so)."""
    lines = []
    for runtime in RUNTIMES:
        if runtime not in not_restarted or (check_mode and runtime not in stale):
            continue
        if runtime in stale:
            lines.append(f"{UNITS[runtime]} (started {stale[runtime]['started']}) runs an older configuration than "
                         f"{', '.join(stale[runtime]['files'])}")
        else:
            files = [as_text(f.get("path")) for f in changes.get(runtime) or [] if isinstance(f, Mapping)]
            lines.append(f"{UNITS[runtime]} was not restarted after {', '.join(files) or 'its configuration'} changed")
    return lines


def container_toolkit_plan(facts: Any, settings: Any, units: Any = None, packages: Any = None, changes: Any = None,
                           driver_loaded: Any = None, check_mode: Any = False, loaded: Any = None) -> dict:
    """What the container_toolkit role does on one host.

    ``facts``: the host's ansible_facts (architecture; nvidia_driver_version from gpu_facts). ``settings``: the
    role's variables by name (``SETTINGS``). ``units``: the lines of ``systemctl list-unit-files`` for the runtimes'
    units. ``packages``: the dpkg_packages result (packages, ready, held) once read, else None. ``changes``: the
    configuration files changed in this run, per runtime (what a restart must restore), once known. ``loaded``: the
    modules' ``loaded`` results per runtime (a runtime whose daemon runs older files is restarted too).
    ``driver_loaded``: overrides the facts (tests). ``check_mode``: the role runs in check mode.
    """
    if not isinstance(facts, Mapping):
        raise AnsibleFilterError(f"container_toolkit_plan expects a host's ansible_facts (a dict), got {type(facts).__name__}")
    if not isinstance(settings, Mapping):
        raise AnsibleFilterError("container_toolkit_plan expects the container_toolkit role's variables (a dict), "
                                 f"got {type(settings).__name__}")
    missing = [name for name in SETTINGS if name not in settings]
    if missing:
        raise AnsibleFilterError(f"container_toolkit_plan: the settings lack {', '.join(missing)}")
    if packages is not None and not isinstance(packages, Mapping):
        raise AnsibleFilterError(f"container_toolkit_plan expects the dpkg_packages result (a dict) or none, got {packages!r}")
    if changes is not None and not isinstance(changes, Mapping):
        raise AnsibleFilterError(f"container_toolkit_plan expects the changes per runtime (a dict) or none, got {changes!r}")
    asked = list(settings.get("container_toolkit_runtimes") or [])
    unknown = [r for r in asked if r not in RUNTIMES]
    if unknown:
        raise AnsibleFilterError(f"container_toolkit_runtimes: {', '.join(map(str, unknown))} is not one of "
                                 f"{', '.join(RUNTIMES)}")
    installed = installed_runtimes(units)
    runtimes = [r for r in RUNTIMES if r in (asked or installed)]
    if driver_loaded is None:
        driver_loaded = bool(as_text(facts.get("nvidia_driver_version") or ""))
    driver_loaded = as_bool(driver_loaded)
    check_mode = as_bool(check_mode)

    toolkit = [str(p) for p in settings["container_toolkit_packages"] or []]
    wanted = toolkit + ([LEGACY_PACKAGE] if as_bool(settings["container_toolkit_nvidia_docker2"]) else [])
    version = as_text(settings["container_toolkit_version"])
    # "1.20.1" means 1.20.1-* (their Depends pin libnvidia-container to the same); the legacy package unpinned.
    suffix = "" if not version else f"={version}" + ("" if "-" in version else "-*")
    hold = toolkit if as_bool(settings["container_toolkit_hold"]) else []

    ready = set((packages or {}).get("ready") or [])
    held = set((packages or {}).get("held") or [])
    missing_packages = [p for p in wanted if p not in ready]
    install_needed = packages is not None and bool(missing_packages)
    unheld = [p for p in hold if p not in held]
    if packages is None:
        install_reason = "not read yet"
    elif install_needed:
        install_reason = f"{', '.join(missing_packages)} missing" + (f" or not of version {version}" if version else "")
    else:
        install_reason = "every package installed" + (f" at {version}" if version else "")

    changes = dict(changes or {})
    stale = _stale(loaded)
    restart = as_bool(settings["container_toolkit_restart"])
    # Changed in this run, or left on older files by a run that stopped before its restart. A runtime whose unit is
    # not installed only has its configuration written.
    due = [r for r in RUNTIMES if r in changes or r in stale]
    to_restart = [r for r in due if r in installed] if restart else []
    # Due but not restarted (no systemd unit, or container_toolkit_restart=false): still on the old configuration.
    not_restarted = [r for r in due if r not in to_restart]

    isolate = as_bool(settings["container_toolkit_isolate_gpus"])
    cdi_spec = settings["container_toolkit_cdi_spec"]
    arch = as_text(facts.get("architecture"))
    return {
        "runtimes_installed": installed,
        "runtimes": runtimes,
        "runtimes_reason": (f"container_toolkit_runtimes={','.join(asked)}" if asked else
                            f"the runtimes whose systemd unit is installed: {', '.join(installed) or 'none'}"),
        # Configured by nvidia-ctk (a drop-in file): only once nvidia-ctk is installed.
        "ctk_runtimes": [r for r in runtimes if r in ("containerd", "crio")],
        "driver_loaded": driver_loaded,
        "arch": ARCH.get(arch, arch),
        "packages": wanted,
        "read": {"names": wanted, "versions": {p: version for p in toolkit} if version else {}},
        "install": {
            "needed": install_needed,
            "names": [p + suffix for p in toolkit] + [p for p in wanted if p not in toolkit],
            # Only when a version is asked for: moving a held package to it.
            "allow_change_held": bool(version),
            "reason": install_reason,
        },
        "hold": {
            "packages": hold,
            # Read (and hold) again after apt, or when a package is not held yet.
            "needed": bool(unheld),
            "reason": (f"{', '.join(unheld)} not held" if unheld else
                       "every toolkit package held" if hold else "container_toolkit_hold is false"),
        },
        "config": {
            "settings": _config_settings(settings),
            # Allowed by container_toolkit_allow_unsafe_settings: the role warns naming them.
            "unsafe_keys": unsafe_keys(settings.get("container_toolkit_config_settings")),
            "isolation": "on" if isolate else "OFF (any container may ask for GPUs by environment variable)",
        },
        "cdi": {
            # nvidia-ctk reads the GPUs and the driver's files through NVML: only where a driver is loaded.
            "wanted": cdi_spec == "always" or (cdi_spec == "auto" and driver_loaded),
            "skip_reason": "skipped (no NVIDIA driver loaded)" if cdi_spec == "auto" else "skipped",
        },
        "restart": to_restart,
        "not_restarted": not_restarted,
        "stale": stale,
        # Restarted only to load files an earlier run wrote.
        "restart_stale": [r for r in to_restart if r in stale and r not in changes],
        "pending": _pending(not_restarted, stale, changes, check_mode),
        "gpu_check": _gpu_check(settings, runtimes, installed, not_restarted, driver_loaded, check_mode),
    }


class FilterModule:
    def filters(self) -> dict:
        return {"_container_toolkit_plan": container_toolkit_plan}
