"""playbooks/eks.yml's k8sgpu_aws_endpoint_url (issue 46 item 5): the collection's modules' endpoint rule (https, or
plain http only on loopback: check_endpoint of module_utils/_aws_common.py, through filter aws_endpoint_check) before
any AWS call.

The playbook gives the endpoint, through module_defaults, to amazon.aws's modules too (iam_role, iam_policy,
ec2_launch_template), which have no such check: before it, a plain-http endpoint off loopback received their
SigV4-signed requests and the session token. Here a capture server listens on this machine's own non-loopback
address (nothing leaves the machine) and records every request. What is proven: amazon.aws.iam_role alone does send
the signature and the token there (so the capture is real); the playbook, with that endpoint or with
http://192.0.2.10:5000 (no server there), fails at its first task naming the variable and the fix, for the
cluster's creation, the teardown and a run started at the first AWS task (module_defaults check it too), and the
capture server receives nothing. A loopback endpoint (moto on 127.0.0.1) still works: test_eks_playbook_cluster.py
and test_eks_playbook_pod_identity.py run the playbook against it. What is not: anything about a real network path.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from conftest import CREDS, REGION, ROOT, own_address, run_module
from test_aws_endpoints import capture_server

TOKEN = "aws-session-marker-46e5a7"
CHECK_TASK = "Check the settings - k8sgpu_aws_endpoint_url (https, or http only on loopback)"
FIRST_AWS_TASK = "Cluster - the cluster's IAM role (trusted by EKS, AmazonEKSClusterPolicy)"
ROLE = "k8sgpu.nvidia.eks_gpu_pool"  # the playbook's role: its tasks' banners are "TASK [<role> : <name>]"


@pytest.fixture
def off_loopback():
    """A capture server on this machine's non-loopback address: (its URL, the requests it received)."""
    address = own_address()
    if address is None:
        pytest.fail("this machine has no address other than loopback for the capture server")
    with capture_server(address) as served:
        yield served


def env() -> dict:
    return {**{k: v for k, v in os.environ.items() if not k.startswith("AWS_")},
            "AWS_ACCESS_KEY_ID": CREDS["aws_access_key_id"], "AWS_SECRET_ACCESS_KEY": CREDS["aws_secret_access_key"],
            "AWS_SESSION_TOKEN": TOKEN, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_FORCE_COLOR": "0",
            "ANSIBLE_NOCOLOR": "1", "ANSIBLE_STDOUT_CALLBACK": "default", "ANSIBLE_LOCALHOST_WARNING": "0",
            "ANSIBLE_INVENTORY_UNPARSED_WARNING": "0"}


def play(url: str, *args: str) -> tuple[int, str]:
    """eks.yml with the cluster opt-in (its first AWS call: amazon.aws.iam_role) and the given endpoint."""
    extra = {"k8sgpu_aws_endpoint_url": url, "k8sgpu_aws_region": REGION,
             "ansible_python_interpreter": sys.executable, "k8sgpu_eks_device_plugin": False,
             "k8sgpu_eks_verify": False, "k8sgpu_eks_cluster_name": "train", "k8sgpu_eks_cluster_state": "present",
             "k8sgpu_eks_cluster": {"subnets": ["subnet-0a", "subnet-0b"]},
             "k8sgpu_eks_nodegroup": {"name": "gpu", "instance_types": ["g5.xlarge"]}}
    proc = subprocess.run(["ansible-playbook", "-i", "localhost,", "playbooks/eks.yml", "-e", json.dumps(extra), *args],
                          cwd=ROOT, env=env(), capture_output=True, text=True, timeout=300, check=False)
    return proc.returncode, proc.stdout + proc.stderr


def recap(out: str) -> dict:
    m = re.search(r"localhost\s+:\s+ok=(\d+)\s+changed=(\d+)\s+unreachable=\d+\s+failed=(\d+)", out)
    assert m, out[-3000:]
    return {"ok": int(m[1]), "changed": int(m[2]), "failed": int(m[3])}


def test_amazon_aws_module_sends_signed_requests_to_the_capture(off_loopback):
    """What the check prevents: amazon.aws.iam_role, as eks.yml runs it, signs its request and sends it, with the
    session token, to a plain-http endpoint off loopback."""
    url, seen = off_loopback
    run_module("amazon.aws.iam_role", {"name": "probe", "state": "absent", "endpoint_url": url, "region": REGION},
               {**env(), "ANSIBLE_STDOUT_CALLBACK": "json", "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1"},
               check=False, diff=False, python=sys.executable)
    assert seen, f"amazon.aws.iam_role sent nothing to {url}"
    assert seen[0]["authorization"].startswith("AWS4-HMAC-SHA256 Credential=testing/") and seen[0]["token"] == TOKEN


@pytest.mark.parametrize("how", [(), ("-e", "k8sgpu_eks_state=absent"), ("--tags", "eks_teardown")],
                         ids=["present", "absent", "teardown-tag"])
def test_plain_http_endpoint_off_loopback_refused_before_any_request(off_loopback, how):
    url, seen = off_loopback
    rc, out = play(url, *how)
    assert rc != 0 and seen == [], f"requests sent to {url}: {seen}\n{out[-3000:]}"
    assert recap(out) == {"ok": 0, "changed": 0, "failed": 1}, out[-3000:]
    assert f"TASK [{CHECK_TASK}]" in out and f"TASK [{ROLE} :" not in out, out[-3000:]
    flat = " ".join(out.split())
    assert (f"aws_endpoint_check: k8sgpu_aws_endpoint_url {url} is plain http on {url[7:].rsplit(':', 1)[0]}, "
            "not a loopback address") in flat, flat[-3000:]
    assert "Use the endpoint's https:// URL, or a loopback address (127.0.0.1, ::1, localhost)" in flat
    assert TOKEN not in out


def test_documentation_address_refused_without_a_server():
    """http://192.0.2.10:5000 (TEST-NET-1: nothing listens there): refused at the check task, not at a connection."""
    rc, out = play("http://192.0.2.10:5000")
    flat = " ".join(out.split())
    assert rc != 0 and recap(out) == {"ok": 0, "changed": 0, "failed": 1}, out[-3000:]
    assert "k8sgpu_aws_endpoint_url http://192.0.2.10:5000 is plain http on 192.0.2.10" in flat, flat[-3000:]
    assert f"TASK [{CHECK_TASK}]" in out and f"TASK [{ROLE} :" not in out


def test_module_defaults_check_it_too(off_loopback):
    """--start-at-task skips the check task (tags [always] do not run before the start task): the module_defaults
    that give the endpoint to every AWS module check it too, so the first AWS task fails before sending anything."""
    url, seen = off_loopback
    rc, out = play(url, "--start-at-task", FIRST_AWS_TASK)
    assert rc != 0 and seen == [], f"requests sent to {url}: {seen}\n{out[-3000:]}"
    assert f"TASK [{ROLE} : {FIRST_AWS_TASK}]" in out, out[-3000:]
    flat = " ".join(out.split())
    assert f"k8sgpu_aws_endpoint_url {url} is plain http" in flat, flat[-3000:]
    assert TOKEN not in out


@pytest.mark.parametrize("url", ["http://user:pw-marker@127.0.0.1:5000", "ftp://127.0.0.1:5000",
                                 "http://127.0.0.1:5000\nX-Injected: 1"],
                         ids=["user-information", "scheme", "newline"])
def test_other_refused_endpoints(url):
    rc, out = play(url)
    flat = " ".join(out.split())
    assert rc != 0 and recap(out) == {"ok": 0, "changed": 0, "failed": 1}, out[-3000:]
    assert "aws_endpoint_check: k8sgpu_aws_endpoint_url" in flat, flat[-3000:]
    assert "pw-marker" not in out
