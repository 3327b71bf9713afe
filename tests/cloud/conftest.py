"""A moto server on 127.0.0.1 as the AWS endpoint of the cloud modules' tests.

moto's ThreadedMotoServer serves EKS, Auto Scaling, EC2 and IAM over real HTTP; the modules reach it through
their endpoint_url option, with boto3 building and signing the requests as it would for AWS. The tests run the
module as a user would: `ansible localhost -c local -m k8sgpu.nvidia.eks_nodegroup`.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

# Not importorskip: without boto3 or moto these tests must fail, not pass as skipped
# (pip install -r requirements-dev.txt).
import boto3  # noqa: E402
from moto import server as moto_server  # noqa: E402

# moto loads AWS's managed IAM policies (AmazonEKSClusterPolicy, AmazonEKSWorkerNodePolicy, ...) only when asked:
# playbooks/eks.yml attaches them to the roles it creates.
os.environ.setdefault("MOTO_IAM_LOAD_MANAGED_POLICIES", "true")

ROOT = Path(__file__).resolve().parents[2]
REGION = "eu-west-1"
CREDS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing-secret"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def own_address() -> str | None:
    """This machine's address on its default route (no packet is sent: a UDP socket's connect only routes), or None
    when it has none but loopback. For the tests that need a plain-http server off loopback without a network."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))
        except OSError:
            return None
        address = s.getsockname()[0]
    return None if address.startswith("127.") else address


def run_module(module: str, args: dict, env: dict, *, check: bool, diff: bool, python: str) -> dict:
    """One module run as a user runs it (`ansible localhost -m MODULE -a ARGS`, json stdout callback): its result,
    with the exit status in `_rc` and everything printed in `_stdout`. The EKS and GKE runners both use it."""
    cmd = ["ansible", "localhost", "-c", "local", "-i", "localhost,", "-m", module,
           "-a", json.dumps(args), "-e", f"ansible_python_interpreter={python}"]
    if check:
        cmd.append("--check")
    if diff:
        cmd.append("--diff")
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    try:
        out = json.loads(proc.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"ansible printed no JSON (rc {proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    result = out["plays"][0]["tasks"][0]["hosts"]["localhost"]
    result["_rc"] = proc.returncode
    result["_stdout"] = proc.stdout + proc.stderr
    return result


def run_module_verbose(module: str, args: dict, env: dict, *, python: str, verbosity: str = "-vvv") -> tuple[int, str]:
    """One module run at -vvv with the default stdout callback, as a user reads it: (exit status, everything
    printed). For the tests that grep the output for credentials (the invocation is printed from -vvv on; since
    ansible-core 2.21 only where INJECT_INVOCATION is on, which a user may turn on: the worst case, so on here)."""
    env = {**env, "ANSIBLE_STDOUT_CALLBACK": "default", "ANSIBLE_INJECT_INVOCATION": "true"}
    cmd = ["ansible", "localhost", "-c", "local", "-i", "localhost,", verbosity, "-m", module,
           "-a", json.dumps(args), "-e", f"ansible_python_interpreter={python}"]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    return proc.returncode, proc.stdout + proc.stderr


@pytest.fixture(scope="session")
def endpoint():
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=free_port(), verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture(scope="session")
def aws(endpoint):
    """boto3 clients on the moto server, for the tests' own setup and checks."""
    session = boto3.session.Session(region_name=REGION, **CREDS)
    return {s: session.client(s, endpoint_url=endpoint) for s in ("eks", "autoscaling", "ec2", "iam")}


@pytest.fixture(scope="session")
def network(aws):
    """A node role ARN and two subnet IDs that exist in moto. moto's state is the process's: lab test files that load
    this file each get their own copy of the fixture, so the role may exist already from an earlier file."""
    iam = aws["iam"]
    try:
        role = iam.create_role(RoleName="eks-nodes", AssumeRolePolicyDocument=json.dumps({
            "Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"},
                                                    "Action": "sts:AssumeRole"}]}))["Role"]["Arn"]
    except iam.exceptions.EntityAlreadyExistsException:
        role = iam.get_role(RoleName="eks-nodes")["Role"]["Arn"]
    vpc = aws["ec2"].create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    subnets = [aws["ec2"].create_subnet(VpcId=vpc, CidrBlock=f"10.0.{i}.0/24",
                                        AvailabilityZone=f"{REGION}{z}")["Subnet"]["SubnetId"]
               for i, z in ((1, "a"), (2, "b"))]
    return {"role": role, "subnets": subnets, "vpc": vpc}


@pytest.fixture
def cluster(aws, network):
    """A fresh EKS cluster in moto for one test (its nodegroups are the test's own)."""
    name = f"train-{uuid.uuid4().hex[:8]}"
    aws["eks"].create_cluster(name=name, roleArn=network["role"],
                              resourcesVpcConfig={"subnetIds": network["subnets"]})
    return name


class Runner:
    """Runs the module through ansible's ad-hoc command and returns its JSON result."""

    def __init__(self, endpoint: str):
        self.endpoint = endpoint
        self.env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_STDOUT_CALLBACK": "json",
                    "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1", "ANSIBLE_LOCALHOST_WARNING": "0",
                    "ANSIBLE_INVENTORY_UNPARSED_WARNING": "0", "ANSIBLE_NOCOLOR": "1"}
        for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_REGION",
                  "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL"):
            self.env.pop(k, None)

    def __call__(self, args: dict, *, check: bool = False, diff: bool = False, connection: bool = True,
                 python: str = sys.executable) -> dict:
        if connection:
            args = {"endpoint_url": self.endpoint, "region": REGION, **CREDS, **args}
        return run_module("k8sgpu.nvidia.eks_nodegroup", args, self.env, check=check, diff=diff, python=python)

    def verbose(self, args: dict, python: str = sys.executable) -> tuple[int, str]:
        """The run at -vvv: (exit status, the whole output)."""
        args = {"endpoint_url": self.endpoint, "region": REGION, **args}
        return run_module_verbose("k8sgpu.nvidia.eks_nodegroup", args, self.env, python=python)


@pytest.fixture(scope="session")
def run(endpoint):
    return Runner(endpoint)


# ---- GKE: the contract server (k8sgpu_testlib.gke_contract_server) ----
GKE_PROJECT = "k8sgpu-test"
GKE_REGION = "us-central1"
GKE_TOKEN = "contract-token"


@pytest.fixture(scope="session")
def gke_server():
    """The GKE contract server on 127.0.0.1 (state: pools, operations, instance groups, request log)."""
    from k8sgpu_testlib import gke_contract_server  # pylint: disable=import-outside-toplevel

    with gke_contract_server.running() as state:
        yield state


@pytest.fixture
def gke_cluster(gke_server):
    """A fresh regional cluster (zones us-central1-a and -b) in the contract server, for one test."""
    name = f"train-{uuid.uuid4().hex[:8]}"
    gke_server.add_cluster(GKE_PROJECT, GKE_REGION, name)
    return name


class GkeRunner:
    """Runs gke_node_pool through ansible's ad-hoc command against the contract server; returns its result."""

    def __init__(self, state, tmp: Path):
        self.state = state
        gcloud = tmp / "gcloud"
        gcloud.mkdir(exist_ok=True)
        self.env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_STDOUT_CALLBACK": "json",
                    "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1", "ANSIBLE_LOCALHOST_WARNING": "0",
                    "ANSIBLE_INVENTORY_UNPARSED_WARNING": "0", "ANSIBLE_NOCOLOR": "1",
                    # application default credentials find nothing here: no gcloud config, no metadata server
                    "CLOUDSDK_CONFIG": str(gcloud), "NO_GCE_CHECK": "true", "GCE_METADATA_HOST": "127.0.0.1:9",
                    "GCE_METADATA_IP": "127.0.0.1:9"}
        for k in ("GOOGLE_APPLICATION_CREDENTIALS", "GCP_AUTH_KIND", "GCP_SERVICE_ACCOUNT_FILE", "GCP_ACCESS_TOKEN",
                  "GKE_API_ENDPOINT", "GOOGLE_CLOUD_PROJECT"):
            self.env.pop(k, None)

    def __call__(self, args: dict, *, check: bool = False, diff: bool = False, connection: bool = True,
                 module: str = "k8sgpu.nvidia.gke_node_pool", python: str = sys.executable) -> dict:
        if connection:
            args = {"api_endpoint": self.state.base, "access_token": GKE_TOKEN, "project": GKE_PROJECT,
                    "location": GKE_REGION, **args}
        return run_module(module, args, self.env, check=check, diff=diff, python=python)

    def verbose(self, args: dict, python: str = sys.executable) -> tuple[int, str]:
        """The run at -vvv against the contract server (no credentials added): (exit status, the whole output)."""
        args = {"api_endpoint": self.state.base, "project": GKE_PROJECT, "location": GKE_REGION, **args}
        return run_module_verbose("k8sgpu.nvidia.gke_node_pool", args, self.env, python=python)


@pytest.fixture(scope="session")
def gke_run(gke_server, tmp_path_factory):
    return GkeRunner(gke_server, tmp_path_factory.mktemp("gke"))
