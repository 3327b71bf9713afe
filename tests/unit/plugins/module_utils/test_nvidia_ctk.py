"""_nvidia_ctk: the command line, and input that is refused before nvidia-ctk runs.

What nvidia-ctk writes is tested against the real binary in tests/lab/test_container_runtime_config.py.
"""
from __future__ import annotations

import pytest

from ansible_collections.k8sgpu.nvidia.plugins.module_utils._nvidia_ctk import (
    DEFAULT_PATHS,
    FileChange,
    NvidiaCtkError,
    command,
    plan,
)


def never_run(cmd):
    raise AssertionError(f"nvidia-ctk must not run: {cmd}")


def test_command_line():
    cmd = command("/usr/bin/nvidia-ctk", "containerd", "/etc/containerd/config.toml",
                  "/etc/containerd/conf.d/99-nvidia.toml", "nvidia", "/usr/bin/nvidia-container-runtime",
                  set_as_default=True, enable_cdi=False)
    assert cmd == ["/usr/bin/nvidia-ctk", "--quiet", "runtime", "configure", "--runtime=containerd",
                   "--config=/etc/containerd/config.toml", "--drop-in-config=/etc/containerd/conf.d/99-nvidia.toml",
                   "--nvidia-runtime-name=nvidia", "--nvidia-runtime-path=/usr/bin/nvidia-container-runtime",
                   "--set-as-default"]
    cmd = command("nvidia-ctk", "crio", "/c", "/d", "nv", "/r", set_as_default=False, enable_cdi=True)
    assert "--set-as-default" not in cmd and cmd[-1] == "--enable-cdi"


def test_default_paths_are_nvidia_ctks():
    assert DEFAULT_PATHS["containerd"][1] == "/etc/containerd/conf.d/99-nvidia.toml"
    assert DEFAULT_PATHS["crio"][1] == "/etc/crio/crio.conf.d/99-nvidia.toml"


@pytest.mark.parametrize(
    ("runtime", "config", "drop_in", "message"),
    [
        ("docker", "/etc/docker/daemon.json", "/etc/x.toml", "not one of containerd, crio"),
        ("containerd", "etc/containerd/config.toml", "/etc/containerd/conf.d/99-nvidia.toml", "not an absolute path"),
        ("containerd", "/etc/containerd/config.toml", "conf.d/99-nvidia.toml", "not an absolute path"),
        ("containerd", "/etc/containerd/config.toml", "/etc/containerd/config.toml", "the same path"),
    ],
)
def test_refused_before_running(runtime, config, drop_in, message):
    with pytest.raises(NvidiaCtkError, match=message):
        plan(never_run, "/usr/bin/nvidia-ctk", runtime, config, drop_in)


def test_unreadable_file_is_named(tmp_path):
    (tmp_path / "config.toml").mkdir()
    with pytest.raises(NvidiaCtkError, match=f"{tmp_path}/config.toml is a directory"):
        plan(never_run, "/usr/bin/nvidia-ctk", "containerd", str(tmp_path / "config.toml"), str(tmp_path / "d.toml"))


def test_nvidia_ctk_failure_names_file_and_changes_nothing(tmp_path):
    config = tmp_path / "config.toml"
    config.write_text("version = 2\n")

    def failing(cmd):
        return 1, "", 'level=error msg="unable to load config"\n'

    with pytest.raises(NvidiaCtkError) as err:
        plan(failing, "/usr/bin/nvidia-ctk", "containerd", str(config), str(tmp_path / "conf.d/99-nvidia.toml"))
    assert f"from {config} (exit 1)" in str(err.value) and "unable to load config" in str(err.value)
    assert config.read_text() == "version = 2\n" and not (tmp_path / "conf.d").exists()


def test_file_change():
    assert FileChange("/a", None, b"x").changed
    assert not FileChange("/a", b"x", b"x").changed
