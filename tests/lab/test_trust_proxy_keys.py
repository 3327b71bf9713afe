"""Issue 34 items 1 and 2 on a lab node: apt's proxy credentials and the repository key pin, on a real host.

A node container of the lab's recipe (lab/lab.sh node: Debian 12, systemd, on the lab's network; removed at the end)
runs two parts of the roles, through the Docker connection:

* the driver role's package sources (tasks_from sources.yml) with driver_apt_proxy set to the lab's apt-cacher-ng
  with a user and password: the proxy file is 0644 without them, the auth.conf.d file 0600 with them, and
  ``--diff -vvv`` output never holds the password; a second run changes nothing; an apt.conf injection is refused
  with the file left as it was; an empty proxy removes both files.
* the container_toolkit role's repository (tasks_from repository.yml), its key fetched through a credentialed proxy
  that runs on the node and records each request: its Proxy-Authorization, and whether any process of the node then
  has the password in its command line or environment (the module fetching the key is waiting for the answer at
  that moment). The proxy answers with the key text the test puts there: the lab's key passes its pin; a block with
  the lab's key and a second one, the lab's block with another appended, and another key are each refused naming the
  host and the key's URL, with nothing written.

On the code before issue 34 the driver wrote the password to the 0644 file and the diff, the key fetch had the
credentialed proxy in its environment (``leaks`` below), and the two-key and appended blocks passed and were written.
"""
from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ansible_output import recap
from conftest import LAB_NAME, LAB_STATE, ROOT, node_sh, run

sys.path.insert(0, str(ROOT / "collections"))
from ansible_collections.k8sgpu.nvidia.plugins.filter.openpgp_fingerprints import openpgp_fingerprints  # noqa: E402

NODE = f"{LAB_NAME}-trust-1"  # Debian 12
CACHE = Path(os.environ.get("K8SGPU_CACHE", Path.home() / ".cache/k8sgpu-lab"))
USER, PASSWORD = "alice", "S3cretPw"
PROXY_FILE, AUTH_FILE = "/etc/apt/apt.conf.d/90k8sgpu-proxy", "/etc/apt/auth.conf.d/90k8sgpu-proxy.conf"
KEYRING = "/etc/apt/keyrings/nvidia-container-toolkit.asc"
TOOLKIT_SOURCE = "/etc/apt/sources.list.d/k8sgpu-nvidia-container-toolkit.sources"
KEY_URL = "http://mirror.site.invalid/libnvidia-container/gpgkey"
RECORDER_PORT = 3129
RECORDER = r'''
import http.server, json, os
SECRET = open("/run/k8sgpu-secret").read().strip().encode()
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        leaks = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            if int(pid) == os.getpid():
                continue
            for what in ("cmdline", "environ"):
                try:
                    with open(f"/proc/{pid}/{what}", "rb") as f:
                        if SECRET in f.read():
                            leaks.append(f"{pid}/{what}")
                except OSError:
                    pass
        with open("/var/log/k8sgpu-proxy.log", "a") as log:
            log.write(json.dumps({"line": self.requestline, "auth": self.headers.get("Proxy-Authorization"),
                                  "leaks": leaks}) + "\n")
        body = open("/srv/served-key", "rb").read()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
http.server.HTTPServer(("127.0.0.1", 3129), Handler).serve_forever()
'''
DRIVER_PLAY = """
- name: The driver role's package sources and proxy
  hosts: all
  tasks:
    - name: Run them
      ansible.builtin.include_role:
        name: k8sgpu.nvidia.driver
        tasks_from: sources.yml
"""
TOOLKIT_PLAY = """
- name: The container_toolkit role's repository
  hosts: all
  tasks:
    - name: Run it
      ansible.builtin.include_role:
        name: k8sgpu.nvidia.container_toolkit
        tasks_from: repository.yml
"""


def sh(cmd: str, check: bool = True) -> str:
    return node_sh(NODE, cmd, check).strip()


def lab_key() -> tuple[str, str]:
    mirror_url = (LAB_STATE / "toolkit-mirror-url").read_text().strip()
    text = (CACHE / "mirror" / mirror_url.split("/k8sgpu-mirror/", 1)[1] / "gpgkey").read_text()
    (fingerprint,) = openpgp_fingerprints(text)
    return text, fingerprint


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    work = tmp_path_factory.mktemp("trust")
    (work / "driver.yml").write_text(DRIVER_PLAY)
    (work / "toolkit.yml").write_text(TOOLKIT_PLAY)
    try:
        cp = subprocess.run([str(ROOT / "lab/lab.sh"), "node", NODE, "bookworm"], capture_output=True, text=True,
                            timeout=180, check=False)
        assert cp.returncode == 0, cp.stderr[-2000:]
        yield work
    finally:
        subprocess.run(["docker", "rm", "-f", NODE], capture_output=True, check=False)


def play(work: Path, name: str, *args: str, **extra) -> subprocess.CompletedProcess:
    extra = {"ansible_python_interpreter": "/usr/bin/python3", **extra}
    return run(["ansible-playbook", "-i", f"{NODE},", "-c", "community.docker.docker", str(work / name),
                "-e", json.dumps(extra), *args])


def lab_proxy(user: str = USER, password: str = PASSWORD) -> str:
    scheme, rest = (LAB_STATE / "apt-proxy-url").read_text().strip().rstrip("/").split("://", 1)
    return f"{scheme}://{user}:{password}@{rest}"


def mode_owner(path: str) -> str:
    return sh(f"stat -c '%a %U:%G' {path}")


def test_driver_proxy_credentials_only_in_a_0600_file_and_never_in_the_output(node):
    cp = play(node, "driver.yml", "--diff", "-vvv", driver_apt_proxy=lab_proxy())
    out = cp.stdout + cp.stderr
    assert cp.returncode == 0, out[-5000:]
    # --diff -vvv: the proxy file's diff and the module invocations show the proxy without the password.
    assert PASSWORD not in out, [line for line in out.splitlines() if PASSWORD in line][:5]
    bare = lab_proxy().replace(f"{USER}:{PASSWORD}@", "")
    assert f'Acquire::http::Proxy "{bare}";' in out  # the diff shows the file's text
    assert mode_owner(PROXY_FILE) == "644 root:root"
    text = sh(f"cat {PROXY_FILE}")
    assert f'Acquire::http::Proxy "{bare}";' in text and PASSWORD not in text and USER not in text
    assert mode_owner(AUTH_FILE) == "600 root:root"
    assert sh(f"cat {AUTH_FILE}").splitlines() == [f"machine {bare}", f"login {USER}", f"password {PASSWORD}"]
    # apt reads the setting (apt-config as apt sees it), without the password.
    dump = sh("apt-config dump Acquire::http::Proxy")
    assert bare in dump and PASSWORD not in dump
    # A second run changes nothing.
    again = play(node, "driver.yml", driver_apt_proxy=lab_proxy())
    assert again.returncode == 0 and recap(again.stdout)[NODE]["changed"] == 0, again.stdout[-4000:]


def test_driver_proxy_injection_is_refused_and_nothing_changes(node):
    before = sh(f"cat {PROXY_FILE} {AUTH_FILE} 2>/dev/null || true")
    hostile = 'http://p:3128"; APT::Update::Pre-Invoke {"touch /pwned";}; //'
    cp = play(node, "driver.yml", driver_apt_proxy=hostile)
    out = cp.stdout + cp.stderr
    assert cp.returncode != 0 and "driver_apt_proxy" in out and "apt.conf cannot take" in out, out[-3000:]
    assert sh(f"cat {PROXY_FILE} {AUTH_FILE} 2>/dev/null || true") == before
    assert "Pre-Invoke" not in sh("cat /etc/apt/apt.conf.d/* 2>/dev/null || true")
    # No proxy: neither file is left.
    cp = play(node, "driver.yml", driver_apt_proxy="")
    assert cp.returncode == 0, (cp.stdout + cp.stderr)[-3000:]
    assert sh(f"ls {PROXY_FILE} {AUTH_FILE} 2>&1 || true").count("No such file") == 2


@pytest.fixture(scope="module")
def recorder(node):
    """The recording proxy on the node's loopback, answering with /srv/served-key."""
    sh(f"echo {PASSWORD} > /run/k8sgpu-secret && chmod 600 /run/k8sgpu-secret")
    subprocess.run(["docker", "exec", "-i", NODE, "sh", "-c", "cat > /usr/local/bin/k8sgpu-recorder.py"],
                   input=RECORDER, text=True, check=True)
    subprocess.run(["docker", "exec", "-d", NODE, "python3", "/usr/local/bin/k8sgpu-recorder.py"], check=True)
    sh("for i in $(seq 50); do python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", 3129))' "
       "2>/dev/null && exit 0; sleep 0.1; done; exit 1")
    return f"http://{USER}:{PASSWORD}@127.0.0.1:{RECORDER_PORT}"


def toolkit(node, proxy: str, served: str, *args: str) -> subprocess.CompletedProcess:
    subprocess.run(["docker", "exec", "-i", NODE, "sh", "-c", "cat > /srv/served-key"], input=served, text=True,
                   check=True)
    sh(": > /var/log/k8sgpu-proxy.log")
    return play(node, "toolkit.yml", *args, container_toolkit_repo_url="http://mirror.site.invalid/libnvidia-container",
                container_toolkit_repo_proxy=proxy, container_toolkit_repo_key_fingerprint=lab_key()[1])


def requests() -> list[dict]:
    return [json.loads(line) for line in sh("cat /var/log/k8sgpu-proxy.log").splitlines()]


@pytest.fixture(scope="module")
def other_keys(tmp_path_factory):
    """(a block with the lab's key and another, another key alone), made by gpg here."""
    if not shutil.which("gpg"):
        pytest.fail("gpg is needed (apt-get install gnupg)")
    home = tmp_path_factory.mktemp("gnupg")
    env = {**os.environ, "GNUPGHOME": str(home)}

    def gpg(*args, stdin=None):
        return subprocess.run(["gpg", "--batch", *args], env=env, input=stdin, capture_output=True, text=True,
                              check=True, timeout=120).stdout
    text, fpr = lab_key()
    gpg("--import", stdin=text)
    gpg("--passphrase", "", "--quick-gen-key", "attacker@k8sgpu.invalid", "ed25519", "sign", "never")
    return gpg("--armor", "--export", fpr, "attacker@k8sgpu.invalid"), gpg("--armor", "--export", "attacker@k8sgpu.invalid")


@pytest.mark.parametrize("case", ["two keys in one block", "a second block appended", "another key"])
def test_a_key_other_than_the_pinned_one_alone_is_refused_and_nothing_written(node, recorder, other_keys, case):
    both, attacker = other_keys
    served = {"two keys in one block": both, "a second block appended": lab_key()[0] + attacker,
              "another key": attacker}[case]
    sh(f"rm -f {KEYRING} {TOOLKIT_SOURCE}")
    cp = toolkit(node, recorder, served)
    out = cp.stdout + cp.stderr
    assert cp.returncode != 0, out[-3000:]
    assert f"{NODE}: the repository key from {KEY_URL}" in out, out[-3000:]
    assert {"two keys in one block": "exactly one primary public key, found 2",
            "a second block appended": "found 2", "another key": f", not {lab_key()[1]}, the pinned one"}[case] in out, out[-3000:]
    assert sh(f"ls {KEYRING} {TOOLKIT_SOURCE} 2>&1 || true").count("No such file") == 2
    assert len(requests()) == 1  # it was fetched, through the proxy


def test_the_key_fetch_sends_credentials_only_to_the_proxy(node, recorder):
    cp = toolkit(node, recorder, lab_key()[0], "--diff", "-vvv")
    out = cp.stdout + cp.stderr
    assert cp.returncode == 0, out[-5000:]
    (request,) = requests()
    assert request["line"] == f"GET {KEY_URL} HTTP/1.1"
    assert request["auth"] == "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    # While the module waited for this answer, no process of the node had the password in its command line or
    # environment (ansible's environment: put it in both, issue 34).
    assert request["leaks"] == [], request
    assert PASSWORD not in out, [line for line in out.splitlines() if PASSWORD in line][:5]
    # The keyring is the lab's key alone.
    assert openpgp_fingerprints(sh(f"cat {KEYRING}")) == [lab_key()[1]]
    assert mode_owner(KEYRING) == "644 root:root"
    auth = "/etc/apt/auth.conf.d/90k8sgpu-nvidia-container-toolkit-proxy.conf"
    assert mode_owner(auth) == "600 root:root" and PASSWORD in sh(f"cat {auth}")
    assert PASSWORD not in sh("cat /etc/apt/apt.conf.d/90k8sgpu-nvidia-container-toolkit-proxy")
