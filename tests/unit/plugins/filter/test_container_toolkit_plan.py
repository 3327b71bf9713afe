"""container_toolkit_plan: the container_toolkit role's decisions for one host.

``units`` are lines as ``systemctl list-unit-files --no-legend --no-pager docker.service containerd.service
crio.service`` prints them on the lab's Debian 12 node (docker.io, containerd); the dpkg results have the shape of
k8sgpu.nvidia.dpkg_packages' (packages, ready, held).
"""
from __future__ import annotations

from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.k8sgpu.nvidia.plugins.filter._container_toolkit_plan import (
    container_toolkit_plan,
    installed_runtimes,
)

FACTS = {"architecture": "x86_64", "nvidia_driver_version": None}
LOADED = {"architecture": "x86_64", "nvidia_driver_version": "580.95.05"}
UNITS = ["containerd.service                         enabled         enabled",
         "docker.service                             enabled         enabled"]
TOOLKIT = ["nvidia-container-toolkit", "nvidia-container-toolkit-base"]
ISOLATED = {"accept-nvidia-visible-devices-envvar-when-unprivileged": False,
            "accept-nvidia-visible-devices-as-volume-mounts": True}


def settings(**over):
    base = {"container_toolkit_packages": TOOLKIT, "container_toolkit_version": "1.20.1",
            "container_toolkit_nvidia_docker2": False, "container_toolkit_hold": True,
            "container_toolkit_runtimes": [], "container_toolkit_restart": True, "container_toolkit_isolate_gpus": True,
            "container_toolkit_config_settings": {}, "container_toolkit_cdi_spec": "auto",
            "container_toolkit_gpu_check": True}
    return {**base, **over}


def dpkg(versions: dict, held=(), ready=None):
    return {"packages": {n: {"installed": True, "version": v} for n, v in versions.items()},
            "ready": list(versions) if ready is None else ready, "held": list(held)}


def test_units_tell_the_installed_runtimes():
    assert installed_runtimes(UNITS) == ["containerd", "docker"]
    assert installed_runtimes(["crio.service disabled enabled", "", "foo.service enabled"]) == ["crio"]
    assert installed_runtimes(None) == []


def test_fresh_host_installs_the_pinned_toolkit_and_holds_it():
    plan = container_toolkit_plan(FACTS, settings(), units=UNITS, packages=dpkg({}))
    assert plan["runtimes_installed"] == ["containerd", "docker"]
    assert plan["runtimes"] == ["containerd", "docker"]
    assert plan["runtimes_reason"] == "the runtimes whose systemd unit is installed: containerd, docker"
    assert plan["ctk_runtimes"] == ["containerd"]
    assert plan["read"] == {"names": TOOLKIT, "versions": {n: "1.20.1" for n in TOOLKIT}}
    assert plan["install"] == {"needed": True, "allow_change_held": True,
                               "names": ["nvidia-container-toolkit=1.20.1-*", "nvidia-container-toolkit-base=1.20.1-*"],
                               "reason": "nvidia-container-toolkit, nvidia-container-toolkit-base missing or not of "
                                         "version 1.20.1"}
    assert plan["hold"]["packages"] == TOOLKIT and plan["hold"]["needed"]
    assert plan["arch"] == "amd64"


def test_before_the_packages_are_read_nothing_is_installed():
    plan = container_toolkit_plan(FACTS, settings(), units=UNITS)
    assert not plan["install"]["needed"] and plan["install"]["reason"] == "not read yet"


def test_full_debian_version_is_not_suffixed_and_no_version_takes_the_newest():
    assert container_toolkit_plan(FACTS, settings(container_toolkit_version="1.20.1-1"), packages=dpkg({}))[
        "install"]["names"][0] == "nvidia-container-toolkit=1.20.1-1"
    newest = container_toolkit_plan(FACTS, settings(container_toolkit_version=""), packages=dpkg({}))
    assert newest["install"]["names"] == TOOLKIT and not newest["install"]["allow_change_held"]
    assert newest["read"]["versions"] == {}
    assert newest["install"]["reason"] == "nvidia-container-toolkit, nvidia-container-toolkit-base missing"


def test_converged_host_changes_nothing():
    plan = container_toolkit_plan(FACTS, settings(), units=UNITS,
                                  packages=dpkg({n: "1.20.1-1" for n in TOOLKIT}, held=TOOLKIT))
    assert not plan["install"]["needed"] and plan["install"]["reason"] == "every package installed at 1.20.1"
    assert not plan["hold"]["needed"] and plan["hold"]["reason"] == "every toolkit package held"


def test_installed_but_not_held_is_held():
    installed = dpkg({n: "1.20.1-1" for n in TOOLKIT}, held=["nvidia-container-toolkit"])
    plan = container_toolkit_plan(FACTS, settings(), packages=installed)
    assert not plan["install"]["needed"]
    assert plan["hold"] == {"packages": TOOLKIT, "needed": True, "reason": "nvidia-container-toolkit-base not held"}
    unheld = container_toolkit_plan(FACTS, settings(container_toolkit_hold=False), packages=dpkg({}))
    assert unheld["hold"] == {"packages": [], "needed": False, "reason": "container_toolkit_hold is false"}


def test_other_version_held_is_moved():
    """dpkg_packages leaves a package of another version out of ready: installed again, held packages may move."""
    installed = dpkg({n: "1.17.8-1" for n in TOOLKIT}, held=TOOLKIT, ready=[])
    plan = container_toolkit_plan(FACTS, settings(), packages=installed)
    assert plan["install"]["needed"] and plan["install"]["allow_change_held"]


def test_legacy_nvidia_docker2_is_installed_unpinned_and_not_held():
    plan = container_toolkit_plan(FACTS, settings(container_toolkit_nvidia_docker2=True), packages=dpkg({}))
    assert plan["packages"] == TOOLKIT + ["nvidia-docker2"]
    assert plan["read"]["names"] == TOOLKIT + ["nvidia-docker2"]
    assert plan["install"]["names"] == ["nvidia-container-toolkit=1.20.1-*", "nvidia-container-toolkit-base=1.20.1-*",
                                        "nvidia-docker2"]
    assert plan["hold"]["packages"] == TOOLKIT
    converged = container_toolkit_plan(FACTS, settings(container_toolkit_nvidia_docker2=True),
                                       packages=dpkg({n: "1.20.1-1" for n in TOOLKIT}, held=TOOLKIT))
    assert converged["install"]["needed"] and converged["install"]["reason"] == "nvidia-docker2 missing or not of version 1.20.1"


def test_runtimes_asked_for_are_configured_in_order_even_without_a_unit():
    plan = container_toolkit_plan(FACTS, settings(container_toolkit_runtimes=["docker", "crio"]), units=UNITS)
    assert plan["runtimes"] == ["crio", "docker"] and plan["ctk_runtimes"] == ["crio"]
    assert plan["runtimes_reason"] == "container_toolkit_runtimes=docker,crio"


def test_isolation_settings():
    assert container_toolkit_plan(FACTS, settings())["config"] == {"settings": ISOLATED, "isolation": "on",
                                                                   "unsafe_keys": []}
    off = container_toolkit_plan(FACTS, settings(container_toolkit_isolate_gpus=False))["config"]
    assert off == {"settings": {**ISOLATED, "accept-nvidia-visible-devices-envvar-when-unprivileged": True},
                   "isolation": "OFF (any container may ask for GPUs by environment variable)", "unsafe_keys": []}
    unsafe = {"accept-nvidia-visible-devices-as-volume-mounts": False, "nvidia-container-runtime.log-level": "debug"}
    site = container_toolkit_plan(FACTS, settings(container_toolkit_allow_unsafe_settings=True,
                                                  container_toolkit_config_settings=unsafe))
    assert site["config"]["unsafe_keys"] == ["accept-nvidia-visible-devices-as-volume-mounts"]
    assert site["config"]["settings"] == {"accept-nvidia-visible-devices-envvar-when-unprivileged": False,
                                          "accept-nvidia-visible-devices-as-volume-mounts": False,
                                          "nvidia-container-runtime.log-level": "debug"}


@pytest.mark.parametrize("spec,facts,wanted,reason", [
    ("auto", FACTS, False, "skipped (no NVIDIA driver loaded)"),
    ("auto", LOADED, True, "skipped (no NVIDIA driver loaded)"),
    ("always", FACTS, True, "skipped"),
    ("never", LOADED, False, "skipped"),
])
def test_cdi_spec(spec, facts, wanted, reason):
    assert container_toolkit_plan(facts, settings(container_toolkit_cdi_spec=spec))["cdi"] == {
        "wanted": wanted, "skip_reason": reason}


def test_changed_runtimes_are_restarted_where_their_unit_is_installed():
    changes = {"docker": [{"path": "/etc/docker/daemon.json", "changed": True}],
               "crio": [{"path": "/etc/crio/crio.conf.d/99-nvidia.toml", "changed": True}],
               "containerd": [{"path": "/etc/containerd/conf.d/99-nvidia.toml", "changed": True}]}
    plan = container_toolkit_plan(LOADED, settings(container_toolkit_runtimes=["docker", "crio", "containerd"]),
                                  units=UNITS, changes=changes)
    assert plan["restart"] == ["containerd", "docker"]
    assert plan["not_restarted"] == ["crio"]
    off = container_toolkit_plan(LOADED, settings(container_toolkit_restart=False), units=UNITS, changes=changes)
    assert off["restart"] == [] and off["not_restarted"] == ["containerd", "crio", "docker"]
    assert off["pending"] == [
        "containerd.service was not restarted after /etc/containerd/conf.d/99-nvidia.toml changed",
        "crio.service was not restarted after /etc/crio/crio.conf.d/99-nvidia.toml changed",
        "docker.service was not restarted after /etc/docker/daemon.json changed"]
    assert container_toolkit_plan(LOADED, settings(), units=UNITS, changes={})["restart"] == []


def loaded(unit, *newer, state="active"):
    return {"unit": unit, "state": state, "started": "2026-12-07T15:20:07+00:00", "newer": list(newer),
            "stale": bool(newer)}


STALE = {"docker": loaded("docker.service", "/etc/docker/daemon.json"),
         "containerd": loaded("containerd.service", "/etc/containerd/conf.d/99-nvidia.toml"),
         "crio": loaded("crio.service")}


def test_a_runtime_on_older_files_than_its_own_is_restarted_though_nothing_changed():
    # A run stopped between the write and the restart: the files are right, the daemons started before them.
    plan = container_toolkit_plan(LOADED, settings(), units=UNITS, changes={}, loaded=STALE)
    assert plan["restart"] == ["containerd", "docker"] and plan["not_restarted"] == [] and plan["pending"] == []
    assert plan["restart_stale"] == ["containerd", "docker"]
    assert plan["stale"] == {
        "containerd": {"unit": "containerd.service", "files": ["/etc/containerd/conf.d/99-nvidia.toml"],
                       "started": "2026-12-07T15:20:07+00:00"},
        "docker": {"unit": "docker.service", "files": ["/etc/docker/daemon.json"],
                   "started": "2026-12-07T15:20:07+00:00"}}
    # Docker restarted, so the GPU container check runs.
    assert plan["gpu_check"]["run"] is True
    # Current daemons: nothing to restart.
    current = {r: loaded(v["unit"]) for r, v in STALE.items()}
    assert container_toolkit_plan(LOADED, settings(), units=UNITS, changes={}, loaded=current)["restart"] == []


def test_a_stale_runtime_is_left_alone_where_restarts_are_off_and_said_to_be():
    plan = container_toolkit_plan(LOADED, settings(container_toolkit_restart=False), units=UNITS, changes={},
                                  loaded=STALE)
    assert plan["restart"] == [] and plan["not_restarted"] == ["containerd", "docker"]
    assert plan["pending"] == [
        "containerd.service (started 2026-12-07T15:20:07+00:00) runs an older configuration than "
        "/etc/containerd/conf.d/99-nvidia.toml",
        "docker.service (started 2026-12-07T15:20:07+00:00) runs an older configuration than /etc/docker/daemon.json"]
    assert plan["gpu_check"]["skip_reason"] == "Docker not restarted: restart it to load the nvidia runtime"
    # No systemd unit (a runtime asked for, not installed): not restarted, pending.
    only_containerd = [UNITS[0]]
    plan = container_toolkit_plan(LOADED, settings(container_toolkit_runtimes=["docker", "containerd"]),
                                  units=only_containerd, changes={}, loaded=STALE)
    assert plan["restart"] == ["containerd"] and plan["not_restarted"] == ["docker"]


def test_check_mode_lists_the_stale_runtimes_as_pending_not_the_changed_ones():
    # The role's plan entry point: check mode, restarts off. A file that would change is in changed_files already.
    changes = {"docker": [{"path": "/etc/docker/daemon.json", "changed": True}]}
    plan = container_toolkit_plan(LOADED, settings(container_toolkit_restart=False), units=UNITS, changes=changes,
                                  loaded={"containerd": STALE["containerd"]}, check_mode=True)
    assert plan["pending"] == ["containerd.service (started 2026-12-07T15:20:07+00:00) runs an older configuration "
                               "than /etc/containerd/conf.d/99-nvidia.toml"]


def test_loaded_must_be_a_mapping():
    with pytest.raises(AnsibleFilterError, match="loaded state per runtime"):
        container_toolkit_plan(LOADED, settings(), units=UNITS, loaded=["docker"])


@pytest.mark.parametrize("facts,over,units,changes,check_mode,expected", [
    (LOADED, {}, UNITS, {}, False, {"run": True, "probe_dockerd": False, "skip_reason": ""}),
    (LOADED, {}, UNITS, {}, True, {"run": False, "probe_dockerd": False, "skip_reason": "check mode"}),
    (FACTS, {}, UNITS, {}, False, {"run": False, "probe_dockerd": False, "skip_reason": "no NVIDIA driver loaded"}),
    (LOADED, {"container_toolkit_gpu_check": False}, UNITS, {}, False,
     {"run": False, "probe_dockerd": False, "skip_reason": "disabled"}),
    (LOADED, {"container_toolkit_runtimes": ["containerd"]}, UNITS, {}, False,
     {"run": False, "probe_dockerd": False, "skip_reason": "Docker not configured"}),
    (LOADED, {"container_toolkit_restart": False}, UNITS, {"docker": [{"path": "/etc/docker/daemon.json"}]}, False,
     {"run": False, "probe_dockerd": False,
      "skip_reason": "Docker not restarted: restart it to load the nvidia runtime"}),
    (LOADED, {"container_toolkit_runtimes": ["docker"]}, [], {}, False,
     {"run": False, "probe_dockerd": True, "skip_reason": "no docker.service and no Docker daemon answering"}),
    # Docker without a unit whose configuration changed: it still runs the old one.
    (LOADED, {"container_toolkit_runtimes": ["docker"]}, [], {"docker": [{"path": "/etc/docker/daemon.json"}]}, False,
     {"run": False, "probe_dockerd": False,
      "skip_reason": "Docker not restarted: restart it to load the nvidia runtime"}),
])
def test_gpu_check(facts, over, units, changes, check_mode, expected):
    plan = container_toolkit_plan(facts, settings(**over), units=units, changes=changes, check_mode=check_mode)
    assert plan["gpu_check"] == expected


def test_driver_loaded_can_be_forced():
    assert container_toolkit_plan(FACTS, settings(), units=UNITS, driver_loaded=True)["gpu_check"]["run"]
    assert not container_toolkit_plan(LOADED, settings(), units=UNITS, driver_loaded=False)["driver_loaded"]


def test_bad_input_names_what_is_wrong():
    with pytest.raises(AnsibleFilterError, match="ansible_facts"):
        container_toolkit_plan(None, settings())
    with pytest.raises(AnsibleFilterError, match="lack container_toolkit_hold"):
        container_toolkit_plan(FACTS, {k: v for k, v in settings().items() if k != "container_toolkit_hold"})
    with pytest.raises(AnsibleFilterError, match="container_toolkit_runtimes: podman is not one of"):
        container_toolkit_plan(FACTS, settings(container_toolkit_runtimes=["podman"]))
    with pytest.raises(AnsibleFilterError, match="changes per runtime"):
        container_toolkit_plan(FACTS, settings(), changes=["docker"])


# Issue 46 item 2: container_toolkit_config_settings keys that undo a defence need container_toolkit_allow_unsafe_settings.
UNSAFE = [
    {"accept-nvidia-visible-devices-envvar-when-unprivileged": True},
    {"accept-nvidia-visible-devices-as-volume-mounts": False},
    {"nvidia-container-cli.ldconfig": "/tmp/evil"},
    {"nvidia-container-cli.ldconfig": "@/tmp/evil"},
    {"nvidia-container-cli.root": "/"},
    {"nvidia-container-cli.path": "/tmp/nvidia-container-cli"},
    {"nvidia-container-runtime.runtimes": ["/tmp/runc"]},
    {"nvidia-container-runtime-hook.path": "/tmp/hook"},
    {"nvidia-container-runtime-hook.skip-mode-detection": True},
    {"nvidia-ctk.path": "/tmp/nvidia-ctk"},
    {"nvidia-container-cli.no-cgroups": True},
    {"NVIDIA-Container-Cli.Root": "/"},
]


@pytest.mark.parametrize("config", UNSAFE)
def test_a_key_that_undoes_a_defence_is_refused_naming_it_and_the_fix(config):
    with pytest.raises(AnsibleFilterError) as err:
        container_toolkit_plan(FACTS, settings(container_toolkit_config_settings=config))
    message = str(err.value)
    (key,) = config
    assert message.startswith("container_toolkit_config_settings: " + key) and "refused" in message
    assert "container_toolkit_allow_unsafe_settings: true" in message and "container_toolkit_isolate_gpus" in message
    allowed = container_toolkit_plan(FACTS, settings(container_toolkit_config_settings=config,
                                                     container_toolkit_allow_unsafe_settings=True))
    assert allowed["config"]["unsafe_keys"] == [key] and allowed["config"]["settings"][key] == config[key]


@pytest.mark.parametrize("config", [
    {"nvidia-container-cli.ldconfig": "@/sbin/ldconfig"},
    {"nvidia-container-cli.ldconfig": "@/sbin/ldconfig.real"},
    {"nvidia-container-runtime.log-level": "debug"},
    {"nvidia-container-cli.debug": "/var/log/nvidia-container-toolkit.log"},
    {"nvidia-container-runtime.mode": "cdi"},
])
def test_harmless_keys_pass_without_the_opt_in(config):
    plan = container_toolkit_plan(FACTS, settings(container_toolkit_config_settings=config))
    assert plan["config"]["unsafe_keys"] == []


def test_the_role_warns_naming_the_unsafe_keys_and_passes_the_opt_in():
    root = Path(__file__).resolve().parents[4] / "roles" / "container_toolkit"
    assert "container_toolkit_allow_unsafe_settings" in (root / "vars" / "main.yml").read_text()
    preflight = (root / "tasks" / "preflight.yml").read_text()
    assert "_container_toolkit_decisions.config.unsafe_keys | join" in preflight
