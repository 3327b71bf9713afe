"""Issue 34 items 1 and 2: proxy credentials handled one way (driver and container_toolkit), and the repository key
pinned to exactly one key.

The keys are made here by gpg (v4 RSA and ed25519); gpg itself checks that the keyring the filter returns holds the
pinned key and nothing else. On the code before issue 34 the two-key block and the appended block passed the pin
(the check was "pinned fingerprint among the first block's keys" and the fetched text was written as the keyring),
openpgp_key did not exist, and the driver role wrote driver_apt_proxy verbatim (the injection below rendered an apt
hook); each test here fails there.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.k8sgpu.nvidia.plugins.filter._apt_proxy_auth import apt_proxy_auth
from ansible_collections.k8sgpu.nvidia.plugins.filter._apt_proxy_lines import apt_proxy_lines
from ansible_collections.k8sgpu.nvidia.plugins.filter._apt_proxy_redact import apt_proxy_redact
from ansible_collections.k8sgpu.nvidia.plugins.filter.openpgp_fingerprints import openpgp_fingerprints
from ansible_collections.k8sgpu.nvidia.plugins.filter._openpgp_key import openpgp_key

ROOT = Path(__file__).resolve().parents[4]
WHAT = "gpu-1: the repository key from https://mirror.example/gpgkey"


def gpg(home, *args, stdin=None) -> str:
    return subprocess.run(["gpg", "--batch", *args], env={**os.environ, "GNUPGHOME": str(home)}, input=stdin,
                          check=True, capture_output=True, text=True, timeout=120).stdout


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    """{'pinned'|'attacker': (armoured text, fingerprint)} and the two keys in one block, made by gpg."""
    if not shutil.which("gpg"):
        pytest.fail("gpg is needed (apt-get install gnupg)")
    home = tmp_path_factory.mktemp("gnupg")
    made = {}
    for name, algo in (("pinned", "rsa2048"), ("attacker", "ed25519")):
        uid = f"{name}@k8sgpu.invalid"
        gpg(home, "--passphrase", "", "--quick-gen-key", uid, algo, "sign", "never")
        colons = gpg(home, "--with-colons", "--fingerprint", uid)
        made[name] = (gpg(home, "--armor", "--export", uid),
                      next(line.split(":")[9] for line in colons.splitlines() if line.startswith("fpr:")))
    made["both"] = gpg(home, "--armor", "--export", "pinned@k8sgpu.invalid", "attacker@k8sgpu.invalid")
    made["home"] = home
    return made


def shown_by_gpg(tmp_path, text: str) -> list[str]:
    """The primary keys' fingerprints gpg reads in text (as apt's gpgv would load the keyring)."""
    out = gpg(tmp_path, "--with-colons", "--show-keys", stdin=text)
    lines = out.splitlines()
    return [lines[i + 1].split(":")[9] for i, line in enumerate(lines) if line.startswith("pub:")]


def test_the_pinned_key_alone_passes_and_the_keyring_is_that_key(keys, tmp_path):
    text, fpr = keys["pinned"]
    spaced = " ".join(fpr[i:i + 4] for i in range(0, 40, 4)).lower()
    for pin in (fpr, spaced, "0x" + fpr.lower(), ""):
        keyring = openpgp_key("\n\n" + text + "\n", pin, what=WHAT)
        assert keyring.startswith("-----BEGIN PGP PUBLIC KEY BLOCK-----\n\n")
        assert shown_by_gpg(tmp_path, keyring) == [fpr]
    # Armour headers go; the packets are the key's own (the keyring compares equal to gpg's export, headers aside).
    with_header = text.replace("-----\n\n", "-----\nComment: whatever the server adds\n\n", 1)
    assert openpgp_key(with_header, fpr) == openpgp_key(text, fpr)


def test_a_block_with_the_pinned_key_and_a_second_key_is_refused(keys):
    assert openpgp_fingerprints(keys["both"]) == [keys["pinned"][1], keys["attacker"][1]]
    with pytest.raises(AnsibleFilterError) as err:
        openpgp_key(keys["both"], keys["pinned"][1], what=WHAT)
    assert str(err.value).startswith(WHAT) and "exactly one primary public key, found 2" in str(err.value)
    assert "Nothing was written" in str(err.value)


@pytest.mark.parametrize("extra", ["attacker", "pinned"])
def test_a_second_block_appended_is_refused(keys, extra):
    text = keys["pinned"][0] + keys[extra][0]
    with pytest.raises(AnsibleFilterError, match=f"^{WHAT}: expected exactly one .* block, found 2"):
        openpgp_key(text, keys["pinned"][1], what=WHAT)


def test_another_key_is_refused_naming_both_fingerprints(keys):
    with pytest.raises(AnsibleFilterError) as err:
        openpgp_key(keys["attacker"][0], keys["pinned"][1], what=WHAT)
    message = str(err.value)
    assert message.startswith(WHAT) and keys["attacker"][1] in message and keys["pinned"][1] in message


@pytest.mark.parametrize("tamper", [
    lambda t: t + "trailing data\n",
    lambda t: "<html>\n" + t,
    lambda t: t + "-----BEGIN PGP PUBLIC KEY BLOCK-----\n",  # a half second block: data outside the block
])
def test_data_around_the_block_is_refused(keys, tamper):
    with pytest.raises(AnsibleFilterError, match=f"^{WHAT}: (there is other data|expected exactly one)"):
        openpgp_key(tamper(keys["pinned"][0]), keys["pinned"][1], what=WHAT)


def test_a_damaged_block_or_a_bad_pin_is_refused(keys):
    text, fpr = keys["pinned"]
    lines = text.splitlines()
    body = next(i for i, line in enumerate(lines) if len(line) == 64)
    lines[body] = lines[body][:10] + ("A" if lines[body][10] != "A" else "B") + lines[body][11:]
    with pytest.raises(AnsibleFilterError, match="checksum does not match|not valid base64|cut short|not an OpenPGP"):
        openpgp_key("\n".join(lines) + "\n", fpr, what=WHAT)
    with pytest.raises(AnsibleFilterError, match="is not an OpenPGP fingerprint"):
        openpgp_key(text, fpr[:-2], what=WHAT)
    with pytest.raises(AnsibleFilterError, match="no '-----BEGIN|found 0"):
        openpgp_key("<html>404</html>", fpr, what=WHAT)


def test_the_default_pin_is_nvidias_published_fingerprint():
    """NVIDIA CORPORATION (Open Source Projects) <cudatools@nvidia.com>, key id DDCAE044F796ECB0 (the libnvidia-container
    repository's gpgkey; NVIDIA/libnvidia-container issue 171, NVIDIA/nvidia-container-runtime issue 88)."""
    for path in ("roles/container_toolkit/defaults/main.yml", "roles/container_toolkit/meta/argument_specs.yml"):
        data = yaml.safe_load((ROOT / path).read_text())
        if "argument_specs" in data:
            data = {k: v["default"] for k, v in data["argument_specs"]["main"]["options"].items() if "default" in v}
        assert data["container_toolkit_repo_key_fingerprint"] == "C95B321B61E88C1809C4F759DDCAE044F796ECB0", path


# Proxy: the same filters for the driver (every host) and container_toolkit (its repository's host).
INJECTION = 'http://p:3128"; APT::Update::Pre-Invoke {"touch pwned";}; //'


@pytest.mark.parametrize("proxy", [
    INJECTION,
    "http://p:3128\nAcquire::http::Proxy::x \"DIRECT\";",
    "http://p:3128/;x",
    "http://p:3128/path",
    "http://p:3128?x=1",
    "http://p:3128#x",
    "http://p:99999",
    "http://p:port",
    "http://p{:3128",
    "http://us\\er:pw@p:3128",
    "http://user:pw @p:3128",
    "ftp://p:21",
    "http://:3128",
])
@pytest.mark.parametrize("url", ["", "https://nvidia.github.io/libnvidia-container"])
def test_a_proxy_apt_conf_cannot_take_is_refused_without_showing_it(proxy, url):
    with pytest.raises(AnsibleFilterError) as err:
        apt_proxy_lines(url, proxy, proxy_name="driver_apt_proxy")
    assert "driver_apt_proxy" in str(err.value)
    assert "pw@" not in str(err.value) and "pw " not in str(err.value)  # the password is never shown
    with pytest.raises(AnsibleFilterError):
        apt_proxy_auth(proxy, proxy_name="driver_apt_proxy")


def test_every_host_gets_the_proxy_without_credentials():
    proxy = "http://alice:S3cretPw@proxy.example:3128"
    assert apt_proxy_lines("", proxy, proxy_name="driver_apt_proxy") == ['Acquire::http::Proxy "http://proxy.example:3128";']
    assert apt_proxy_lines("", "") == []
    assert apt_proxy_lines("", "DIRECT") == ['Acquire::http::Proxy "DIRECT";']
    assert apt_proxy_lines("", "http://[fd00::1]:3142/") == ['Acquire::http::Proxy "http://[fd00::1]:3142";']
    assert apt_proxy_auth(proxy) == ["machine http://proxy.example:3128", "login alice", "password S3cretPw"]
    assert apt_proxy_redact(proxy) == "http://alice:***@proxy.example:3128"
    assert apt_proxy_redact("http://t0ken@proxy.example:3128") == "http://:***@proxy.example:3128"


def role_tasks(role: str) -> list[dict]:
    tasks = []
    for path in sorted((ROOT / "roles" / role / "tasks").glob("*.yml")):
        stack = list(yaml.safe_load(path.read_text()) or [])
        while stack:
            task = stack.pop()
            tasks.append(task)
            stack += task.get("block", []) + task.get("rescue", []) + task.get("always", [])
    return tasks


@pytest.mark.parametrize("role", ["driver", "container_toolkit"])
def test_the_roles_keep_the_proxy_out_of_environments_and_write_credentials_only_0600(role):
    tasks = role_tasks(role)
    # No task puts a proxy in the process environment (ps on the host; the command line at -vvv).
    assert not [t["name"] for t in tasks if "proxy" in yaml.safe_dump(t.get("environment", {}))]
    # The only place the credentials (apt_proxy_auth's lines) are written: a 0600 file, no_log, no diff.
    writers = [t for t in tasks for args in t.values()
               if isinstance(args, dict) and "_proxy_auth" in str(args.get("content", ""))]
    assert len(writers) == 1, [t["name"] for t in writers]
    (task,) = writers
    assert task["ansible.builtin.copy"]["mode"] == "0600" and task["no_log"] is True and task["diff"] is False
    assert task["ansible.builtin.copy"]["dest"].strip("{} ").endswith("_auth_file")
    # No other task's text carries them (the managed_files entries name the auth file only to remove it).
    assert not [t["name"] for t in tasks if t is not task and "_proxy_auth | join" in yaml.safe_dump(t, width=10**6)]
    vars_text = (ROOT / "roles" / role / "vars/main.yml").read_text()
    assert "/etc/apt/auth.conf.d/" in vars_text and "k8sgpu.nvidia._apt_proxy_lines" in vars_text
