"""Issue 51 item 4: the driver role's apt failures name the proxy the fetch went through - driver_apt_proxy
(k8sgpu_apt_proxy by default) and, for driver_source=nvidia, driver_nvidia_repo_proxy - with its URL, never its
password, as container_toolkit's messages do; and the source (the distribution's, or NVIDIA's repository with the
branch). The message is the role's own variable _driver_apt_failure (vars/main.yml), rendered here with the role's
defaults and vars as Ansible does (ansible.template.Templar). Before this change the message was "apt said: ..." alone
(the variable did not exist: every case fails on that code)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from ansible.release import __version__ as ANSIBLE_VERSION

if tuple(int(part) for part in ANSIBLE_VERSION.split(".")[:2]) < (2, 19):
    pytest.skip("renders with ansible.template.trust_as_template, which ansible-core %s lacks" % ANSIBLE_VERSION,
                allow_module_level=True)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_role_templates_hostile import COLLECTIONS, ROOT, base_vars  # noqa: E402

REPO = {"name": "debian12", "arch": "x86_64", "key_file": "3bf863cc.pub",
        "fingerprint": "EB693B3035CD5710E231E123A4B469963BF863CC"}


def _render(values: dict) -> str:
    from ansible.template import Templar, trust_as_template
    loader, variables = base_vars("driver")
    variables = dict(variables, inventory_hostname="gpu-01", _driver_decisions={"repository": REPO}, **values)
    return Templar(loader=loader, variables=variables).template(trust_as_template("{{ _driver_apt_failure }}"))


def failure(**values) -> str:
    """The render, in a process of its own (the collection's filters need Ansible's collection loader, as
    test_role_templates_hostile.py says)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(COLLECTIONS), os.path.dirname(os.path.abspath(__file__)),
                                                       os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, __file__, json.dumps(values)], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def test_the_distributions_source_and_the_sites_proxy_without_its_password():
    text = failure(k8sgpu_apt_proxy="http://ci:s3cret@proxy.example:3128")
    assert text == ("From the distribution's sources. Proxy: driver_apt_proxy (k8sgpu_apt_proxy) "
                    "http://ci:***@proxy.example:3128."), text
    assert "s3cret" not in text


def test_no_proxy_says_so():
    assert failure().endswith("Proxy: no apt proxy (driver_apt_proxy, k8sgpu_apt_proxy unset)."), failure()


def test_nvidias_repository_its_branch_and_both_proxies():
    text = failure(driver_source="nvidia", driver_branch="580", driver_version="580.95.05",
                   k8sgpu_apt_proxy="http://proxy.example:3142", driver_nvidia_repo_proxy="http://u:pw@fw.example:3128")
    source = "https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64"
    assert text == (f"From NVIDIA's repository {source} (driver_nvidia_repo_url), branch 580 version 580.95.05: check "
                    "that it has the branch (driver_branch, driver_version). Proxy: driver_nvidia_repo_proxy "
                    f"http://u:***@fw.example:3128 for {source}; driver_apt_proxy (k8sgpu_apt_proxy) "
                    "http://proxy.example:3142."), text
    assert ":pw@" not in text


if __name__ == "__main__":
    from ansible.plugins.loader import init_plugin_loader
    init_plugin_loader([str(COLLECTIONS)])
    print(json.dumps(_render(json.loads(sys.argv[1]))))
