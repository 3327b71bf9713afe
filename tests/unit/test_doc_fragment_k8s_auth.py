"""plugins/doc_fragments/k8s_auth.py is a copy of kubernetes.core's k8s_auth_options (so that the modules'
documentation renders where kubernetes.core is not installed, as in Galaxy's importer). The copy must document the
same options, types, aliases and suboptions as the installed kubernetes.core, whose argument spec the modules use."""

from __future__ import annotations

import yaml

from ansible_collections.k8sgpu.nvidia.plugins.doc_fragments.k8s_auth import ModuleDocFragment as Ours
from ansible_collections.kubernetes.core.plugins.doc_fragments.k8s_auth_options import ModuleDocFragment as Theirs
from ansible_collections.kubernetes.core.plugins.module_utils.args_common import AUTH_ARG_SPEC


def _shape(options):
    return {
        name: (spec.get("type"), tuple(spec.get("aliases") or ()), spec.get("elements"),
               _shape(spec.get("suboptions") or {}))
        for name, spec in options.items()
    }


def test_copy_documents_the_same_options_as_kubernetes_core():
    ours = yaml.safe_load(Ours.DOCUMENTATION)["options"]
    theirs = yaml.safe_load(Theirs.DOCUMENTATION)["options"]
    assert _shape(ours) == _shape(theirs)


def test_copy_documents_every_option_of_the_argument_spec_the_modules_use():
    ours = yaml.safe_load(Ours.DOCUMENTATION)["options"]
    assert set(ours) == set(AUTH_ARG_SPEC)
    for name, spec in AUTH_ARG_SPEC.items():
        assert ours[name].get("type", "str") == spec.get("type", "str"), name


def test_copy_shows_no_version_of_kubernetes_core():
    """Rendered in this collection's documentation, kubernetes.core's "Added in version 2.2.0" or a version_added key
    reads as a version of k8sgpu.nvidia (which has no 2.2.0)."""
    text = Ours.DOCUMENTATION
    assert "version_added" not in text
    assert "Added in version" not in text
