"""The collection's shared k8sgpu_* variables: one list (module_utils/_role_inputs.py SHARED_VARIABLES) that every
k8sgpu_* name the repository uses is in, and a warning naming the closest one for a name that is not."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

from ansible_collections.k8sgpu.nvidia.plugins.module_utils import _role_inputs as ri

ROOT = Path(__file__).resolve().parents[2]
# Where the shared variables are set, read or documented.
WHERE = ["README.md", "docs", "playbooks", "roles", "inventories", "molecule", "lab", "plugins", "tests/lab",
         "tests/gpu", "tests/cloud", "meta", "Makefile"]
# A k8sgpu_* word that is not preceded by _ (the internal _k8sgpu_*), nor a YAML anchor or alias (&k8sgpu_x, *k8sgpu_x)
# nor part of a dotted or longer name.
USE = re.compile(r"(?<![\w&*.$/-])k8sgpu_[a-z0-9_]*[a-z0-9](?![\w.])")
# k8sgpu_* words that are not variables: the scale check's prefixes (it reads <prefix>_verify_timeout ...), and the
# tests' Python package, and the misspelling role_inputs' documentation shows as an example.
NOT_VARIABLES = {"k8sgpu_eks", "k8sgpu_gke", "k8sgpu_testlib", "k8sgpu_kubconfig"}


def used_names():
    files = subprocess.run(["git", "ls-files", "--", *WHERE], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout.split()
    found = {}
    for name in files:
        path = ROOT / name
        if path.suffix in (".xz", ".gz", ".png", ".log", ".jsonl", ".json", ".txt") or not path.is_file():
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        for match in USE.finditer(text):
            found.setdefault(match.group(0), name)
    return found


def test_every_k8sgpu_name_the_repository_uses_is_a_known_shared_variable():
    used = used_names()
    assert "k8sgpu_kubeconfig" in used and "k8sgpu_apt_proxy" in used  # the grep finds them
    unknown = {name: where for name, where in used.items() if name not in ri.SHARED_VARIABLES | NOT_VARIABLES}
    assert not unknown, "k8sgpu_* names used but not in SHARED_VARIABLES (add them): %s" % unknown


def test_the_list_names_nothing_the_repository_does_not_use():
    used = set(used_names())
    computed = {"k8sgpu_%s%s" % (cloud, end) for cloud in ("eks", "gke") for end in ri._SCALE_CHECK}
    assert ri.SHARED_VARIABLES - used - computed == set()


def test_typos_in_shared_variables_warn_naming_the_closest_one():
    warnings = ri.unknown_shared(["k8sgpu_kubconfig", "k8sgpu_node_lables", "k8sgpu_kubeconfig", "_k8sgpu_lab_state",
                                  "driver_branch", "k8sgpu_zzzzzzzzzzzzzzzzzzzzzzz"])
    assert warnings == [
        "variable k8sgpu_kubconfig is not a variable of the k8sgpu.nvidia collection, so it has no effect; "
        "did you mean k8sgpu_kubeconfig?",
        "variable k8sgpu_node_lables is not a variable of the k8sgpu.nvidia collection, so it has no effect; "
        "did you mean k8sgpu_node_labels?",
        "variable k8sgpu_zzzzzzzzzzzzzzzzzzzzzzz is not a variable of the k8sgpu.nvidia collection, so it has no "
        "effect; the shared variables are listed in the README",
    ]


def test_check_warns_about_shared_typos_beside_the_roles_own():
    options = {"verify_timeout": {"type": "int", "default": 300}}
    errors, warnings = ri.check("verify", options, {}, names=["verify_timout", "k8sgpu_kube_contxt",
                                                              "k8sgpu_kube_context", "_k8sgpu_x"])
    assert errors == []
    assert len(warnings) == 2, warnings
    assert "verify_timout" in warnings[0] and "did you mean verify_timeout?" in warnings[0]
    assert "k8sgpu_kube_contxt" in warnings[1] and "did you mean k8sgpu_kube_context?" in warnings[1]


def test_a_shared_variable_set_by_a_task_is_not_reported():
    assert ri.check("verify", {}, {}, names=["k8sgpu_made_by_set_fact"], ignore={"k8sgpu_made_by_set_fact"}) == ([], [])
