"""k8sgpu.nvidia.driver_module_signing: DKMS's signing configuration written under a test root (the key 0600 and never
in the result), refused before any write for a key of another certificate, removed with state=absent. Module files
and their signers are read on the lab (tests/lab/test_driver_lifecycle.py), where modinfo and DKMS are real."""
from __future__ import annotations

import json
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from ansible.module_utils.testing import patch_module_args

from ansible_collections.k8sgpu.nvidia.plugins.module_utils import _secure_boot as sb
from ansible_collections.k8sgpu.nvidia.plugins.modules import driver_module_signing as dms
from module_harness import AnsibleExitJson, AnsibleFailJson

pytestmark = pytest.mark.skipif(not shutil.which("openssl"), reason="openssl is not installed")


def pair(tmp: Path, name: str = "mok") -> tuple[str, str]:
    key, cert = tmp / f"{name}.key", tmp / f"{name}.pem"
    subprocess.run(["openssl", "req", "-new", "-x509", "-nodes", "-days", "30", "-subj", f"/CN={name}", "-newkey",
                    "rsa:2048", "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    return key.read_text(), cert.read_text()


@pytest.fixture
def keys(tmp_path_factory):
    return pair(tmp_path_factory.mktemp("keys"))


def run(module_io, root: Path, check: bool = False, diff: bool = False, **params) -> dict:
    args = {"root": str(root), "efi_root": str(root / "sys/firmware/efi"), "host": "gpu-7", **params}
    if check:
        args["_ansible_check_mode"] = True
    if diff:
        args["_ansible_diff"] = True
    with patch_module_args(args), pytest.raises(AnsibleExitJson) as exc:
        dms.main()
    return exc.value.args[0]


def fail(module_io, root: Path, **params) -> str:
    args = {"root": str(root), "efi_root": str(root / "efi"), "host": "gpu-7", **params}
    with patch_module_args(args), pytest.raises(AnsibleFailJson) as exc:
        dms.main()
    return exc.value.args[0]["msg"]


def test_signing_from_content_writes_the_files_once(module_io, tmp_path, keys):
    key, cert = keys
    first = run(module_io, tmp_path, diff=True, signing=True, key_content=key, certificate_content=cert)
    assert first["changed"] and [f["path"] for f in first["files"]] == [dms.OWN_KEY, dms.OWN_CERT, sb.DKMS_DROP_IN]
    own_key = tmp_path / dms.OWN_KEY.lstrip("/")
    assert own_key.read_text() == key and stat.S_IMODE(own_key.stat().st_mode) == 0o600
    assert stat.S_IMODE(own_key.parent.stat().st_mode) == 0o700
    assert (tmp_path / dms.OWN_CERT.lstrip("/")).read_bytes() == sb.to_der(cert)
    drop_in = (tmp_path / sb.DKMS_DROP_IN.lstrip("/")).read_text()
    assert f'mok_signing_key="{dms.OWN_KEY}"' in drop_in and f'mok_certificate="{dms.OWN_CERT}"' in drop_in
    assert first["diff"]["after"] == drop_in and first["diff"]["before"] == ""
    assert first["certificate"]["signer"] == "mok" and first["certificate"]["path"] == dms.OWN_CERT
    body = "".join(key.splitlines()[1:-1])
    assert body[:40] not in json.dumps(first), "the private key leaked into the result"
    assert first["secure_boot"]["state"] == "not_efi" and first["reboot"]["allowed"]
    again = run(module_io, tmp_path, signing=True, key_content=key, certificate_content=cert)
    assert not again["changed"] and again["files"] == []


def test_a_key_left_readable_by_hand_is_made_0600_in_a_0700_directory(module_io, tmp_path, keys):
    """A key copied in by hand (0644, in a 0755 directory made under umask 022): the run sets the modes it wants."""
    key, cert = keys
    own_key = tmp_path / dms.OWN_KEY.lstrip("/")
    own_key.parent.mkdir(parents=True, mode=0o755)
    own_key.write_text(key)
    own_key.chmod(0o644)
    first = run(module_io, tmp_path, signing=True, key_content=key, certificate_content=cert)
    assert first["changed"] and dms.OWN_KEY in [f["path"] for f in first["files"]]
    assert stat.S_IMODE(own_key.stat().st_mode) == 0o600 and own_key.read_text() == key
    assert stat.S_IMODE(own_key.parent.stat().st_mode) == 0o700
    assert not run(module_io, tmp_path, signing=True, key_content=key, certificate_content=cert)["changed"]


def test_check_mode_writes_nothing(module_io, tmp_path, keys):
    key, cert = keys
    result = run(module_io, tmp_path, check=True, signing=True, key_content=key, certificate_content=cert)
    assert result["changed"] and len(result["files"]) == 3
    assert not (tmp_path / "etc").exists() and not (tmp_path / "var").exists()


def test_key_of_another_certificate_refused_before_any_write(module_io, tmp_path, keys, tmp_path_factory):
    _other_key, other_cert = pair(tmp_path_factory.mktemp("other"), "other")
    msg = fail(module_io, tmp_path, signing=True, key_content=keys[0], certificate_content=other_cert)
    assert msg.startswith("gpu-7: the signing key does not belong to the certificate")
    assert not (tmp_path / "var").exists() and not (tmp_path / "etc").exists()


def test_site_paths_are_used_as_they_are(module_io, tmp_path, keys):
    site = tmp_path / "etc/site"
    site.mkdir(parents=True)
    (site / "mok.key").write_text(keys[0])
    (site / "mok.pem").write_text(keys[1])
    result = run(module_io, tmp_path, signing=True, key="/etc/site/mok.key", certificate="/etc/site/mok.pem")
    assert [f["path"] for f in result["files"]] == [sb.DKMS_DROP_IN]
    assert 'mok_signing_key="/etc/site/mok.key"' in (tmp_path / sb.DKMS_DROP_IN.lstrip("/")).read_text()
    # state=absent removes the drop-in, never the site's own files.
    gone = run(module_io, tmp_path, state="absent")
    assert [f["path"] for f in gone["files"]] == [sb.DKMS_DROP_IN]
    assert (site / "mok.key").exists() and not (tmp_path / sb.DKMS_DROP_IN.lstrip("/")).exists()


@pytest.mark.parametrize("params,expected", [
    ({}, "no key is given: set driver_secure_boot_key"),
    ({"key": "/k", "certificate": "relative.pem"}, "driver_secure_boot_certificate 'relative.pem' is not an"),
    ({"key": "/etc/a key", "certificate": "/c"}, "driver_secure_boot_key '/etc/a key' is not an absolute path"),
    ({"key": "/k", "certificate": "/missing.pem"}, "the certificate /missing.pem (driver_secure_boot_certificate)"),
    ({"key": "/k", "certificate_content": "not a certificate"}, "driver_secure_boot_certificate_content is not"),
])
def test_bad_input_named(module_io, tmp_path, params, expected):
    msg = fail(module_io, tmp_path, signing=True, **params)
    assert msg.startswith("gpu-7: ") and expected in msg, msg


def test_signing_off_removes_only_our_drop_in(module_io, tmp_path, keys):
    run(module_io, tmp_path, signing=True, key_content=keys[0], certificate_content=keys[1])
    off = run(module_io, tmp_path, signing=False)
    assert [f["path"] for f in off["files"]] == [sb.DKMS_DROP_IN]
    assert (tmp_path / dms.OWN_KEY.lstrip("/")).exists(), "signing off keeps the key (state=absent removes it)"
    foreign = tmp_path / sb.DKMS_DROP_IN.lstrip("/")
    foreign.write_text('mok_signing_key="/root/mine.key"\n')
    gone = run(module_io, tmp_path, state="absent")
    assert [f["path"] for f in gone["files"]] == [dms.OWN_KEY, dms.OWN_CERT]
    assert foreign.exists(), "a drop-in the role did not write is left"


def test_dkms_own_certificate_read_when_signing_off(module_io, tmp_path, keys):
    own = tmp_path / "var/lib/dkms/mok.pub"
    own.parent.mkdir(parents=True)
    own.write_bytes(sb.to_der(keys[1]))
    result = run(module_io, tmp_path)
    assert result["certificate"]["path"] == sb.DKMS_DEFAULT_CERTIFICATE and result["certificate"]["signer"] == "mok"
    assert result["certificate"]["enrolled"] is None and not result["changed"]
