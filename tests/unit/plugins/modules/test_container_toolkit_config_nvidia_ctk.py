"""k8sgpu.nvidia.container_toolkit_config and _nvidia_ctk.plan_config with a stand-in nvidia-ctk.

The stand-in takes nvidia-ctk config's command line (--config-file, --in-place, --set key=value) and writes sorted
``key = value`` lines, refusing keys it does not know, as the real one does. What NVIDIA's real nvidia-ctk writes is
tested in tests/lab/test_gpu_isolation_toolkit.py.
"""
from __future__ import annotations

import os
import stat
import textwrap
from pathlib import Path

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.k8sgpu.nvidia.plugins.module_utils._nvidia_ctk import (
    NvidiaCtkError,
    config_command,
    config_value,
    plan_config,
)
from ansible_collections.k8sgpu.nvidia.plugins.modules import container_toolkit_config
from module_harness import AnsibleExitJson, AnsibleFailJson

pytestmark = pytest.mark.usefixtures("module_io")
ISOLATE = {
    "accept-nvidia-visible-devices-envvar-when-unprivileged": False,
    "accept-nvidia-visible-devices-as-volume-mounts": True,
}
FAKE = textwrap.dedent("""\
    #!/usr/bin/env python3
    import sys
    KNOWN = {"accept-nvidia-visible-devices-envvar-when-unprivileged", "accept-nvidia-visible-devices-as-volume-mounts",
             "nvidia-container-runtime.log-level", "nvidia-container-runtime.debug"}
    args = sys.argv[1:]
    assert args[:2] == ["--quiet", "config"] and "--in-place" in args, args
    path = next(a.split("=", 1)[1] for a in args if a.startswith("--config-file="))
    try:
        lines = dict(l.split(" = ", 1) for l in open(path).read().splitlines() if " = " in l)
    except FileNotFoundError:
        lines = {"accept-nvidia-visible-devices-envvar-when-unprivileged": "true"}
    for a in args:
        if a.startswith("--set="):
            key, value = a[6:].split("=", 1)
            if key not in KNOWN:
                sys.stderr.write(f"invalid --set option {key}={value}: invalid config option\\n")
                sys.exit(1)
            lines[key] = value if value in ("true", "false") else f'"{value}"'
    open(path, "w").write("".join(f"{k} = {v}\\n" for k, v in sorted(lines.items())))
""")


@pytest.fixture
def ctk(tmp_path) -> str:
    path = tmp_path / "bin/nvidia-ctk"
    path.parent.mkdir()
    path.write_text(FAKE)
    path.chmod(0o755)
    return str(path)


def run_main(args: dict) -> dict:
    with patch_module_args(args):
        with pytest.raises((AnsibleExitJson, AnsibleFailJson)) as raised:
            container_toolkit_config.main()
    result = raised.value.args[0]
    if isinstance(raised.value, AnsibleFailJson):
        result["failed"] = True
    return result


def base(tmp_path, ctk, **kw) -> dict:
    return {"path": str(tmp_path / "etc/nvidia-container-runtime/config.toml"), "settings": ISOLATE,
            "nvidia_ctk": ctk, "backup_dir": str(tmp_path / "backups"), **kw}


def test_command_line_and_values():
    assert config_value(True) == "true" and config_value(False) == "false"
    assert config_value(["a", "b"]) == "a:b" and config_value(3) == "3"
    assert config_command("/usr/bin/nvidia-ctk", "/etc/c.toml", ISOLATE) == [
        "/usr/bin/nvidia-ctk", "--quiet", "config", "--config-file=/etc/c.toml", "--in-place",
        "--set=accept-nvidia-visible-devices-as-volume-mounts=true",
        "--set=accept-nvidia-visible-devices-envvar-when-unprivileged=false",
    ]


@pytest.mark.parametrize(
    ("path", "settings", "message"),
    [
        ("etc/config.toml", ISOLATE, "not an absolute path"),
        ("/etc/config.toml", {}, "no settings given"),
        ("/etc/config.toml", {"a=b": True}, "is not a config.toml key"),
        ("/etc/config.toml", {"k": None}, "must be a boolean"),
        ("/etc/config.toml", {"k": {"x": 1}}, "must be a boolean"),
    ],
)
def test_refused_before_running(path, settings, message):
    def never(cmd):
        raise AssertionError(cmd)
    with pytest.raises(NvidiaCtkError, match=message):
        plan_config(never, "/usr/bin/nvidia-ctk", path, settings)


def test_check_mode_diff_apply_backup_idempotent(tmp_path, ctk):
    config = tmp_path / "etc/nvidia-container-runtime/config.toml"
    config.parent.mkdir(parents=True)
    config.write_text("accept-nvidia-visible-devices-envvar-when-unprivileged = true\nsupported-driver-capabilities"
                      ' = "compat32"\n')
    config.chmod(0o640)
    before = config.read_bytes()

    checked = run_main({**base(tmp_path, ctk), "_ansible_check_mode": True, "_ansible_diff": True})
    assert checked["changed"] is True and config.read_bytes() == before
    assert "accept-nvidia-visible-devices-envvar-when-unprivileged = false" in checked["diff"]["after"]
    assert checked["diff"]["before"] == before.decode() and checked["diff"]["before_header"] == str(config)
    assert not (tmp_path / "backups").exists()

    applied = run_main(base(tmp_path, ctk))
    assert applied["changed"] is True and applied["created"] is False
    text = config.read_text()
    assert "accept-nvidia-visible-devices-envvar-when-unprivileged = false\n" in text
    assert "accept-nvidia-visible-devices-as-volume-mounts = true\n" in text
    assert 'supported-driver-capabilities = "compat32"' in text  # the site's other keys kept
    assert stat.S_IMODE(config.stat().st_mode) == 0o640
    backup = Path(applied["backup_file"])
    assert backup.is_relative_to(tmp_path / "backups") and backup.read_bytes() == before
    assert applied["command"][3] == f"--config-file={config}"

    again = run_main({**base(tmp_path, ctk), "_ansible_diff": True})
    assert again["changed"] is False and "diff" not in again and "backup_file" not in again


def test_missing_file_is_created(tmp_path, ctk):
    result = run_main(base(tmp_path, ctk))
    config = tmp_path / "etc/nvidia-container-runtime/config.toml"
    assert result["changed"] is True and result["created"] is True and "backup_file" not in result
    assert stat.S_IMODE(config.stat().st_mode) == 0o644


def test_unknown_key_fails_naming_file_and_changes_nothing(tmp_path, ctk):
    config = tmp_path / "etc/nvidia-container-runtime/config.toml"
    config.parent.mkdir(parents=True)
    config.write_text("x = 1\n")
    result = run_main(base(tmp_path, ctk, settings={"accept-everything": True}))
    assert result["failed"]
    assert f"could not set accept-everything in {config} (exit 1)" in result["msg"]
    assert "invalid config option" in result["msg"] and "nothing was changed" in result["msg"]
    assert config.read_text() == "x = 1\n"


def test_missing_nvidia_ctk_is_named(tmp_path):
    result = run_main(base(tmp_path, str(tmp_path / "nope")))
    assert result["failed"] and "install nvidia-container-toolkit-base first" in result["msg"]


def test_backup_dir_beside_the_file_is_refused(tmp_path, ctk):
    result = run_main(base(tmp_path, ctk, backup_dir=str(tmp_path / "etc/nvidia-container-runtime/old")))
    assert result["failed"] and "choose a directory outside it" in result["msg"]
    assert not os.path.exists(tmp_path / "etc/nvidia-container-runtime/config.toml")
