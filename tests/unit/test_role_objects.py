"""The device_plugin and dcgm_exporter roles' variables give the objects their removed templates gave (issue 35 item
6). For each case of tests/unit/fixtures/role_objects/before_issue_35.json (the defaults, every variable that reaches
an object set, strings as -e gives them, ansible_managed set), the role's defaults and vars with the case's variables,
evaluated by Ansible's Templar as a task evaluates them, give the frozen settings, and from them the frozen objects,
ServiceMonitor and scrape configuration: equal as data, every string in them and the file's text byte for byte."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ansible.release import __version__ as ANSIBLE_VERSION

if tuple(int(part) for part in ANSIBLE_VERSION.split(".")[:2]) < (2, 19):
    pytest.skip("evaluates with ansible.template.trust_as_template and trusted_as_template=True, which ansible-core "
                f"{ANSIBLE_VERSION} lacks (2.19 and later have them)", allow_module_level=True)

ROOT = Path(__file__).resolve().parents[2]
COLLECTIONS = ROOT / "collections"
FROZEN = json.loads((ROOT / "tests" / "unit" / "fixtures" / "role_objects" / "before_issue_35.json").read_text())
NAMES = {"device_plugin": {"settings": "_device_plugin_settings", "objects": "_device_plugin_objects"},
         "dcgm_exporter": {"settings": "_dcgm_exporter_settings", "objects": "_dcgm_exporter_objects",
                           "service_monitor": "_dcgm_exporter_service_monitor",
                           "scrape_config": "_dcgm_exporter_scrape_config"}}
CASES = [(role, case["case"]) for role in NAMES for case in FROZEN[role]]


def main():
    """Run in a process of its own: the collection's filters need Ansible's collection loader, which cannot be set up
    in a process (pytest's) that imported ansible_collections from the checkout as a plain package."""
    from ansible.parsing.dataloader import DataLoader
    from ansible.plugins.loader import init_plugin_loader
    from ansible.template import Templar, trust_as_template
    init_plugin_loader([str(COLLECTIONS)])
    results = {}
    for role, names in NAMES.items():
        loader = DataLoader()
        loader.set_basedir(str(ROOT / "roles" / role))
        base = {}
        for folder in ("defaults", "vars"):
            base.update(loader.load_from_file(str(ROOT / "roles" / role / folder / "main.yml"), trusted_as_template=True))
        for case in FROZEN[role]:
            variables = {**base, **case["variables"], "groups": {}, "hostvars": {}}
            templar = Templar(loader=loader, variables=variables)
            results["%s/%s" % (role, case["case"])] = {
                key: json.loads(templar.template(trust_as_template("{{ %s | to_json }}" % name)))
                for key, name in names.items()}
    json.dump(results, sys.stdout)


@pytest.fixture(scope="module")
def results():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(COLLECTIONS), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, __file__], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
                          check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


@pytest.mark.parametrize("role,name", CASES)
def test_the_roles_variables_give_the_templates_objects(results, role, name):
    (case,) = [c for c in FROZEN[role] if c["case"] == name]
    got = results["%s/%s" % (role, name)]
    assert got["settings"] == case["settings"]
    assert got["objects"] == case["objects"]
    for key in ("service_monitor", "scrape_config"):
        if key in NAMES[role]:
            assert got[key] == case[key]


if __name__ == "__main__":
    main()
