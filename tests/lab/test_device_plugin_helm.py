"""device_plugin's Helm path (device_plugin_install_method: helm) against the lab: NVIDIA's own chart, from the device
plugin's Go module at the role's version (github.com/NVIDIA/k8s-device-plugin, deployments/helm/nvidia-device-plugin,
through the Go module proxy), installed by kubernetes.core.helm with Helm built from the Go module proxy
(lab/build-binaries.sh helm): install with the role's rollout and GPU wait, a change (time-slicing), a re-run with no
change, removal. In a namespace and under names of its own, beside the lab's manifest-installed plugin."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import time

import pytest
import yaml
from kubernetes import client

from ansible_output import recap
from conftest import GPU_NODES, HELM_DIR, KUBECTL, LAB_CACHE, ROOT, build_for, run
from k8sgpu_testlib.k8s_api import ignore_404

NS = "k8sgpu-dp-helm"
NAME = "nvidia-device-plugin-helm"
RELEASE = "k8sgpu-dp-helm"
GPU_LABEL = "nvidia.com/gpu.present"
MODULE = "github.com/NVIDIA/k8s-device-plugin"
VERSION = yaml.safe_load((ROOT / "roles" / "device_plugin" / "defaults" / "main.yml").read_text())[
    "device_plugin_version"]


def changed(res: subprocess.CompletedProcess) -> int:
    return recap(res.stdout).get("localhost", {}).get("changed", -1)


def out(res: subprocess.CompletedProcess) -> str:
    return res.stdout[-6000:] + res.stderr[-3000:]


@pytest.fixture(scope="module")
def chart() -> str:
    """The chart inside the device plugin's Go module (downloaded once into the lab's Go module cache)."""
    if not shutil.which("go"):
        pytest.skip("no Go: the chart comes from the device plugin's Go module")
    env = {**os.environ, "GOMODCACHE": os.environ.get("GOMODCACHE_LAB", str(LAB_CACHE / "go" / "mod")),
           "GOFLAGS": ""}
    res = subprocess.run(["go", "mod", "download", "-json", f"{MODULE}@{VERSION}"], capture_output=True, text=True,
                         env=env, timeout=300, check=False)
    assert res.returncode == 0, res.stdout + res.stderr
    path = os.path.join(json.loads(res.stdout)["Dir"], "deployments", "helm", "nvidia-device-plugin")
    assert os.path.isfile(os.path.join(path, "Chart.yaml")), path
    return path


@pytest.fixture(scope="module")
def lab(request, core, chart):
    build_for(request.config, ["lab/build-binaries.sh", "helm"])
    apps = client.AppsV1Api(core.api_client)

    def helm(*args: str) -> subprocess.CompletedProcess:
        res = subprocess.run([str(HELM_DIR / "helm"), "--kubeconfig", KUBECTL[-1], *args], capture_output=True,
                             text=True, timeout=300, check=False)
        assert res.returncode == 0, res.stderr
        return res

    def release() -> dict | None:
        listed = json.loads(helm("list", "-n", NS, "--all", "-o", "json").stdout or "[]")
        return next((r for r in listed if r["name"] == RELEASE), None)

    def clean() -> None:
        if NS in {n.metadata.name for n in core.list_namespace().items}:
            if release():
                helm("uninstall", RELEASE, "-n", NS, "--wait")
            ignore_404(core.delete_namespace, NS)
            for _attempt in range(600):
                if NS not in {n.metadata.name for n in core.list_namespace().items}:
                    break
                time.sleep(0.2)
            else:
                raise AssertionError(f"namespace {NS} not deleted after 120 s")

    clean()
    # The role never creates its namespace.
    core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    added = [n for n in GPU_NODES if (core.read_node(n).metadata.labels or {}).get(GPU_LABEL) != "true"]
    for n in added:
        core.patch_node(n, {"metadata": {"labels": {GPU_LABEL: "true"}}})

    def role(**extra) -> subprocess.CompletedProcess:
        variables = {"role": "device_plugin", "device_plugin_install_method": "helm",
                     "device_plugin_helm_chart_ref": chart, "device_plugin_namespace": NS,
                     "device_plugin_name": NAME, "device_plugin_helm_release": RELEASE, **extra}
        return run(["ansible-playbook", "-i", "inventories/lab", "tests/lab/playbooks/role.yml",
                    "-e", json.dumps(variables)], env_extra={"PATH": f"{HELM_DIR}:{os.environ['PATH']}"})

    yield {"role": role, "release": release, "apps": apps}
    clean()
    for n in added:
        core.patch_node(n, {"metadata": {"labels": {GPU_LABEL: None}}})


def test_install_change_rerun_remove(lab, core):
    res = lab["role"]()
    assert res.returncode == 0 and changed(res) >= 1, out(res)
    rel = lab["release"]()
    assert rel["status"] == "deployed" and rel["chart"] == f"nvidia-device-plugin-{VERSION.lstrip('v')}", rel
    ds = lab["apps"].read_namespaced_daemon_set(NAME, NS)
    term = ds.spec.template.spec.affinity.node_affinity.required_during_scheduling_ignored_during_execution
    assert term.node_selector_terms[0].match_expressions[0].key == GPU_LABEL
    assert ds.status.number_ready == ds.status.desired_number_scheduled >= len(GPU_NODES)  # the role's wait

    res = lab["role"]()
    assert res.returncode == 0 and changed(res) == 0, out(res)

    res = lab["role"](device_plugin_time_slicing_replicas=4)
    assert res.returncode == 0 and changed(res) >= 1, out(res)
    assert lab["release"]()["revision"] == "2"
    config = yaml.safe_load(core.read_namespaced_config_map(f"{NAME}-configs", NS).data["default"])
    assert config["sharing"]["timeSlicing"]["resources"][0]["replicas"] == 4, config
    res = lab["role"](device_plugin_time_slicing_replicas=4)
    assert res.returncode == 0 and changed(res) == 0, out(res)

    res = lab["role"](device_plugin_state="absent")
    assert res.returncode == 0 and changed(res) >= 1, out(res)
    assert lab["release"]() is None
    assert NAME not in [d.metadata.name for d in lab["apps"].list_namespaced_daemon_set(NS).items]
    res = lab["role"](device_plugin_state="absent")
    assert res.returncode == 0 and changed(res) == 0, out(res)
