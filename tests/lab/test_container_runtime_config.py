"""container_runtime_config against NVIDIA's real nvidia-ctk (built by the lab from NVIDIA's sources).

The module runs on this machine (ansible -c local) on files in a temporary directory. What CRI-O loads from them
is read with CRI-O's own configuration code (tests/lab/crio_config, built against github.com/cri-o/cri-o/pkg/config
from the Go module proxy and cached under ~/.cache/k8sgpu-lab/bin).
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import tomllib
from pathlib import Path

import pytest

from conftest import LAB_STATE, ROOT, run

CRIO_CONFIG_SRC = ROOT / "tests/lab/crio_config"
CACHE = Path(os.environ.get("K8SGPU_CACHE", Path.home() / ".cache/k8sgpu-lab"))

V2 = b"""# site settings
version = 2
[plugins."io.containerd.grpc.v1.cri".containerd]
  snapshotter = "overlayfs"
"""
V3 = b"""version = 3
[plugins."io.containerd.cri.v1.runtime".containerd]
  default_runtime_name = "runc"
  [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
      SystemdCgroup = true
"""


@pytest.fixture(scope="module")
def nvidia_ctk() -> str:
    path = Path((LAB_STATE / "toolkit-bin-dir").read_text().strip()) / "nvidia-ctk"
    assert os.access(path, os.X_OK), f"{path} missing: make lab builds it"
    return str(path)


@pytest.fixture(scope="module")
def crio_effective_config():
    """CRI-O's effective configuration from a main file and a drop-in directory, as CRI-O itself loads them."""
    version = re.search(r"^require github.com/cri-o/cri-o (v\S+)$", (CRIO_CONFIG_SRC / "go.mod").read_text(), re.M)[1]
    binary = CACHE / "bin" / f"crio-config-{version}"
    assert os.access(binary, os.X_OK), f"{binary} missing: make lab builds it (lab/build-binaries.sh crio-config)"

    def _load(config: Path, drop_in_dir: Path) -> dict:
        cp = subprocess.run([str(binary), str(config), str(drop_in_dir)], capture_output=True, text=True,
                            timeout=60, check=False)
        assert cp.returncode == 0, cp.stderr
        return tomllib.loads(cp.stdout)["crio"]["runtime"]
    return _load


@pytest.fixture
def module(nvidia_ctk, tmp_path):
    def _run(*flags: str, **args) -> tuple[int, dict]:
        args.setdefault("nvidia_ctk", nvidia_ctk)
        # Never the test machine's /var/backups.
        args.setdefault("backup_dir", str(tmp_path / "backups"))
        cp = run(["ansible", "localhost", "-c", "local", "-m", "k8sgpu.nvidia.container_runtime_config",
                  "-a", json.dumps(args), *flags], env_extra={"ANSIBLE_CALLBACK_RESULT_FORMAT": "json"})
        out = cp.stdout
        assert "=>" in out, cp.stdout + cp.stderr
        body = out.split("=>", 1)[1]
        # --diff prints the diff after the result; the result is the first JSON object.
        result = json.JSONDecoder().raw_decode(body.strip())[0]
        return cp.returncode, result | {"_stdout": out}
    return _run


def containerd_paths(tmp_path: Path) -> tuple[Path, Path]:
    return tmp_path / "etc/containerd/config.toml", tmp_path / "etc/containerd/conf.d/99-nvidia.toml"


def test_containerd_v2_drop_in_imports_and_idempotence(module, tmp_path):
    config, drop_in = containerd_paths(tmp_path)
    config.parent.mkdir(parents=True)
    config.write_bytes(V2)
    config.chmod(0o600)
    rc, res = module(runtime="containerd", config_path=str(config), drop_in_path=str(drop_in))
    assert rc == 0 and res["changed"], res
    text = drop_in.read_text()
    assert 'default_runtime_name = "nvidia"' in text
    assert 'BinaryName = "/usr/bin/nvidia-container-runtime"' in text
    assert '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]' in text
    main = config.read_text()
    assert f'imports = ["{drop_in.parent}/*.toml"]' in main  # the real directory, not the scratch one
    assert 'snapshotter = "overlayfs"' in main
    assert oct(config.stat().st_mode & 0o777) == "0o600"  # mode kept
    by_path = {f["path"]: f for f in res["files"]}
    assert by_path[str(drop_in)]["created"] and not by_path[str(config)]["created"]
    assert Path(by_path[str(config)]["backup_file"]).read_bytes() == V2
    before = {p: p.read_bytes() for p in (config, drop_in)}
    mtimes = {p: p.stat().st_mtime_ns for p in (config, drop_in)}
    rc, res = module(runtime="containerd", config_path=str(config), drop_in_path=str(drop_in))
    assert rc == 0 and not res["changed"], res
    assert {p: p.read_bytes() for p in before} == before
    assert {p: p.stat().st_mtime_ns for p in mtimes} == mtimes  # not rewritten


def test_containerd_v3_keeps_runc_options(module, tmp_path):
    config, drop_in = containerd_paths(tmp_path)
    config.parent.mkdir(parents=True)
    config.write_bytes(V3)
    rc, res = module(runtime="containerd", config_path=str(config), drop_in_path=str(drop_in))
    assert rc == 0 and res["changed"], res
    text = drop_in.read_text()
    assert '[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.nvidia.options]' in text
    assert "SystemdCgroup = true" in text.split("runtimes.nvidia.options]")[1].split("[")[0]
    assert 'default_runtime_name = "nvidia"' in text


def test_check_mode_and_diff_write_nothing(module, tmp_path):
    config, drop_in = containerd_paths(tmp_path)
    config.parent.mkdir(parents=True)
    config.write_bytes(V2)
    rc, res = module("--check", "--diff", runtime="containerd", config_path=str(config), drop_in_path=str(drop_in))
    assert rc == 0 and res["changed"], res
    assert config.read_bytes() == V2 and not drop_in.exists()
    assert not (tmp_path / "backups").exists()  # no backup either
    assert f'+imports = ["{drop_in.parent}/*.toml"]' in res["_stdout"]
    assert '+      default_runtime_name = "nvidia"' in res["_stdout"]


def test_missing_config_gets_version_2(module, tmp_path):
    config, drop_in = containerd_paths(tmp_path)
    rc, res = module(runtime="containerd", config_path=str(config), drop_in_path=str(drop_in))
    assert rc == 0 and res["changed"], res
    assert "version = 2" in config.read_text() and drop_in.exists()
    assert all(f["created"] for f in res["files"])


def test_existing_imports_are_kept_without_duplicates(module, tmp_path):
    config, drop_in = containerd_paths(tmp_path)
    config.parent.mkdir(parents=True)
    config.write_text(f'imports = ["/etc/site/*.toml", "{drop_in.parent}/*.toml"]\nversion = 2\n')
    rc, res = module(runtime="containerd", config_path=str(config), drop_in_path=str(drop_in))
    assert rc == 0, res
    assert f'"/etc/site/*.toml", "{drop_in.parent}/*.toml"' in config.read_text()
    assert config.read_text().count(f"{drop_in.parent}/*.toml") == 1


def test_symlinked_config_keeps_the_link(module, tmp_path):
    config, drop_in = containerd_paths(tmp_path)
    real = tmp_path / "site/containerd.toml"
    real.parent.mkdir(parents=True)
    real.write_bytes(V2)
    config.parent.mkdir(parents=True)
    config.symlink_to(real)
    rc, res = module(runtime="containerd", config_path=str(config), drop_in_path=str(drop_in))
    assert rc == 0 and res["changed"], res
    assert config.is_symlink() and "imports" in real.read_text()


def test_crio_writes_only_its_drop_in(module, tmp_path):
    config = tmp_path / "etc/crio/crio.conf"
    drop_in = tmp_path / "etc/crio/crio.conf.d/99-nvidia.toml"
    rc, res = module(runtime="crio", config_path=str(config), drop_in_path=str(drop_in))
    assert rc == 0 and res["changed"], res
    text = drop_in.read_text()
    assert 'default_runtime = "nvidia"' in text
    assert 'runtime_path = "/usr/bin/nvidia-container-runtime"' in text
    assert not config.exists()
    rc, res = module(runtime="crio", config_path=str(config), drop_in_path=str(drop_in))
    assert rc == 0 and not res["changed"]


def test_invalid_toml_fails_naming_the_file_and_changes_nothing(module, tmp_path):
    config, drop_in = containerd_paths(tmp_path)
    config.parent.mkdir(parents=True)
    bad = b"version = 2\n[plugins\nthis is not toml\n"
    config.write_bytes(bad)
    rc, res = module(runtime="containerd", config_path=str(config), drop_in_path=str(drop_in))
    assert rc != 0, res
    assert str(config) in res["msg"] and "nothing was changed" in res["msg"]
    assert config.read_bytes() == bad and not drop_in.exists()


def test_missing_nvidia_ctk_fails_clearly(module, tmp_path):
    config, drop_in = containerd_paths(tmp_path)
    rc, res = module(runtime="containerd", config_path=str(config), drop_in_path=str(drop_in),
                     nvidia_ctk=str(tmp_path / "no-such-nvidia-ctk"))
    assert rc != 0 and "nvidia-container-toolkit-base" in res["msg"]
    assert not config.exists()


def crio_paths(tmp_path: Path) -> tuple[Path, Path]:
    return tmp_path / "etc/crio/crio.conf", tmp_path / "etc/crio/crio.conf.d/99-nvidia.toml"


def test_crio_loads_the_last_change_not_a_backup(module, crio_effective_config, tmp_path):
    """Two successive changes of the drop-in: CRI-O reads every file of crio.conf.d in lexical order, so a backup
    of the first change beside the drop-in would be read last and win."""
    config, drop_in = crio_paths(tmp_path)
    drop_in.parent.mkdir(parents=True)
    (drop_in.parent / "50-site.toml").write_text('[crio.runtime]\nlog_size_max = 4096\n')
    first, second = "/usr/bin/nvidia-container-runtime", "/opt/nvidia/bin/nvidia-container-runtime"
    rc, res = module(runtime="crio", config_path=str(config), drop_in_path=str(drop_in), runtime_path=first)
    assert rc == 0 and res["changed"], res
    assert crio_effective_config(config, drop_in.parent)["runtimes"]["nvidia"]["runtime_path"] == first
    rc, res = module(runtime="crio", config_path=str(config), drop_in_path=str(drop_in), runtime_path=second)
    assert rc == 0 and res["changed"], res
    effective = crio_effective_config(config, drop_in.parent)
    assert effective["runtimes"]["nvidia"]["runtime_path"] == second, sorted(os.listdir(drop_in.parent))
    assert effective["default_runtime"] == "nvidia" and effective["log_size_max"] == 4096
    assert sorted(os.listdir(drop_in.parent)) == ["50-site.toml", "99-nvidia.toml"]
    backup = Path(next(f["backup_file"] for f in res["files"] if f["path"] == str(drop_in)))
    assert backup.is_relative_to(tmp_path / "backups") and first in backup.read_text()


def test_old_backups_beside_the_crio_drop_in_are_moved_out(module, crio_effective_config, tmp_path):
    """A host where an earlier version left a backup in crio.conf.d: CRI-O loads it after the drop-in."""
    config, drop_in = crio_paths(tmp_path)
    rc, res = module(runtime="crio", config_path=str(config), drop_in_path=str(drop_in))
    assert rc == 0 and res["changed"], res
    old = drop_in.parent / "99-nvidia.toml.4242.2026-05-04@10:21:07~"
    old.write_text('[crio.runtime]\ndefault_runtime = "runc"\n')
    assert crio_effective_config(config, drop_in.parent)["default_runtime"] == "runc"  # the stale backup wins
    before = drop_in.read_bytes()

    rc, res = module("--check", runtime="crio", config_path=str(config), drop_in_path=str(drop_in))
    moved = [{"src": str(old), "dest": f"{tmp_path}/backups{old}"}]
    assert rc == 0 and res["changed"] and res["backups_moved"] == moved, res
    assert old.exists()

    rc, res = module(runtime="crio", config_path=str(config), drop_in_path=str(drop_in))
    assert rc == 0 and res["changed"] and res["backups_moved"] == moved, res
    assert not any(f["changed"] for f in res["files"]) and drop_in.read_bytes() == before
    assert sorted(os.listdir(drop_in.parent)) == ["99-nvidia.toml"]
    assert Path(moved[0]["dest"]).read_text() == '[crio.runtime]\ndefault_runtime = "runc"\n'
    assert crio_effective_config(config, drop_in.parent)["default_runtime"] == "nvidia"

    rc, res = module(runtime="crio", config_path=str(config), drop_in_path=str(drop_in))
    assert rc == 0 and not res["changed"] and res["backups_moved"] == [], res


def test_backup_dir_inside_the_drop_in_directory_is_refused(module, tmp_path):
    config, drop_in = crio_paths(tmp_path)
    rc, res = module(runtime="crio", config_path=str(config), drop_in_path=str(drop_in),
                     backup_dir=str(drop_in.parent / "backups"))
    assert rc != 0 and f"is inside {drop_in.parent}" in res["msg"] and "Nothing was changed" in res["msg"], res
    assert not drop_in.exists()


REGISTRY_SECRETS = ("Reg-Pw-5e1f", "QXV0aC1iNjQ=", "Ident-Tok-7a2c", "Mirror-Pw-9d3b")
V2_WITH_CREDENTIALS = f"""version = 2
[plugins."io.containerd.grpc.v1.cri".registry.configs."registry.corp:5000".auth]
  username = "puller"
  password = "{REGISTRY_SECRETS[0]}"
  auth = "{REGISTRY_SECRETS[1]}"
  identitytoken = "{REGISTRY_SECRETS[2]}"
[plugins."io.containerd.grpc.v1.cri".registry.mirrors."docker.io"]
  endpoint = ["https://pull:{REGISTRY_SECRETS[3]}@mirror.corp"]
""".encode()


def test_registry_credentials_never_in_the_diff_or_verbose_output(module, tmp_path):
    """Issue 34.8: the real nvidia-ctk rewrites the main file (imports) in its own layout; the diff and -vvv output
    show it redacted (auth table, mirror userinfo), the file keeps the credentials, and its mode is kept."""
    config, drop_in = containerd_paths(tmp_path)
    config.parent.mkdir(parents=True)
    config.write_bytes(V2_WITH_CREDENTIALS)
    config.chmod(0o600)
    rc, res = module("--diff", "-vvv", runtime="containerd", config_path=str(config), drop_in_path=str(drop_in))
    assert rc == 0 and res["changed"], res
    for secret in REGISTRY_SECRETS:
        assert secret not in res["_stdout"], f"{secret} printed"
        assert secret in config.read_text()
    assert 'password = "********"' in res["_stdout"] and "https://********@mirror.corp" in res["_stdout"]
    assert oct(config.stat().st_mode & 0o777) == "0o600"
