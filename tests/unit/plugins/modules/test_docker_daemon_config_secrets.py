"""docker_daemon_config never returns secrets of daemon.json: config, previous and the diff are redacted, the file
keeps the real values (issue 19 item 6). Unit tests of the redaction, main() on real files, and one real
`ansible -vvv --diff` run whose whole output is searched for the secrets."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ansible.module_utils.testing import patch_module_args

from ansible_collections.k8sgpu.nvidia.plugins.module_utils._daemon_json import (
    REDACTED,
    redact_config,
    redact_string,
    secret_strings,
)
from ansible_collections.k8sgpu.nvidia.plugins.modules import docker_daemon_config
from module_harness import AnsibleExitJson, AnsibleFailJson

ROOT = Path(__file__).resolve().parents[4]
PROXY_PASS = "Pr0xyPass-4f1c"
MIRROR_PASS = "M1rrorPass-77ab"
SPLUNK_TOKEN = "splunk-tok-9e0d1c"
SECRETS = (PROXY_PASS, MIRROR_PASS, SPLUNK_TOKEN)
WITH_SECRETS = {
    "log-driver": "splunk",
    "log-opts": {"splunk-token": SPLUNK_TOKEN, "splunk-url": "https://splunk.corp:8088"},
    "proxies": {"http-proxy": f"http://svc-docker:{PROXY_PASS}@proxy.corp:3128",
                "https-proxy": f"svc-docker:{PROXY_PASS}@proxy.corp:3128", "no-proxy": "localhost,.corp"},
    "registry-mirrors": [f"https://pull:{MIRROR_PASS}@mirror.corp", "https://mirror2.corp"],
    "data-root": "/srv/docker",
}
REDACTED_CONFIG = {
    "log-driver": "splunk",
    "log-opts": {"splunk-token": REDACTED, "splunk-url": "https://splunk.corp:8088"},
    "proxies": {"http-proxy": "http://********@proxy.corp:3128", "https-proxy": "********@proxy.corp:3128",
                "no-proxy": "localhost,.corp"},
    "registry-mirrors": ["https://********@mirror.corp", "https://mirror2.corp"],
    "data-root": "/srv/docker",
}
NVIDIA = {"nvidia": {"path": "nvidia-container-runtime", "runtimeArgs": []}}


def run_main(args: dict) -> dict:
    with patch_module_args(args):
        with pytest.raises((AnsibleExitJson, AnsibleFailJson)) as raised:
            docker_daemon_config.main()
    result = raised.value.args[0]
    if isinstance(raised.value, AnsibleFailJson):
        result["failed"] = True
    return result


def assert_no_secret(text: str) -> None:
    for secret in SECRETS:
        assert secret not in text, f"{secret} printed"


@pytest.fixture
def daemon_json(tmp_path) -> Path:
    path = tmp_path / "etc/docker/daemon.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(WITH_SECRETS, indent=4))
    return path


class TestRedaction:
    def test_config(self):
        assert redact_config(WITH_SECRETS) == REDACTED_CONFIG
        assert WITH_SECRETS["proxies"]["http-proxy"].startswith("http://svc-docker:")  # a copy; input untouched

    @pytest.mark.parametrize("value, expected", [
        ("http://u:p@proxy:3128", "http://********@proxy:3128"),
        ("http://user@proxy:3128/", "http://********@proxy:3128/"),
        ("http://u:p@ss@proxy:3128", "http://********@proxy:3128"),  # '@' in the password: the last '@' ends it
        ("socks5://u:p%40x@10.0.0.1:1080", "socks5://********@10.0.0.1:1080"),
        ("https://logs.example/loki/api/v1/push?x=1&token=abc#f", "https://logs.example/loki/api/v1/push?x=1&token=********#f"),
        ("http://proxy.corp:3128", "http://proxy.corp:3128"),
        ("unix:///var/run/docker.sock", "unix:///var/run/docker.sock"),
        ("owner=ops@corp.example", "owner=ops@corp.example"),  # not a URL, not under a URL key
    ])
    def test_urls(self, value, expected):
        assert redact_string(value) == expected

    def test_url_without_scheme_only_under_url_keys(self):
        assert redact_config({"https-proxy": "u:p@proxy:3128"}) == {"https-proxy": "********@proxy:3128"}
        assert redact_config({"labels": ["u:p@proxy:3128"]}) == {"labels": ["u:p@proxy:3128"]}

    def test_secret_named_keys_at_any_depth(self):
        config = {"a": {"b": [{"registry-password": "pw", "x-api-key": 12345, "ok": True}]},
                  "client-secret": {"id": "i", "list": ["s1", ""]}, "tlskey": "/etc/docker/key.pem"}
        assert redact_config(config) == {
            "a": {"b": [{"registry-password": REDACTED, "x-api-key": REDACTED, "ok": True}]},
            "client-secret": {"id": REDACTED, "list": [REDACTED, ""]}, "tlskey": "/etc/docker/key.pem"}

    def test_secret_strings_are_the_originals_that_change(self):
        assert secret_strings(WITH_SECRETS) == {
            SPLUNK_TOKEN, WITH_SECRETS["proxies"]["http-proxy"], WITH_SECRETS["proxies"]["https-proxy"],
            WITH_SECRETS["registry-mirrors"][0]}
        assert secret_strings({"client-secret": {"id": "i"}}) == {"i"}
        assert secret_strings({"log-driver": "json-file", "runtimes": NVIDIA}) == set()


class TestMain:
    def test_file_keeps_secrets_result_and_diff_do_not(self, module_io, daemon_json, tmp_path):
        result = run_main({"path": str(daemon_json), "runtimes": NVIDIA, "_ansible_diff": True,
                           "backup_dir": str(tmp_path / "backups")})
        assert result["changed"] is True
        written = json.loads(daemon_json.read_text())
        assert written == {**WITH_SECRETS, "runtimes": NVIDIA}  # the real values on disk
        assert result["previous"] == REDACTED_CONFIG
        assert result["config"] == {**REDACTED_CONFIG, "runtimes": NVIDIA}
        assert json.loads(result["diff"]["before"]) == REDACTED_CONFIG
        assert json.loads(result["diff"]["after"]) == result["config"]
        # The diff still shows which proxy host is set.
        assert '"http-proxy": "http://********@proxy.corp:3128"' in result["diff"]["after"]
        assert_no_secret(json.dumps(result))
        # The backup is the real previous file.
        assert json.loads(Path(result["backup_file"]).read_text()) == WITH_SECRETS

    def test_secret_given_in_settings(self, module_io, daemon_json, tmp_path):
        new_proxy = "http://svc-docker:N3wPass-51@proxy2.corp:3128"
        result = run_main({"path": str(daemon_json), "settings": {"proxies": {"http-proxy": new_proxy}},
                           "_ansible_diff": True, "_ansible_check_mode": True})
        assert result["changed"] is True
        assert result["config"]["proxies"]["http-proxy"] == "http://********@proxy2.corp:3128"
        assert "N3wPass-51" not in json.dumps(result)
        assert json.loads(daemon_json.read_text()) == WITH_SECRETS  # check mode

    def test_second_run_is_unchanged(self, module_io, daemon_json, tmp_path):
        args = {"path": str(daemon_json), "runtimes": NVIDIA, "settings": WITH_SECRETS,
                "backup_dir": str(tmp_path / "backups")}
        assert run_main(args)["changed"] is True
        again = run_main(args)
        assert again["changed"] is False and again["config"] == {**REDACTED_CONFIG, "runtimes": NVIDIA}

    def test_change_of_a_secret_alone_is_a_change(self, module_io, daemon_json, tmp_path):
        result = run_main({"path": str(daemon_json), "settings": {"log-opts": {"splunk-token": "other-token"}},
                           "backup_dir": str(tmp_path / "backups"), "_ansible_diff": True})
        assert result["changed"] is True and "other-token" not in json.dumps(result)
        assert json.loads(daemon_json.read_text())["log-opts"]["splunk-token"] == "other-token"

    def test_file_without_secrets_diff_is_its_own_text(self, module_io, tmp_path):
        path = tmp_path / "daemon.json"
        text = '{"log-driver":   "json-file",\n "proxies": {"http-proxy": "http://proxy.corp:3128"}}\n'
        path.write_text(text)
        result = run_main({"path": str(path), "runtimes": NVIDIA, "_ansible_diff": True, "_ansible_check_mode": True})
        assert result["diff"]["before"] == text


def test_ansible_verbose_diff_prints_no_secret(tmp_path):
    """What a user sees: `ansible -m docker_daemon_config -vvv --diff` (invocation included), the secrets in the file and in settings."""
    path = tmp_path / "docker/daemon.json"
    path.parent.mkdir()
    path.write_text(json.dumps({k: WITH_SECRETS[k] for k in ("log-opts", "registry-mirrors")}))
    args = {"path": str(path), "runtimes": NVIDIA, "backup_dir": str(tmp_path / "backups"),
            "settings": {"proxies": WITH_SECRETS["proxies"]}}
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_LOCALHOST_WARNING": "0", "ANSIBLE_INVENTORY_UNPARSED_WARNING": "0"}
    proc = subprocess.run(["ansible", "localhost", "-c", "local", "-i", "localhost,", "-vvv", "--diff",
                           "-m", "k8sgpu.nvidia.docker_daemon_config", "-a", json.dumps(args),
                           "-e", f"ansible_python_interpreter={sys.executable}"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "CHANGED" in out and "proxy.corp:3128" in out and "mirror.corp" in out, out  # the output is there
    assert_no_secret(out)
    assert json.loads(path.read_text())["proxies"] == WITH_SECRETS["proxies"]
