"""No role input can add YAML structure to what the roles render: every role's YAML/JSON templates rendered (Ansible's
Templar, the collection's filters, the role's defaults and vars) with hostile values in each of the role's options
(newlines, ---, {, quotes, ": "). For each value either k8sgpu.nvidia.role_inputs refuses it (naming the option), or the
rendered text parses to the same objects, kinds and keys as with the defaults."""
from __future__ import annotations

import copy
import functools
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ansible.release import __version__ as ANSIBLE_VERSION

if tuple(int(part) for part in ANSIBLE_VERSION.split(".")[:2]) < (2, 19):
    pytest.skip("renders with ansible.template.trust_as_template and trusted_as_template=True, which ansible-core "
                f"{ANSIBLE_VERSION} lacks (2.19 and later have them)", allow_module_level=True)

ROOT = Path(__file__).resolve().parents[2]
COLLECTIONS = ROOT / "collections"

# Roles whose templates are not YAML or JSON (apt configuration: deb822 sources, apt.conf) are rendered with the same
# hostile values by test_role_templates_apt.py, which compares their deb822 fields and apt.conf statements instead of
# YAML objects (issue 46); every other template of every role is rendered here.
NOT_YAML = {"driver", "container_toolkit"}
TEMPLATES = sorted((p.parent.parent.name, p.name) for p in ROOT.glob("roles/*/templates/*.j2")
                   if p.parent.parent.name not in NOT_YAML)

# What the roles' tasks set before they render (facts, registered results), and settings without a default that a
# template needs.
GIVEN = {
    "ansible_managed": "Ansible managed",
    "groups": {"all": ["gpu-1"], "gpu_nodes": ["gpu-1"], "k8s_control_plane": ["localhost"]},
    "hostvars": {"gpu-1": {}},
    "inventory_hostname": "localhost",
    "cluster_autoscaler_cluster_name": "lab",
    "cluster_autoscaler_aws_region": "eu-west-1",
    "karpenter_cluster_name": "lab",
    "karpenter_cluster_endpoint": "https://lab.example:443",
    "karpenter_gpu_cluster_name": "lab",
    "karpenter_gpu_node_role": "KarpenterNodeRole-lab",
    "gpu_autoscaling_target_name": "trainer",
    "_karpenter_crds": [],
    # set by gpu_metrics_adapter's tasks/files.yml (the controller_file filter's plan) before it renders
    "__gpu_metrics_adapter_file": {"marker": "# Managed by k8sgpu.nvidia gpu_metrics_adapter\n", "path": "/tmp/x", "mode": "0644"},
}

HOSTILE = ["x\n---\napiVersion: v1\nkind: Secret\nmetadata: {name: evil}", "x\n  evil: 1", "x: y",
           "'\"}, {\"evil\": 1}: [{"]


def role_options(role):
    """The role's options (a copy: the caller may change it)."""
    return copy.deepcopy(_role_options(role))


@functools.lru_cache(maxsize=None)
def _role_options(role):
    # parsed once per role: parsing the argument specs on every call took most of the test's time
    specs = yaml.safe_load((ROOT / "roles" / role / "meta" / "argument_specs.yml").read_text())["argument_specs"]
    return specs["main"]["options"] if "main" in specs else next(iter(specs.values()))["options"]


def hostile_values(spec, default, benign=False):
    """The hostile forms of an option of this type: the string itself, or in a list's items or a mapping's keys and
    values. benign: the same with every character but letters and digits replaced by x (no structure, same length)."""
    kind = spec.get("type", "str")
    strings = [re.sub(r"[^A-Za-z0-9]", "x", h) for h in HOSTILE] if benign else list(HOSTILE)
    if kind in ("str", "path", "raw") and (kind != "raw" or isinstance(default, str)):
        return strings
    if kind == "list" and spec.get("elements", "str") == "str":
        return [[h] for h in strings]
    if kind == "dict" and not spec.get("options"):
        return [{h: h} for h in strings]
    return []


@functools.lru_cache(maxsize=None)
def base_vars(role):
    from ansible.parsing.dataloader import DataLoader
    loader = DataLoader()
    loader.set_basedir(str(ROOT / "roles" / role))
    variables = {}
    for name in ("defaults", "vars"):
        path = ROOT / "roles" / role / name / "main.yml"
        if path.is_file():
            variables.update(loader.load_from_file(str(path), trusted_as_template=True) or {})
    variables.update(GIVEN)
    variables["role_path"] = str(ROOT / "roles" / role)
    variables["ansible_search_path"] = [str(ROOT / "roles" / role)]
    return loader, variables


def render(role, template, overrides=None):
    from ansible.template import Templar, trust_as_template
    loader, variables = base_vars(role)
    variables = dict(variables, **(overrides or {}))
    templar = Templar(loader=loader, variables=variables)
    text = (ROOT / "roles" / role / "templates" / template).read_text()
    return templar.template(trust_as_template(text))


def shape(node):
    """Every key path of the parsed text (list items collapsed), and each object's kind."""
    out = set()

    def walk(value, path):
        if isinstance(value, dict):
            for key, item in value.items():
                out.add(path + (str(key),))
                walk(item, path + (str(key),))
        elif isinstance(value, list):
            for item in value:
                walk(item, path + ("[]",))
    walk(node, ())
    return out


def parsed(text):
    docs = [d for d in yaml.safe_load_all(text) if d is not None]
    return len(docs), [d.get("kind") if isinstance(d, dict) else type(d).__name__ for d in docs], \
        [shape(d) for d in docs]


@functools.lru_cache(maxsize=None)
def refused(role, name, index):
    """Whether role_inputs refuses the hostile value, naming the option (the role stops at its first task)."""
    from ansible_collections.k8sgpu.nvidia.plugins.module_utils import _role_inputs as ri
    spec = role_options(role)[name]
    errors, _warnings = ri.check(role, {name: spec}, {name: hostile_values(spec, spec.get("default"))[index]})
    return any(name in e for e in errors)


def referenced(role, template):
    """The names a template reads, directly or through the role's vars/main.yml (by word, transitively)."""
    words = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
    derived = {}
    path = ROOT / "roles" / role / "vars" / "main.yml"
    if path.is_file():
        derived = {k: yaml.safe_dump(v) for k, v in (yaml.safe_load(path.read_text()) or {}).items()}
    todo = set(words.findall((ROOT / "roles" / role / "templates" / template).read_text()))
    seen = set()
    while todo:
        name = todo.pop()
        seen.add(name)
        todo |= set(words.findall(derived.get(name, ""))) - seen
    return seen


CASES = [(role, template, name) for role, template in TEMPLATES for name, spec in role_options(role).items()
         if hostile_values(spec, spec.get("default")) and name in referenced(role, template)]


def outcome(role, template, overrides=None, benign=None):
    """What one render gives: error (a filter's refusal), broken (not YAML), or the parsed objects (each object's key
    paths, where the hostile strings of benign, {hostile: benign}, are replaced by their benign forms)."""
    from ansible.errors import AnsibleError
    try:
        text = render(role, template, overrides)
    except AnsibleError as error:
        return {"status": "error", "error": str(error)[:300]}
    try:
        count, kinds, shapes = parsed(text)
    except yaml.YAMLError as error:
        return {"status": "broken", "error": str(error)[:300]}

    def plain(path):
        for hostile, harmless in (benign or {}).items():
            path = path.replace(hostile, harmless)
        return path
    return {"status": "ok", "count": count, "kinds": kinds,
            "shapes": [sorted(plain("/".join(p)) for p in s) for s in shapes]}


def same(base, got):
    return got["status"] == "ok" and base["status"] == "ok" and \
        (got["count"], got["kinds"], got["shapes"]) == (base["count"], base["kinds"], base["shapes"])


def compare(role, template, values, plain, benign):
    """{name: result} for a group of options: rendered together, halved where the group's render differs."""
    got = outcome(role, template, values, benign)
    want = outcome(role, template, plain)
    if same(want, got):
        return {name: {"status": "same"} for name in values}
    if len(values) > 1:
        names = sorted(values)
        out = {}
        for half in (names[:len(names) // 2], names[len(names) // 2:]):
            out.update(compare(role, template, {n: values[n] for n in half}, {n: plain[n] for n in half}, benign))
        return out
    (name,) = values
    if got["status"] == "error":
        return {name: {"status": "error", "error": got["error"]}}
    return {name: {"status": "differs", "got": got, "want": want}}


def template_results(pair):
    """main()'s results for one template (every option it reads, every hostile string)."""
    role, template = pair
    results = {"%s/%s" % (role, template): outcome(role, template)}
    names = [name for r, t, name in CASES if (r, t) == (role, template)]
    for index, hostile in enumerate(HOSTILE):
        harmless = re.sub(r"[^A-Za-z0-9]", "x", hostile)
        values, plain = {}, {}
        for name in names:
            spec = role_options(role)[name]
            if refused(role, name, index):
                results["%s/%s/%s/%d" % (role, template, name, index)] = {"status": "refused"}
                continue
            values[name] = hostile_values(spec, spec.get("default"))[index]
            plain[name] = hostile_values(spec, spec.get("default"), benign=True)[index]
        if not values:
            continue
        for name, status in compare(role, template, values, plain, {hostile: harmless}).items():
            results["%s/%s/%s/%d" % (role, template, name, index)] = status
    return results


def main():
    """Run in a process of its own: the collection's filters need Ansible's collection loader, which cannot be set up
    in a process (pytest's) that imported ansible_collections from the checkout as a plain package.

    For each template and hostile string, every option the checks accept gets it at once, and is compared with the
    render where each gets the same string without its structure characters (every one but letters and digits
    replaced by x); only where the two differ is each option rendered alone, to name it. Results: refused (by
    role_inputs), error (a filter refused the hostile value but not the harmless one), same, or what differs."""
    from ansible.plugins.loader import init_plugin_loader
    init_plugin_loader([str(COLLECTIONS)])
    # one worker process per CPU (forked after the loader is set up), each rendering whole templates: the results
    # are the same as one process's, in less time
    import multiprocessing
    workers = min(len(TEMPLATES), os.cpu_count() or 1)
    if workers > 1:
        with multiprocessing.get_context("fork").Pool(workers) as pool:
            parts = pool.map(template_results, TEMPLATES, chunksize=1)
    else:
        parts = [template_results(pair) for pair in TEMPLATES]
    results = {}
    for part in parts:
        results.update(part)
    json.dump(results, sys.stdout)


@pytest.fixture(scope="module")
def results():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(COLLECTIONS), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, __file__], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=900, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


@pytest.mark.parametrize("role,template", TEMPLATES)
def test_templates_render_with_the_defaults(results, role, template):
    got = results["%s/%s" % (role, template)]
    assert got["status"] == "ok", got
    assert got["count"] >= 1, got  # Kubernetes objects, or a Prometheus/adapter configuration, an IAM policy


@pytest.mark.parametrize("role,template,name", CASES)
def test_no_input_adds_yaml_structure(results, role, template, name):
    for index, hostile in enumerate(HOSTILE):
        got = results["%s/%s/%s/%d" % (role, template, name, index)]
        if got["status"] in ("refused", "same"):
            continue
        if got["status"] == "error":
            # a filter of the role refuses the value itself (the role fails there, before any change)
            assert name in got["error"] or any(w in got["error"] for w in ("must", "not", "needs", "got")), got
            continue
        detail = got["got"].get("error") or {
            "objects": (got["got"]["count"], got["got"]["kinds"]),
            "expected": (got["want"].get("count"), got["want"].get("kinds")),
            "new keys": [sorted(set(a) - set(b))[:5] for a, b in zip(got["got"]["shapes"],
                                                                     got["want"].get("shapes", []))]}
        pytest.fail("%s=%r adds structure to %s/%s: %s" % (name, hostile, role, template, detail))


if __name__ == "__main__":
    main()


def test_the_apt_templates_are_rendered_by_the_apt_test():
    """The roles left out here are those test_role_templates_apt.py renders, every template of theirs."""
    text = (ROOT / "tests" / "unit" / "test_role_templates_apt.py").read_text()
    assert all('"%s"' % role in text for role in NOT_YAML)
    assert all(path.suffix == ".j2" for role in NOT_YAML for path in (ROOT / "roles" / role / "templates").iterdir())
