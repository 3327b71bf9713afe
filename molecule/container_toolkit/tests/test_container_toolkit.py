"""The NVIDIA container toolkit from the lab's apt repository, and nvidia as Docker's and containerd's default."""
from __future__ import annotations

import json

VERSION = "1.20.1-1"
RESULT = "/var/tmp/k8sgpu-container-toolkit-result.json"


def test_toolkit_packages_installed_pinned_and_held(host):
    for name in ("nvidia-container-toolkit", "nvidia-container-toolkit-base"):
        pkg = host.package(name)
        assert pkg.is_installed and pkg.version == VERSION, (name, pkg.version)
    held = host.check_output("dpkg --get-selections nvidia-container-toolkit nvidia-container-toolkit-base")
    assert [line.split()[1] for line in held.splitlines()] == ["hold", "hold"], held
    assert host.check_output("nvidia-ctk --version").startswith("NVIDIA Container Toolkit CLI version 1.20.1")


def test_legacy_nvidia_docker2_only_where_asked(host):
    wanted = host.backend.get_hostname() == "molecule-debian13"
    assert host.package("nvidia-docker2").is_installed == wanted


def test_repository_is_signed_by_its_own_keyring(host):
    source = host.file("/etc/apt/sources.list.d/k8sgpu-nvidia-container-toolkit.sources").content_string
    assert "Signed-By: /etc/apt/keyrings/nvidia-container-toolkit.asc" in source
    assert "Suites: /" in source and "/libnvidia-container/stable/deb/amd64" in source
    key = host.file("/etc/apt/keyrings/nvidia-container-toolkit.asc")
    assert key.mode == 0o644 and key.content_string.startswith("-----BEGIN PGP PUBLIC KEY BLOCK-----")
    # Never apt-key: nothing was added to the legacy trusted keyrings.
    assert not host.file("/etc/apt/trusted.gpg").exists
    assert host.check_output("ls /etc/apt/trusted.gpg.d/ 2>/dev/null | grep -ci nvidia || true") == "0"
    # The mirror is reached directly, the rest of apt through the site's proxy.
    proxy = host.file("/etc/apt/apt.conf.d/90k8sgpu-nvidia-container-toolkit-proxy").content_string
    assert '"DIRECT";' in proxy


def test_daemon_json_merged_keeping_the_sites_keys(host):
    f = host.file("/etc/docker/daemon.json")
    config = json.loads(f.content_string)
    assert config["log-driver"] == "json-file"
    assert config["log-opts"] == {"max-size": "10m", "max-file": "3"}
    assert config["storage-driver"] == "vfs"
    assert config["runtimes"]["site-runtime"] == {"path": "/usr/sbin/runc"}
    # Only keys dockerd reads (never nvidia-ctk's "args").
    assert config["runtimes"]["nvidia"] == {"path": "nvidia-container-runtime"}
    assert config["default-runtime"] == "nvidia"
    assert f.mode == 0o640  # the site's mode is kept
    # One backup of the site's daemon.json, from the first run only, outside /etc/docker.
    backups = host.check_output("ls /var/backups/k8sgpu.nvidia/etc/docker/").split()
    assert len(backups) == 1 and backups[0].startswith("daemon.json."), backups
    assert [n for n in host.check_output("ls /etc/docker/").split() if n.startswith("daemon.json.")] == []


def test_docker_runs_with_nvidia_as_default_runtime(host):
    info = json.loads(host.check_output("docker info --format '{{json .}}'"))
    assert info["DefaultRuntime"] == "nvidia"
    assert "nvidia" in info["Runtimes"] and "site-runtime" in info["Runtimes"]


def test_docker_run_goes_through_the_nvidia_runtime(host):
    log = "/var/log/nvidia-container-runtime.log"
    host.run(f"rm -f {log}")
    # The runtime's own debug log shows each container it handled.
    host.check_output(
        "sed -i 's|^#debug = \"/var/log/nvidia-container-runtime.log\"|debug = \"/var/log/nvidia-container-runtime.log\"|'"
        " /etc/nvidia-container-runtime/config.toml"
    )
    try:
        # No network: Debian 13's Docker cannot set up IPv6 on a veth inside a node container.
        cid = host.check_output("docker run -d --network none local/busybox:lab /bin/busybox echo hello-from-the-node")
        host.check_output(f"docker wait {cid}")
        assert host.check_output(f"docker logs {cid}") == "hello-from-the-node"
        assert cid in host.file(log).content_string, "nvidia-container-runtime did not handle the container"
        host.check_output(f"docker rm {cid}")
    finally:
        host.run("sed -i 's|^debug = |#debug = |' /etc/nvidia-container-runtime/config.toml")


def test_containerd_gets_nvidia_as_its_default_through_a_drop_in(host):
    drop_in = host.file("/etc/containerd/conf.d/99-nvidia.toml")
    assert drop_in.exists and drop_in.mode == 0o644
    main = host.file("/etc/containerd/config.toml").content_string
    assert 'imports = ["/etc/containerd/conf.d/*.toml"]' in main
    assert 'snapshotter = "native"' in main  # the site's setting is kept
    assert host.service("containerd").is_running
    # containerd's own view of the merged configuration.
    dump = host.check_output("containerd config dump")
    assert 'default_runtime_name = "nvidia"' in dump
    assert 'BinaryName = "/usr/bin/nvidia-container-runtime"' in dump
    assert 'snapshotter = "native"' in dump


def test_role_result(host):
    """container_toolkit_result of the first converge (the idempotence run does not rewrite the file)."""
    result = json.loads(host.file(RESULT).content_string)
    assert result == {
        "version": VERSION,
        "runtimes": ["containerd", "docker"],
        "changed_files": ["/etc/docker/daemon.json", "/etc/containerd/conf.d/99-nvidia.toml",
                          "/etc/containerd/config.toml", "/etc/nvidia-container-runtime/config.toml"],
        "backups_moved": [],
        "cdi_spec": "skipped (no NVIDIA driver loaded)",
        "gpu_check": "skipped (no NVIDIA driver loaded)",
        "isolation": "on (/etc/nvidia-container-runtime/config.toml changed)",
        # Every runtime restarted onto its new files within the run: none left on an older configuration.
        "restart_pending": [],
    }, result


def test_runtime_refuses_gpus_by_variable_from_unprivileged_containers(host):
    """GPU isolation (container_toolkit_isolate_gpus, the default): the toolkit's own config.toml, as nvidia-ctk
    reads it back, refuses NVIDIA_VISIBLE_DEVICES from unprivileged containers and accepts the device plugin's
    volume mounts."""
    config = host.file("/etc/nvidia-container-runtime/config.toml")
    assert config.exists
    lines = config.content_string.splitlines()
    assert "accept-nvidia-visible-devices-envvar-when-unprivileged = false" in lines
    assert "accept-nvidia-visible-devices-as-volume-mounts = true" in lines
