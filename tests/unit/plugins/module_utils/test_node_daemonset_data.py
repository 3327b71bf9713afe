"""module_utils/_node_daemonset.py: what the node agents' roles share to build their objects as data, written as
Ansible's own filters write it (to_nice_yaml, to_json, hash, int, bool), for plain values and Ansible's own types."""
from __future__ import annotations

import jinja2.filters
import pytest
from ansible.plugins.filter import core

from ansible_collections.k8sgpu.nvidia.plugins.module_utils import _node_daemonset as nd


class Unsafe(str):
    """A str subclass that returns itself from str(), as ansible-core 2.17's AnsibleUnsafeText does."""

    def __str__(self):  # pylint: disable=invalid-str-returned
        return self


class Number(int):
    pass


DATA = {"version": "v1", "flags": {"migStrategy": "none", "failOnInitError": True, "ratio": 0.5,
                                   "plugin": {"deviceListStrategy": ["volume-mounts", "envvar"]}},
        "sharing": {"timeSlicing": {"resources": [{"name": "nvidia.com/gpu", "replicas": 4}]}},
        "text": "yes", "multi": "a\nb", "unicode": "Grüße ✓", "empty": {}, "none": None, "quoted": "'\": {x"}


def tagged(value):
    """DATA with every str and int replaced by a subclass, as Ansible hands values to a filter."""
    if isinstance(value, dict):
        return {Unsafe(k): tagged(v) for k, v in value.items()}
    if isinstance(value, list):
        return tuple(tagged(v) for v in value)
    if isinstance(value, str):
        return Unsafe(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return Number(value)
    return value


def test_plain_gives_base_types():
    got = nd.plain(tagged(DATA))
    assert got == DATA

    def types(value):
        if isinstance(value, dict):
            return {type(k) for k in value} | set().union(*(types(v) for v in value.values()))
        if isinstance(value, list):
            return {list}.union(*(types(v) for v in value))
        return {type(value)}
    assert types(got) <= {str, int, float, bool, type(None), list}


@pytest.mark.parametrize("indent", [2, 4])
def test_to_nice_yaml_is_ansibles(indent):
    assert nd.to_nice_yaml(DATA, indent=indent) == core.to_nice_yaml(DATA, indent=indent)
    assert nd.to_nice_yaml(tagged(DATA), indent=indent) == core.to_nice_yaml(DATA, indent=indent)


def test_to_json_and_sha256_are_ansibles():
    assert nd.to_json(tagged(DATA)) == core.to_json(DATA)
    assert nd.sha256(nd.to_json(DATA)) == core.get_hash(core.to_json(DATA), "sha256")
    assert nd.sha256("Grüße\n") == core.get_hash("Grüße\n", "sha256")


@pytest.mark.parametrize("value", [0, 3, "3", " 4 ", "2.0", "2.7", 5.9, True, Number(7), Unsafe("8")])
def test_to_int_is_jinjas(value):
    assert nd.to_int(value, "x") == jinja2.filters.do_int(value)


def test_to_int_names_the_setting_where_jinja_gives_zero():
    with pytest.raises(nd.NodeDaemonSetError, match="dcgm_exporter_port must be a whole number, got 'x'"):
        nd.to_int("x", "dcgm_exporter_port")


@pytest.mark.parametrize("value", [True, False, "true", "True", "yes", "on", "1", "false", "no", "off", "0", "",
                                   1, 0, Unsafe("yes"), Unsafe("false")])
def test_to_bool_is_ansibles(value):
    assert nd.to_bool(value) is core.to_bool(value)


def test_setting_names_what_is_missing():
    assert nd.setting({"a": 1}, "a", "owner") == 1
    with pytest.raises(nd.NodeDaemonSetError, match="owner: the settings lack 'b'"):
        nd.setting({"a": 1}, "b", "owner")
    with pytest.raises(nd.NodeDaemonSetError, match="owner expects the role's settings \\(a dict\\), got list"):
        nd.setting([], "a", "owner")
