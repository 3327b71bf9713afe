"""Issue 46 item 3: the driver and container_toolkit roles' apt templates (deb822 sources, apt.conf proxy files)
rendered with hostile values in every option they read, as test_role_templates_hostile.py does for the YAML
templates. For each value either k8sgpu.nvidia.role_inputs refuses it naming the option (the role's first task), or
the render fails in a filter naming the option (apt_source_uri, apt_proxy_lines), or the rendered file has exactly
the fields, one line each, that it has with the defaults: no value can add a field (Trusted: yes) or an apt.conf
statement. The review's high finding, a repository URL ending in a newline and Trusted: yes, is the first case."""
from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import sys

import pytest
from ansible.release import __version__ as ANSIBLE_VERSION

if tuple(int(part) for part in ANSIBLE_VERSION.split(".")[:2]) < (2, 19):
    pytest.skip("renders with ansible.template.trust_as_template, which ansible-core %s lacks" % ANSIBLE_VERSION,
                allow_module_level=True)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_role_templates_hostile import COLLECTIONS, ROOT, hostile_values, referenced, render, role_options  # noqa: E402


def _ri():
    """module_utils/_role_inputs.py, imported only when a test runs: main() sets up the collection loader first."""
    from ansible_collections.k8sgpu.nvidia.plugins.module_utils import _role_inputs
    return _role_inputs


FACTS = {"distribution": "Debian", "distribution_release": "bookworm", "architecture": "x86_64"}
TEMPLATES = sorted((p.parent.parent.name, p.name) for role in ("driver", "container_toolkit")
                   for p in (ROOT / "roles" / role / "templates").glob("*.j2"))
HOSTILE_URLS = ["http://deb.example/debian\nTrusted: yes", "http://deb.example/debian\rTrusted: yes",
                "http://deb.example/debian Trusted", "http://deb.example/debian\tx", "http://u:pw@deb.example/debian",
                "http://deb.example/debian\n\nTypes: deb\nURIs: http://evil.example/\nTrusted: yes"]


LOGIN_URL = "https://ci%40site:s3cr%3At@mirror.example:8443/debian"
LOGIN_CASES = [("driver", "nvidia-debian.sources.j2", "driver_mirror_url"),
               ("container_toolkit", "nvidia-container-toolkit.sources.j2", "container_toolkit_repo_url")]


def overrides(role, values):
    """What the role's tasks set before they render (the driver's mirror is a task variable of sources.yml)."""
    from ansible.template import trust_as_template
    out = {"ansible_facts": FACTS}
    if role == "driver":
        out["_driver_debian_mirror"] = trust_as_template("{{ driver_mirror_url or 'http://deb.debian.org/debian' }}")
        out["_driver_debian_mirror_name"] = "driver_mirror_url"
    out.update(values)
    return out


def fields(text):
    """A deb822 stanza's or apt.conf's statements: (field, line count) for deb822 (continuation lines counted),
    one entry per line for apt.conf (comments and blank lines left out)."""
    out, current = [], None
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith(("#", "//")):
            current = None if not line.strip() else current
            continue
        if line[0] in " \t" and current is not None:
            out[-1] = (out[-1][0], out[-1][1] + 1)
            continue
        current = line.split(":", 1)[0] if re.match(r"[A-Za-z-]+:", line) else line
        out.append((current, 1))
    return out


def _outcome(role, template, values):
    from ansible.errors import AnsibleError
    try:
        return "ok", fields(render(role, template, overrides(role, values)))
    except AnsibleError as error:
        return "error", str(error)


def value_of(role, name, index):
    spec = role_options(role)[name]
    return (hostile_values(spec, spec.get("default")) + (HOSTILE_URLS if name.endswith("_url") else []))[index]


def main():
    """Every render of the cases, as JSON (run in a process of its own: the collection's plugin loader is set up
    there, as test_role_templates_hostile.py does)."""
    from ansible.plugins.loader import init_plugin_loader
    init_plugin_loader([str(COLLECTIONS)])
    out = {"%s/%s" % pair: _outcome(pair[0], pair[1], {}) for pair in TEMPLATES}
    for role, template, name, index in CASES:
        out["%s/%s/%s/%d" % (role, template, name, index)] = _outcome(role, template, {name: value_of(role, name, index)})
    # The driver's mirror found in the host's own sources (sources.yml's __driver_mirror), through vars/main.yml.
    from ansible.errors import AnsibleError
    for index, found in enumerate(HOSTILE_URLS + ["http://ftp.example/debian"]):
        variables = {"ansible_facts": FACTS, "driver_mirror_url": "", "__driver_mirror": {"stdout": found + "\n"}}
        try:
            out["detected/%d" % index] = ["ok", fields(render("driver", "nvidia-debian.sources.j2", variables))]
        except AnsibleError as error:
            out["detected/%d" % index] = ["error", str(error)]
    # A login in an https:// repository URL (issue 46 item 3): the source names the URL without it.
    for role, template, name in LOGIN_CASES:
        try:
            out["login/%s" % role] = ["ok", render(role, template, overrides(role, {name: LOGIN_URL}))]
        except AnsibleError as error:
            out["login/%s" % role] = ["error", str(error)]
    print(json.dumps(out))


@functools.lru_cache(maxsize=None)
def results():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(COLLECTIONS), os.path.dirname(os.path.abspath(__file__)),
                                                       os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, __file__], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def outcome(role, template, values):
    """The render of the case whose single value is values' (or the defaults' render for {})."""
    if not values:
        return tuple(results()["%s/%s" % (role, template)])
    (name, value), = values.items()
    for r, t, n, i in CASES:
        if (r, t, n) == (role, template, name) and value_of(r, n, i) == value:
            return tuple(results()["%s/%s/%s/%d" % (r, t, n, i)])
    raise KeyError((role, template, name, value))


CASES = [(role, template, name, index)
         for role, template in TEMPLATES for name, spec in role_options(role).items()
         if name in referenced(role, template) or (role, name) == ("driver", "driver_mirror_url")
         for index, _value in enumerate(hostile_values(spec, spec.get("default"))
                                        + (HOSTILE_URLS if name.endswith("_url") else []))]


def test_every_apt_template_and_its_options_are_covered():
    assert {t for _r, t, _n, _i in CASES} == {t for _r, t in TEMPLATES}, CASES
    names = {n for _r, _t, n, _i in CASES}
    assert {"driver_mirror_url", "container_toolkit_repo_url", "driver_apt_proxy",
            "container_toolkit_repo_proxy"} <= names, names


@pytest.mark.parametrize("role,template,name,index", CASES)
def test_no_hostile_value_adds_a_field_to_an_apt_file(role, template, name, index):
    spec = role_options(role)[name]
    value = value_of(role, name, index)
    errors, _warnings = _ri().check(role, {name: spec}, {name: value})
    if any(name in e for e in errors):
        assert not any("pw@" in e for e in errors), errors  # credentials never repeated
        return  # refused at the role's first task, before anything is rendered or written
    status, got = outcome(role, template, {name: value})
    if status == "error":
        assert name in got, got
        return
    base_status, want = outcome(role, template, {})
    assert base_status == "ok", want
    assert [f for f, _n in got] == [f for f, _n in want], (name, value, got)
    assert all(n == 1 for _f, n in got), (name, value, got)


@pytest.mark.parametrize("value", HOSTILE_URLS)
@pytest.mark.parametrize("role,name", [("driver", "driver_mirror_url"), ("container_toolkit", "container_toolkit_repo_url")])
def test_the_reviews_repository_url_is_refused_by_the_input_check_and_by_the_source_filter(role, name, value):
    spec = role_options(role)[name]
    errors, _warnings = _ri().check(role, {name: spec}, {name: value})
    assert len(errors) == 1 and errors[0].startswith("%s: %s is refused (value not shown): " % (role, name)), errors
    # the template's own filter refuses it too (the driver's mirror read from the host goes only through this)
    template = "nvidia-debian.sources.j2" if role == "driver" else "nvidia-container-toolkit.sources.j2"
    status, text = outcome(role, template, {name: value})
    assert status == "error" and name in text and "refused (value not shown)" in text, text
    assert "pw" not in text.split("refused", 1)[1] and "Trusted" not in text, text


@pytest.mark.parametrize("index", range(len(HOSTILE_URLS)))
def test_the_mirror_found_on_the_host_goes_through_the_same_filter(index):
    status, text = results()["detected/%d" % index]
    assert status == "error" and "the Debian mirror found in localhost's apt sources" in text, text
    assert "refused (value not shown)" in text and "Trusted" not in text and "pw" not in text.split("refused", 1)[1]
    status, got = results()["detected/%d" % len(HOSTILE_URLS)]
    assert status == "ok" and [f for f, _n in got] == ["Types", "URIs", "Suites", "Components", "Signed-By"], got


def test_the_sources_render_as_before_with_the_defaults():
    status, got = outcome("driver", "nvidia-debian.sources.j2", {})
    assert status == "ok" and [f for f, _n in got] == ["Types", "URIs", "Suites", "Components", "Signed-By"], got
    status, got = outcome("container_toolkit", "nvidia-container-toolkit.sources.j2", {})
    assert status == "ok" and [f for f, _n in got] == ["Types", "URIs", "Suites", "Signed-By"], got


if __name__ == "__main__":
    main()


@pytest.mark.parametrize("role,template,name", LOGIN_CASES)
def test_a_login_in_an_https_url_is_accepted_and_never_written_to_the_source(role, template, name):
    spec = role_options(role)[name]
    assert _ri().check(role, {name: spec}, {name: LOGIN_URL}) == ([], [])
    status, text = results()["login/%s" % role]
    assert status == "ok", text
    uris = [line for line in text.splitlines() if line.startswith("URIs:")]
    assert len(uris) == 1 and uris[0].startswith("URIs: https://mirror.example:8443/debian"), text
    assert "s3cr" not in text and "ci%40site" not in text and "@" not in text, text


@pytest.mark.parametrize("role,name", [("driver", "driver_mirror_url"), ("container_toolkit", "container_toolkit_repo_url")])
def test_a_login_over_http_is_refused_by_the_input_check_without_showing_it(role, name):
    spec = role_options(role)[name]
    errors, _warnings = _ri().check(role, {name: spec}, {name: "http://ci:s3cret@mirror.example/debian"})
    assert len(errors) == 1 and "only over https://" in errors[0] and "s3cret" not in errors[0], errors
