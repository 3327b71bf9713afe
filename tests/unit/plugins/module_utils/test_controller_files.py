"""Files on the controller (issue 46 item 4): module_utils/_controller_files.py directly, and the roles gpu_alerts,
dcgm_exporter (through k8s_apply) and gpu_metrics_adapter in localhost-only playbook runs that need no cluster (the
PrometheusRule/ServiceMonitor CRD mode never, the adapter's mode rules_only with its Prometheus check off)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ansible_collections.k8sgpu.nvidia.plugins.module_utils import _controller_files as cf

ROOT = Path(__file__).resolve().parents[4]


# --- the rule -------------------------------------------------------------------------------------------------

def test_relative_paths_go_under_playbook_dir(tmp_path):
    assert cf.resolve("v", "out/rules.yml", str(tmp_path)) == str(tmp_path / "out" / "rules.yml")


@pytest.mark.parametrize("value,text", [
    ("../rules.yml", "'..' component"),
    ("out/../../x", "'..' component"),
    ("/etc/cron.d/x", "outside the directories this run writes in"),
    ("rules.yml\nx", "control character"),
    ("", "non-empty path"),
])
def test_paths_outside_the_run_are_refused_naming_the_variable(tmp_path, value, text):
    with pytest.raises(cf.ControllerFileError) as err:
        cf.plan("gpu_alerts_rules_file_path", value, "gpu_alerts", str(tmp_path / "play"))
    assert str(err.value).startswith("gpu_alerts_rules_file_path") and text in str(err.value), err.value


def test_absolute_paths_under_the_site_directory_pass_and_the_directory_itself_is_refused(tmp_path):
    site = tmp_path / "site-out"
    assert cf.resolve("v", str(site / "a.yml"), str(tmp_path / "play"), str(site)) == str(site / "a.yml")
    with pytest.raises(cf.ControllerFileError):
        cf.resolve("v", str(site), str(tmp_path / "play"), str(site))
    with pytest.raises(cf.ControllerFileError, match="k8sgpu_controller_dir .* must be an absolute path"):
        cf.resolve("v", "a.yml", str(tmp_path), "relative")


def test_a_link_out_of_the_root_is_refused(tmp_path):
    play = tmp_path / "play"
    play.mkdir()
    (play / "out").symlink_to("/etc")
    with pytest.raises(cf.ControllerFileError, match="outside the directories"):
        cf.plan("v", "out/x.yml", "gpu_alerts", str(play))
    (play / "link.yml").symlink_to(tmp_path / "elsewhere.yml")
    with pytest.raises(cf.ControllerFileError, match="not a regular file"):
        cf.plan("v", "link.yml", "gpu_alerts", str(play))


def test_an_unmarked_file_is_refused_a_marked_one_keeps_its_mode(tmp_path):
    other = tmp_path / "rules.yml"
    other.write_text("groups: []\n")
    with pytest.raises(cf.ControllerFileError) as err:
        cf.plan("gpu_alerts_rules_file_path", "rules.yml", "gpu_alerts", str(tmp_path))
    assert str(other) in str(err.value) and "remove it" in str(err.value) and "another path" in str(err.value)
    # Another role's marker is not this role's.
    other.write_text(cf.marker("dcgm_exporter") + "x\n")
    with pytest.raises(cf.ControllerFileError):
        cf.plan("gpu_alerts_rules_file_path", "rules.yml", "gpu_alerts", str(tmp_path))
    other.write_text(cf.marker("gpu_alerts") + "x\n")
    other.chmod(0o640)
    got = cf.plan("gpu_alerts_rules_file_path", "rules.yml", "gpu_alerts", str(tmp_path))
    assert got["managed"] and got["mode"] == "0640" and got["marker"] == cf.marker("gpu_alerts")
    fresh = cf.plan("v", "new/rules.yml", "gpu_alerts", str(tmp_path), secret=True)
    assert fresh["mode"] == "0600" and fresh["directory_missing"] and not fresh["exists"]


def test_pem_kind_accepts_only_pem_blocks(tmp_path):
    pem = "-----BEGIN CERTIFICATE-----\nMIIB\nAAAA==\n-----END CERTIFICATE-----\n"
    (tmp_path / "ca.crt").write_text(pem)
    assert cf.plan("v", "ca.crt", "gpu_metrics_adapter", str(tmp_path), kind="pem")["managed"]
    (tmp_path / "tls.key").write_text("export PATH=/evil:$PATH\n")
    with pytest.raises(cf.ControllerFileError, match="PEM blocks only"):
        cf.plan("v", "tls.key", "gpu_metrics_adapter", str(tmp_path), kind="pem")


def test_removal_leaves_an_unrelated_file_and_says_why(tmp_path):
    (tmp_path / "rules.yml").write_text("mine\n")
    got = cf.removable("gpu_alerts_rules_file_path", "rules.yml", "gpu_alerts", str(tmp_path))
    assert got["remove"] is False and "It stays." in got["reason"]
    (tmp_path / "rules.yml").write_text(cf.marker("gpu_alerts"))
    assert cf.removable("v", "rules.yml", "gpu_alerts", str(tmp_path))["remove"] is True
    assert cf.removable("v", "/etc/passwd", "gpu_alerts", str(tmp_path))["remove"] is False


# --- the roles, on localhost ----------------------------------------------------------------------------------

PLAY = """- hosts: localhost
  gather_facts: false
  tasks:
    - ansible.builtin.import_role:
        name: k8sgpu.nvidia.{role}
"""


def run_role(tmp_path: Path, role: str, extra: dict, *args: str) -> subprocess.CompletedProcess:
    play = tmp_path / "play" / "play.yml"
    play.parent.mkdir(exist_ok=True)
    play.write_text(PLAY.format(role=role))
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}
    cmd = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", "-c", "local", str(play),
           "-e", json.dumps({"ansible_python_interpreter": sys.executable, **extra}), *args]
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=ROOT,
                          check=False, timeout=300)


def flat(text: str) -> str:
    return " ".join(text.split())


# The DCGM exporter's DaemonSet needs a cluster: only its scrape configuration's tasks run (and its input check).
ROLES = [
    ("gpu_alerts", "gpu_alerts_rules_file_path", {"gpu_alerts_prometheus_rule": "never"}, ()),
    ("dcgm_exporter", "dcgm_exporter_scrape_config_path", {"dcgm_exporter_service_monitor": "never"},
     ("--tags", "dcgm_exporter_scrape")),
]


@pytest.mark.parametrize("role,variable,extra,args", ROLES, ids=[r[0] for r in ROLES])
def test_an_unrelated_file_stays_byte_identical_with_its_mode(tmp_path, role, variable, extra, args):
    bashrc = tmp_path / "play" / ".bashrc"
    bashrc.parent.mkdir()
    bashrc.write_bytes(b"export PATH=$HOME/bin:$PATH\n")
    bashrc.chmod(0o600)
    res = run_role(tmp_path, role, {**extra, variable: ".bashrc"}, *args)
    assert res.returncode != 0
    out = flat(res.stdout)
    assert f"{variable}: {bashrc} exists and is not a file of the role" in out, res.stdout[-3000:]
    assert "remove it if nothing else uses it, or set " + variable in out
    assert bashrc.read_bytes() == b"export PATH=$HOME/bin:$PATH\n" and (bashrc.stat().st_mode & 0o777) == 0o600


@pytest.mark.parametrize("role,variable,extra,args", ROLES, ids=[r[0] for r in ROLES])
def test_a_path_outside_the_run_is_refused_before_anything_is_written(tmp_path, role, variable, extra, args):
    target = tmp_path / "outside" / "x.yml"
    res = run_role(tmp_path, role, {**extra, variable: str(target)}, *args)
    assert res.returncode != 0 and f"{variable} ({target}) is {target} on the controller, outside" in flat(res.stdout)
    assert not target.parent.exists()
    # The site's directory lets it through.
    res = run_role(tmp_path, role, {**extra, variable: str(target), "k8sgpu_controller_dir": str(tmp_path / "outside")},
                   *args)
    assert res.returncode == 0, res.stdout[-3000:]
    assert target.read_text().startswith(cf.marker(role))


def test_gpu_alerts_writes_its_marker_and_keeps_the_mode_of_its_own_file(tmp_path):
    extra = {"gpu_alerts_prometheus_rule": "never"}
    res = run_role(tmp_path, "gpu_alerts", extra)
    assert res.returncode == 0, res.stdout[-3000:]
    path = tmp_path / "play" / "gpu-alerts.rules.yml"
    assert path.read_text().startswith(cf.marker("gpu_alerts")) and (path.stat().st_mode & 0o777) == 0o644
    path.chmod(0o640)
    res = run_role(tmp_path, "gpu_alerts", {**extra, "gpu_alerts_for": "10m"})
    assert res.returncode == 0, res.stdout[-3000:]
    assert (path.stat().st_mode & 0o777) == 0o640


def test_gpu_metrics_adapter_refuses_an_unrelated_file_in_its_output_dir(tmp_path):
    out = tmp_path / "play" / "out"
    out.mkdir(parents=True)
    out.chmod(0o750)
    extra = {"gpu_metrics_adapter_mode": "rules_only", "gpu_metrics_adapter_output_dir": "out",
             "gpu_metrics_adapter_prometheus_check": "none"}
    values = out / "prometheus-adapter-values.yaml"
    values.write_bytes(b"mine: true\n")
    values.chmod(0o600)
    res = run_role(tmp_path, "gpu_metrics_adapter", extra)
    assert res.returncode != 0 and f"{values} exists and is not a file of the role" in flat(res.stdout), \
        res.stdout[-3000:]
    assert values.read_bytes() == b"mine: true\n" and (values.stat().st_mode & 0o777) == 0o600
    assert not (out / "prometheus-adapter-config.yaml").exists()  # refused before the first file
    values.unlink()
    res = run_role(tmp_path, "gpu_metrics_adapter", extra)
    assert res.returncode == 0, res.stdout[-3000:]
    for name in ("prometheus-adapter-config.yaml", "prometheus-adapter-values.yaml"):
        assert (out / name).read_text().startswith(cf.marker("gpu_metrics_adapter"))
    assert (out.stat().st_mode & 0o777) == 0o750  # the existing directory keeps its mode
    res = run_role(tmp_path, "gpu_metrics_adapter", {**extra, "gpu_metrics_adapter_output_dir": "../elsewhere"})
    assert res.returncode != 0 and "gpu_metrics_adapter_output_dir" in res.stdout and "'..'" in res.stdout
