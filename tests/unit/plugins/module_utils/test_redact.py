"""Issue 34.8: one redaction (module_utils/_redact.py) for daemon.json and containerd/CRI-O/toolkit TOML, complete
in what docker_daemon_config and container_runtime_config return (result, diff); a new file holding a secret is
created 0600, an existing file keeps its mode. 1.0.0 missed labels ["api_key=..."], keys ending in -auth/-pass,
?sig=/X-Amz-Signature URLs, did not redact container_runtime_config's diff at all, and created such files 0644."""
from __future__ import annotations

import json
import stat
import textwrap

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.k8sgpu.nvidia.plugins.module_utils import _daemon_json, _redact
from ansible_collections.k8sgpu.nvidia.plugins.module_utils._redact import REDACTED, redact_config, redact_toml
from ansible_collections.k8sgpu.nvidia.plugins.modules import container_runtime_config, docker_daemon_config
from module_harness import AnsibleExitJson, AnsibleFailJson

pytestmark = pytest.mark.usefixtures("module_io")
S = ("Lab3lKey-1a2b", "Auth-b64-7c8d", "Pa55-9e0f", "Pwd-1122", "Tok-3344", "Sig-5566", "AmzSig-7788", "QTok-9900",
     "UrlPw-aabb", "Ident-ccdd", "RegPw-eeff", "CrioPw-0101")
DAEMON = {
    "labels": [f"api_key={S[0]}", "rack=r12"],
    "registry-auth": S[1],
    "log-opts": {"x-pass": S[2], "db_password": S[3], "bearer-token": S[4]},
    "registry-mirrors": [f"https://mirror.corp/v2?sv=2022&sig={S[5]}",
                         f"https://bucket.s3.amazonaws.com/x?X-Amz-Signature={S[6]}&X-Amz-Expires=60",
                         f"https://m.corp/?token={S[7]}"],
    "proxies": {"https-proxy": f"https://svc:{S[8]}@proxy.corp:3128"},
}
CONTAINERD = textwrap.dedent(f"""\
    version = 2
    [plugins."io.containerd.grpc.v1.cri".registry.configs."reg.corp:5000".auth]
      username = "puller"
      password = "{S[10]}"
      auth = "{S[1]}"
      identitytoken = "{S[9]}"
    [plugins."io.containerd.grpc.v1.cri".registry.configs."reg2.corp".tls]
      insecure_skip_verify = false
    [plugins."io.containerd.grpc.v1.cri".registry.mirrors."docker.io"]
      endpoint = ["https://pull:{S[8]}@mirror.corp", "https://mirror2.corp/?sig={S[5]}"]
    [plugins."io.containerd.grpc.v1.cri".registry.configs."reg3.corp"]
      auth = {{ username = "u3", password = "{S[2]}" }}
    [plugins."io.containerd.grpc.v1.cri".registry]
      config_path = "/etc/containerd/certs.d"
    """)
CRIO = textwrap.dedent(f"""\
    [crio.image]
    global_auth_file = "/etc/crio/auth.json"
    pause_image = "registry.k8s.io/pause:3.9"
    signature_policy = "/etc/containers/policy.json"
    [crio.runtime]
    default_env = ["HTTPS_PROXY=https://u:{S[11]}@proxy.corp:3128", "REGISTRY_TOKEN={S[4]}"]
    """)


def assert_no_secret(text: str) -> None:
    for secret in S:
        assert secret not in text, f"{secret} printed"


def run(module, args: dict) -> dict:
    with patch_module_args(args):
        with pytest.raises((AnsibleExitJson, AnsibleFailJson)) as raised:
            module.main()
    result = raised.value.args[0]
    assert not isinstance(raised.value, AnsibleFailJson), result
    return result


def test_daemon_json_values_1_0_0_missed_are_redacted():
    out = _daemon_json.redact_config(DAEMON)  # what docker_daemon_config uses
    assert_no_secret(json.dumps(out))
    assert out["labels"] == [f"api_key={REDACTED}", "rack=r12"]
    assert out["registry-auth"] == REDACTED
    assert out["log-opts"] == {"x-pass": REDACTED, "db_password": REDACTED, "bearer-token": REDACTED}
    assert out["registry-mirrors"][0] == f"https://mirror.corp/v2?sv=2022&sig={REDACTED}"
    assert out["registry-mirrors"][1].endswith(f"X-Amz-Signature={REDACTED}&X-Amz-Expires=60")
    assert out["proxies"]["https-proxy"] == f"https://{REDACTED}@proxy.corp:3128"


@pytest.mark.parametrize("key", ["tlskey", "authorization-plugins", "data-root", "no-proxy", "global_auth_file",
                                 "signature_policy", "passthrough"])
def test_keys_that_are_not_secrets_stay(key):
    assert redact_config({key: "/etc/x"}) == {key: "/etc/x"}


def test_daemon_json_module_uses_the_one_redaction():
    assert _daemon_json.redact_config is _redact.redact_config
    assert container_runtime_config.redact_toml is _redact.redact_toml


def test_containerd_toml_auth_tables_inline_tables_and_mirror_urls():
    out = redact_toml(CONTAINERD)
    assert_no_secret(out)
    assert f'password = "{REDACTED}"' in out and f'identitytoken = "{REDACTED}"' in out
    assert f'username = "{REDACTED}"' in out  # the whole auth table
    assert f'"https://{REDACTED}@mirror.corp"' in out and f"?sig={REDACTED}" in out
    assert 'insecure_skip_verify = false' in out and 'config_path = "/etc/containerd/certs.d"' in out
    assert out.count("\n") == CONTAINERD.count("\n")


def test_crio_toml():
    out = redact_toml(CRIO)
    assert_no_secret(out)
    assert 'global_auth_file = "/etc/crio/auth.json"' in out and 'pause_image = "registry.k8s.io/pause:3.9"' in out
    assert f"REGISTRY_TOKEN={REDACTED}" in out and f"https://{REDACTED}@proxy.corp:3128" in out


def test_docker_daemon_config_result_and_diff(tmp_path):
    path = tmp_path / "daemon.json"
    path.write_text(json.dumps(DAEMON))
    result = run(docker_daemon_config, {"path": str(path), "runtimes": {"nvidia": {"path": "/bin/true"}},
                                        "_ansible_diff": True})
    assert result["changed"]
    assert_no_secret(json.dumps(result))
    assert json.loads(path.read_text())["labels"][0] == f"api_key={S[0]}"  # the file keeps the real values


@pytest.mark.parametrize("content,mode", [(DAEMON, 0o600), ({"log-driver": "json-file"}, 0o644)])
def test_docker_daemon_config_new_file_with_a_secret_is_0600(tmp_path, content, mode):
    path = tmp_path / "etc/docker/daemon.json"
    run(docker_daemon_config, {"path": str(path), "settings": content, "backup_dir": str(tmp_path / "b")})
    assert stat.S_IMODE(path.stat().st_mode) == mode


def test_docker_daemon_config_existing_file_keeps_its_mode(tmp_path):
    path = tmp_path / "etc/daemon.json"
    path.parent.mkdir()
    path.write_text("{}")
    path.chmod(0o640)
    run(docker_daemon_config, {"path": str(path), "settings": DAEMON, "backup_dir": str(tmp_path / "b")})
    assert stat.S_IMODE(path.stat().st_mode) == 0o640


# A stand-in for `nvidia-ctk runtime configure --runtime=containerd`: adds the imports line to the main file (its
# content, with the registry's credentials, kept) and writes the drop-in.
FAKE_CTK = textwrap.dedent("""\
    #!/usr/bin/env python3
    import os, sys
    args = dict(a[2:].split("=", 1) for a in sys.argv[1:] if a.startswith("--") and "=" in a)
    config, drop_in = args["config"], args["drop-in-config"]
    old = open(config).read() if os.path.exists(config) else ""
    imports = 'imports = ["%s/*.toml"]\\n' % os.path.dirname(drop_in)
    if imports not in old:
        open(config, "w").write(imports + old)
    os.makedirs(os.path.dirname(drop_in), exist_ok=True)
    open(drop_in, "w").write(os.environ.get("FAKE_DROP_IN", "version = 2\\n"))
""")


@pytest.fixture
def ctk(tmp_path) -> str:
    path = tmp_path / "bin/nvidia-ctk"
    path.parent.mkdir()
    path.write_text(FAKE_CTK)
    path.chmod(0o755)
    return str(path)


def test_container_runtime_config_diff_is_redacted_and_new_secret_drop_in_is_0600(tmp_path, ctk, monkeypatch):
    config = tmp_path / "etc/containerd/config.toml"
    config.parent.mkdir(parents=True)
    config.write_text(CONTAINERD)
    config.chmod(0o644)
    drop_in = tmp_path / "etc/containerd/conf.d/99-nvidia.toml"
    monkeypatch.setenv("FAKE_DROP_IN", CONTAINERD)  # a drop-in holding the registry's credentials
    args = {"runtime": "containerd", "config_path": str(config), "drop_in_path": str(drop_in), "nvidia_ctk": ctk,
            "backup_dir": str(tmp_path / "backups"), "_ansible_diff": True}
    result = run(container_runtime_config, args)
    assert result["changed"] and len(result["diff"]) == 2
    assert_no_secret(json.dumps(result))
    assert S[10] in config.read_text() and S[10] in drop_in.read_text()  # the files keep the real values
    assert stat.S_IMODE(drop_in.stat().st_mode) == 0o600  # new, holds a secret
    assert stat.S_IMODE(config.stat().st_mode) == 0o644  # existing: its mode kept


def test_container_runtime_config_new_drop_in_without_secret_is_0644(tmp_path, ctk):
    config = tmp_path / "etc/containerd/config.toml"
    drop_in = tmp_path / "etc/containerd/conf.d/99-nvidia.toml"
    run(container_runtime_config, {"runtime": "containerd", "config_path": str(config), "drop_in_path": str(drop_in),
                                   "nvidia_ctk": ctk, "backup_dir": str(tmp_path / "backups")})
    assert stat.S_IMODE(drop_in.stat().st_mode) == 0o644


# Issue 46: Authorization headers in daemon.json, containerd's and CRI-O's TOML (registry headers), and HTTP
# credentials written in any string, never in a result or a diff.
def test_authorization_headers_are_redacted_in_json_values():
    out = redact_config({"headers": {"Authorization": ["Basic dXNlcjpwYXNzd29yZA=="],
                                     "Proxy-Authorization": "Bearer eyJhbGciOi.abc.def", "X-Note": "Bearer sekr1tvalue"},
                         "authorization-plugins": ["authz-broker"], "labels": ["password=hunter22"]})
    assert out == {"headers": {"Authorization": [REDACTED], "Proxy-Authorization": REDACTED,
                               "X-Note": "Bearer " + REDACTED},
                   "authorization-plugins": ["authz-broker"], "labels": ["password=" + REDACTED]}


def test_authorization_headers_are_redacted_in_toml():
    text = ('[plugins."io.containerd.grpc.v1.cri".registry.configs."r.example".headers]\n'
            '  Authorization = ["Basic dXNlcjpwYXNzd29yZA=="]\n'
            '[x]\n  headers = { Authorization = "Bearer abcdefgh" }\n  note = "Authorization: Bearer abcdefgh"\n'
            '  plain = "the basic settings"\n')
    out = redact_toml(text)
    assert "dXNlcjpwYXNzd29yZA" not in out and "abcdefgh" not in out, out
    assert 'plain = "the basic settings"' in out and "r.example" in out
