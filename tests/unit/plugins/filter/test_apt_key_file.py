"""Issue 46 item 6: a file:// repository key only from a key directory, and no read of key material in the log.

On the code before issue 46 the role read any file:// path as root (file:///etc/shadow) and printed it at -v (the slurp
had no no_log)."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.k8sgpu.nvidia.plugins.filter._apt_key_file import apt_key_file

ROOT = Path(__file__).resolve().parents[4]
MIRROR = "file:///srv/mirror/libnvidia-container"


@pytest.mark.parametrize(("url", "dirs", "path"), [
    ("https://nvidia.github.io/libnvidia-container/gpgkey", [], ""),
    ("http://mirror.example/gpgkey", [], ""),
    ("file:///etc/apt/keyrings/mirror.asc", [], "/etc/apt/keyrings/mirror.asc"),
    ("file:///usr/share/keyrings/site/mirror.gpg", [], "/usr/share/keyrings/site/mirror.gpg"),
    ("file:///srv/keys/mirror.asc", ["/srv/keys"], "/srv/keys/mirror.asc"),
    ("file:///srv/keys/mirror.asc", ["/srv/keys/"], "/srv/keys/mirror.asc"),
    (MIRROR + "/gpgkey", [], "/srv/mirror/libnvidia-container/gpgkey"),
    ("file://localhost/etc/apt/keyrings/m.asc", [], "/etc/apt/keyrings/m.asc"),
])
def test_allowed(url, dirs, path):
    assert apt_key_file(url, dirs, repo_url=MIRROR, host="gpu-1") == path


@pytest.mark.parametrize(("url", "dirs"), [
    ("file:///etc/shadow", []),
    ("file:///root/.ssh/id_rsa", ["/srv/keys"]),
    ("file:///etc/apt/keyrings/../../shadow", []),
    ("file:///etc/apt/keyrings/./x/../../../shadow", []),
    ("file:///etc/apt/keyringsX/x.asc", []),
    ("file:///etc/apt/keyrings", []),
    ("file:///srv/keysX/m.asc", ["/srv/keys"]),
    ("file:///srv/mirror/libnvidia-container/Packages", []),
    ("file:///etc/apt/keyrings//x.asc", []),
])
def test_refused_naming_host_variable_and_fix(url, dirs):
    with pytest.raises(AnsibleFilterError) as err:
        apt_key_file(url, dirs, repo_url=MIRROR, host="gpu-1")
    message = str(err.value)
    assert message.startswith("gpu-1: container_toolkit_repo_key_url ")
    assert ("container_toolkit_key_dirs" in message and "/etc/apt/keyrings" in message) or "refused" in message


@pytest.mark.parametrize("dirs", [["relative"], ["/srv/../etc"], [""], [5]])
def test_bad_key_dirs_are_refused(dirs):
    with pytest.raises(AnsibleFilterError, match=r"gpu-1: container_toolkit_key_dirs\[0\]"):
        apt_key_file("file:///srv/keys/m.asc", dirs, host="gpu-1")


def test_a_key_url_with_a_newline_is_refused_without_the_value():
    with pytest.raises(AnsibleFilterError) as err:
        apt_key_file("file:///etc/apt/keyrings/x.asc\nTrusted: yes", [], host="gpu-1")
    assert "Trusted" not in str(err.value) and "value not shown" in str(err.value)


def _tasks():
    out = []
    for path in sorted((ROOT / "roles" / "container_toolkit" / "tasks").glob("*.yml")):
        out += yaml.safe_load(path.read_text()) or []
    return out


def test_every_read_of_key_material_is_no_log_and_its_failure_still_shown():
    tasks = _tasks()
    readers = [t for t in tasks if "k8sgpu.nvidia.openpgp_key_fetch" in t or "ansible.builtin.slurp" in t]
    assert len(readers) == 2
    for task in readers:
        assert task["no_log"] is True and task["failed_when"] is False, task["name"]
    # the failure (HTTP status, no such file: no key text) is shown by an assert that is not no_log
    (shown,) = [t for t in tasks if t["name"] == "Fail when the repository key could not be read"]
    assert "no_log" not in shown and "_read.msg" in shown["ansible.builtin.assert"]["fail_msg"]
    # the pin check's message comes from a filter in a set_fact: not no_log, so its error stays visible (the key it
    # returns is a public key, armoured again, never the file as read)
    (pin,) = [t for t in tasks if "k8sgpu.nvidia._openpgp_key(" in str(t.get("ansible.builtin.set_fact", ""))]
    assert "no_log" not in pin


def test_the_file_key_is_checked_in_the_preflight_before_any_change():
    preflight = yaml.safe_load((ROOT / "roles/container_toolkit/tasks/preflight.yml").read_text())
    names = [t["name"] for t in preflight]
    check = names.index("Refuse a file:// repository key outside the key directories")
    assert check < names.index("Work out what to do")
    assert "apt_key_file" in (ROOT / "roles/container_toolkit/vars/main.yml").read_text()
