"""Issue 19 item 6: proxy credentials out of apt.conf.d, and the repository key pinned by fingerprint.

The fingerprints are checked against gpg's own, for keys gpg makes here (v4 RSA and ed25519).
"""
from __future__ import annotations

import os
import shutil
import subprocess

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.k8sgpu.nvidia.plugins.filter._apt_proxy_auth import apt_proxy_auth
from ansible_collections.k8sgpu.nvidia.plugins.filter._apt_proxy_lines import apt_proxy_lines
from ansible_collections.k8sgpu.nvidia.plugins.filter._apt_proxy_redact import apt_proxy_redact
from ansible_collections.k8sgpu.nvidia.plugins.module_utils._openpgp import openpgp_fingerprint_normalize
from ansible_collections.k8sgpu.nvidia.plugins.filter.openpgp_fingerprints import openpgp_fingerprints

PROXY = "http://build%40site:s3cr%3At@proxy.example:3128"


def test_lines_carry_no_credentials():
    lines = apt_proxy_lines("https://nvidia.github.io/libnvidia-container", PROXY)
    assert lines == ['Acquire::http::Proxy::nvidia.github.io "http://proxy.example:3128";',
                     'Acquire::https::Proxy::nvidia.github.io "http://proxy.example:3128";']
    assert not any("s3cr" in line or "build" in line for line in lines)


@pytest.mark.parametrize(
    ("proxy", "expected"),
    [
        (PROXY, ["machine http://proxy.example:3128", "login build@site", "password s3cr:t"]),
        ("https://u:p@proxy.example", ["machine https://proxy.example", "login u", "password p"]),
        ("http://proxy.example:3128", []),
        ("DIRECT", []),
        ("", []),
    ],
)
def test_auth_lines(proxy, expected):
    assert apt_proxy_auth(proxy) == expected


def test_auth_refuses_what_auth_conf_cannot_hold():
    with pytest.raises(AnsibleFilterError, match="container_toolkit_repo_proxy: .*white space"):
        apt_proxy_auth("http://a:b%20c@proxy:3128", proxy_name="container_toolkit_repo_proxy")
    with pytest.raises(AnsibleFilterError, match="user name is empty"):
        apt_proxy_auth("http://:pw@proxy:3128")


def test_redact():
    assert apt_proxy_redact(PROXY) == "http://build%40site:***@proxy.example:3128"
    assert apt_proxy_redact("http://proxy:3128") == "http://proxy:3128"
    assert "s3cr" not in apt_proxy_redact(PROXY)


@pytest.fixture(scope="module")
def gpg_keys(tmp_path_factory):
    """Two public keys made by gpg, with gpg's fingerprints for them."""
    if not shutil.which("gpg"):
        pytest.fail("gpg is needed (apt-get install gnupg)")
    home = tmp_path_factory.mktemp("gnupg")
    env = {**os.environ, "GNUPGHOME": str(home)}
    keys = {}
    for uid, algo in (("rsa@k8sgpu.invalid", "rsa2048"), ("ed@k8sgpu.invalid", "ed25519")):
        subprocess.run(["gpg", "--batch", "--passphrase", "", "--quick-gen-key", uid, algo, "sign", "never"],
                       env=env, check=True, capture_output=True, timeout=120)
        armored = subprocess.run(["gpg", "--armor", "--export", uid], env=env, check=True, capture_output=True,
                                 text=True).stdout
        colons = subprocess.run(["gpg", "--with-colons", "--fingerprint", uid], env=env, check=True,
                                capture_output=True, text=True).stdout
        fpr = next(line.split(":")[9] for line in colons.splitlines() if line.startswith("fpr:"))
        keys[algo] = (armored, fpr)
    return keys


def test_fingerprints_match_gpgs(gpg_keys):
    for armored, fpr in gpg_keys.values():
        assert openpgp_fingerprints(armored) == [fpr]
    both = gpg_keys["rsa2048"][0] + gpg_keys["ed25519"][0]
    # Every block's keys (the first block's only, before issue 34: a second block went unseen).
    assert openpgp_fingerprints(both) == [gpg_keys["rsa2048"][1], gpg_keys["ed25519"][1]]
    spaced = " ".join(gpg_keys["rsa2048"][1][i:i + 4] for i in range(0, 40, 4)).lower()
    assert openpgp_fingerprint_normalize("0x" + spaced) == gpg_keys["rsa2048"][1]


def test_fingerprint_of_something_else_fails():
    with pytest.raises(AnsibleFilterError, match="no '-----BEGIN PGP PUBLIC KEY BLOCK-----'"):
        openpgp_fingerprints("<html>404</html>")
    with pytest.raises(AnsibleFilterError, match="not valid base64"):
        openpgp_fingerprints("-----BEGIN PGP PUBLIC KEY BLOCK-----\n\n!!!!\n-----END PGP PUBLIC KEY BLOCK-----\n")
