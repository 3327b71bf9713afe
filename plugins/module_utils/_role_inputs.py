# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Checks of a role's inputs, for the action plugin k8sgpu.nvidia.role_inputs (pure functions, unit tested).

check() takes the role's argument spec options, the values the role will read (templated) and the names of the
variables the host has, and returns (errors, warnings) as lists of messages, each naming the variable, the value given
and what is accepted:

* the argument spec itself (types, choices, suboptions of lists of dicts), through ansible-core's
  ArgumentSpecValidator, as the role's own validation task does;
* a value the argument spec accepts only by converting it into a list or a mapping (a string "a,b"), or into a
  string from a boolean, a decimal, a list or a mapping (a taint value true, a tag 3.10): the role reads the
  variable as given, not as converted, so it is refused with the form to give (see _refused());
* RULES: what an argument spec cannot say (ranges, percentages, Kubernetes quantities and durations, a driver
  version of the branch asked for);
* the syntax of what inputs become (syntax_kind(), SYNTAX): Kubernetes names, namespaces, label and annotation keys,
  label and taint values, host paths, proxy URLs, in Kubernetes' own words, so no value can add YAML structure;
* variables with the role's prefix that no entry point of the role knows, and k8sgpu_* variables that are not shared
  variables of the collection (SHARED_VARIABLES): a warning naming the closest known one.
"""
from __future__ import annotations

import difflib
import math
import re
from collections.abc import Mapping, Sequence

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

from ansible_collections.k8sgpu.nvidia.plugins.module_utils._url import url_problem

# Kubernetes resource quantity (k8s.io/apimachinery resource.Quantity): a decimal number with an optional
# binary (Ki..Ei), decimal (n, u, m, k, M, G, T, P, E) or exponent suffix.
QUANTITY_RE = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+|Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?$")
# Go duration (time.ParseDuration), as Karpenter, the cluster autoscaler and kubectl take: 90s, 5m, 1h30m, 0s.
DURATION_RE = re.compile(r"^([0-9]+(\.[0-9]+)?(ns|us|\u00b5s|ms|s|m|h))+$|^0$")
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


def kind(value):
    """The kind of a value as YAML writes it: bool, int, float, str, none, list or dict."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "str"
    if isinstance(value, Mapping):
        return "dict"
    if isinstance(value, Sequence):
        return "list"
    return type(value).__name__


# Conversions refused: to a list or a mapping (a string "a,b" for a list: the role's templates would iterate its
# characters), and to a string from a boolean, a decimal, a list or a mapping (a taint value true becomes "True",
# a tag 3.10 is the number 3.1 in YAML). A string for a number or a boolean is accepted: it is what -e key=value and
# INI inventories give, and the roles' tasks convert those where they use them (| int, | bool). A whole number for
# a string (a branch 550) reads the same.
def _refused(given_kind, want):
    if want in ("list", "dict"):
        return given_kind not in ("none", want)
    if want == "str":
        return given_kind in ("bool", "float", "list", "dict")
    return False


_HOW = {
    "list": "a YAML list (for example [a, b]), not a string",
    "dict": "a YAML mapping (key: value), not a string",
    "bool": "true or false without quotes (with -e, as JSON: -e '{\"NAME\": true}')",
    "int": "a number without quotes (with -e, as JSON: -e '{\"NAME\": 5}')",
    "float": "a number without quotes (with -e, as JSON)",
    "str": "a string (quote it in YAML: 'true', '550')",
}


def conversions(name, given, converted, path=None):
    """(path, given, converted) for each place where the argument spec changed the kind of the value."""
    path = path or name
    kg, kc = kind(given), kind(converted)
    if kg != kc:
        return [(path, given, kc)] if _refused(kg, kc) else []
    if kg == "dict":
        out = []
        for key in given:
            if key in converted:
                out += conversions(name, given[key], converted[key], "%s.%s" % (path, key))
        return out
    if kg == "list" and len(given) == len(converted):
        out = []
        for index, (g, c) in enumerate(zip(given, converted)):
            out += conversions(name, g, c, "%s[%d]" % (path, index))
        return out
    return []


_SECRET = re.compile(r"proxy|passw|secret|token|credential|private", re.I)


def _short(value, limit=80, name=""):
    """The value for a message, cut to limit characters; hidden for a variable that may hold a secret."""
    if _SECRET.search(name):
        return "(a %s, value not shown)" % kind(value)
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def role_prefix(role):
    return role.rsplit(".", 1)[-1] + "_"


def unknown_variables(role, names, known, sibling_roles=(), ignore=()):
    """Warnings for names with the role's prefix that are not options of any entry point of the role.

    A name that also has the longer prefix of another role of the collection (karpenter_gpu_* seen from karpenter)
    belongs to that role. ``ignore``: names set by tasks (registered results, set_fact) or the role's own vars.
    """
    prefix = role_prefix(role)
    longer = [role_prefix(s) for s in sibling_roles if role_prefix(s) != prefix and role_prefix(s).startswith(prefix)]
    known = sorted(known)
    warnings = []
    for name in sorted(names):
        if not name.startswith(prefix) or name in known or name in ignore:
            continue
        if any(name.startswith(p) for p in longer):
            continue
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
        hint = ("did you mean %s?" % close[0]) if close else ("the role's variables are %s" % ", ".join(known))
        warnings.append("%s: variable %s is not a variable of the role, so it has no effect; %s"
                        % (role, name, hint))
    return warnings


# The collection's shared variables (set in inventories, read by its playbooks and by several roles' defaults), the one
# list of them: tests/unit/test_role_inputs_shared.py greps the repository for k8sgpu_* names and asserts each is
# here. The playbooks' scale check reads k8sgpu_eks_* and k8sgpu_gke_* settings by a computed name.
SHARED_PREFIX = "k8sgpu_"
_SCALE_CHECK = ("_scale_down_check", "_scale_down_poll", "_scale_down_timeout", "_verify_gpus", "_verify_image",
                "_verify_namespace", "_verify_require_logs", "_verify_timeout")
SHARED_VARIABLES = frozenset((
    "k8sgpu_apt_proxy", "k8sgpu_aws_endpoint_url", "k8sgpu_aws_partition", "k8sgpu_aws_profile", "k8sgpu_aws_region",
    "k8sgpu_controller_dir", "k8sgpu_deploy_device_plugin", "k8sgpu_drain_before_restart",
    "k8sgpu_eks_cluster", "k8sgpu_eks_cluster_autoscaler", "k8sgpu_eks_cluster_name", "k8sgpu_eks_cluster_state",
    "k8sgpu_eks_device_plugin", "k8sgpu_eks_gpu_labels", "k8sgpu_eks_gpu_taints", "k8sgpu_eks_karpenter_install",
    "k8sgpu_eks_nodegroup", "k8sgpu_eks_pod_identity", "k8sgpu_eks_pod_identity_role", "k8sgpu_eks_provisioner",
    "k8sgpu_eks_state", "k8sgpu_eks_verify",
    "k8sgpu_gke_cluster", "k8sgpu_gke_cluster_state", "k8sgpu_gke_node_pool", "k8sgpu_gke_state", "k8sgpu_gke_verify",
    "k8sgpu_install_container_toolkit", "k8sgpu_install_driver", "k8sgpu_kube_context", "k8sgpu_kubeconfig",
    "k8sgpu_label_nodes", "k8sgpu_max_fail_percentage", "k8sgpu_max_unavailable", "k8sgpu_monitoring",
    "k8sgpu_monitoring_alerts", "k8sgpu_monitoring_dashboard", "k8sgpu_monitoring_exporter",
    "k8sgpu_monitoring_metrics_adapter", "k8sgpu_monitoring_state", "k8sgpu_node_labels", "k8sgpu_node_name",
    "k8sgpu_reboot", "k8sgpu_serial",
    "k8sgpu_untaint_control_plane",
) + tuple("k8sgpu_%s%s" % (cloud, end) for cloud in ("eks", "gke") for end in _SCALE_CHECK))


# The declared kind of each shared variable (tests/unit/test_role_inputs_declared.py asserts one for every name):
# a SYNTAX kind, checked where the variable is set (shared_syntax_errors(), run by every role's role_inputs task), or
# one of SHARED_KINDS.
SHARED_KINDS = {
    "bool": "true or false (the playbooks read it with | bool)",
    "count_or_percent": "a whole number or a percentage (the filter maintenance_settings checks it)",
    "state": "present or absent (the playbooks' own choice)",
    "module_options": "a mapping of the options of the collection's module it is passed to (eks_cluster, "
                      "eks_nodegroup, gke_cluster, gke_node_pool, eks_pod_identity), checked by that module's "
                      "argument spec before any API call",
    "role_option": "passed to roles as the default of their own options, and checked there by those options' rules",
}
_SCALE_KINDS = {"_scale_down_check": "bool", "_scale_down_poll": "role_option", "_scale_down_timeout": "role_option",
                "_verify_gpus": "role_option", "_verify_image": "image", "_verify_namespace": "namespace",
                "_verify_require_logs": "bool", "_verify_timeout": "role_option"}
SHARED_SYNTAX = {
    "k8sgpu_apt_proxy": "proxy_url", "k8sgpu_aws_endpoint_url": "url", "k8sgpu_controller_dir": "local_path",
    "k8sgpu_aws_partition": "label_value",
    "k8sgpu_aws_profile": "aws_profile", "k8sgpu_aws_region": "aws_region", "k8sgpu_deploy_device_plugin": "bool",
    "k8sgpu_drain_before_restart": "bool", "k8sgpu_eks_cluster": "module_options",
    "k8sgpu_eks_cluster_autoscaler": "bool", "k8sgpu_eks_cluster_name": "eks_cluster_name",
    "k8sgpu_eks_cluster_state": "state", "k8sgpu_eks_device_plugin": "bool", "k8sgpu_eks_gpu_labels": "labels",
    "k8sgpu_eks_gpu_taints": "module_options", "k8sgpu_eks_karpenter_install": "bool",
    "k8sgpu_eks_nodegroup": "module_options", "k8sgpu_eks_pod_identity": "bool",
    "k8sgpu_eks_pod_identity_role": "iam_name", "k8sgpu_eks_provisioner": "label_value", "k8sgpu_eks_state": "state",
    "k8sgpu_eks_verify": "bool", "k8sgpu_gke_cluster": "module_options", "k8sgpu_gke_cluster_state": "state",
    "k8sgpu_gke_node_pool": "module_options", "k8sgpu_gke_state": "state", "k8sgpu_gke_verify": "bool",
    "k8sgpu_install_container_toolkit": "bool", "k8sgpu_install_driver": "bool", "k8sgpu_kube_context": "role_option",
    "k8sgpu_kubeconfig": "role_option", "k8sgpu_label_nodes": "bool", "k8sgpu_max_fail_percentage": "role_option",
    "k8sgpu_max_unavailable": "count_or_percent", "k8sgpu_monitoring": "bool", "k8sgpu_monitoring_alerts": "bool",
    "k8sgpu_monitoring_dashboard": "bool", "k8sgpu_monitoring_exporter": "bool",
    "k8sgpu_monitoring_metrics_adapter": "bool", "k8sgpu_monitoring_state": "state", "k8sgpu_node_labels": "labels",
    "k8sgpu_node_name": "subdomain",
    "k8sgpu_reboot": "bool", "k8sgpu_serial": "role_option", "k8sgpu_untaint_control_plane": "bool",
}
SHARED_SYNTAX.update({"k8sgpu_%s%s" % (cloud, end): kind_ for cloud in ("eks", "gke")
                      for end, kind_ in _SCALE_KINDS.items()})


def shared_syntax_errors(values):
    """The SYNTAX rules' messages for the shared variables set (templated), by SHARED_SYNTAX; '' and none pass (the
    playbooks and roles take their own default then)."""
    out = []
    for name in sorted(values):
        kind_ = SHARED_SYNTAX.get(name)
        value = values[name]
        if kind_ in SYNTAX and value not in ("", None):
            out += SYNTAX[kind_](name, value, values)
    return out


def unknown_shared(names, known=SHARED_VARIABLES):
    """Warnings for k8sgpu_* names that are not shared variables of the collection (not the internal _k8sgpu_*).

    The message names no role or host, so Ansible shows it once however many roles and hosts see it."""
    known = sorted(known)
    warnings = []
    for name in sorted(set(names)):
        if not name.startswith(SHARED_PREFIX) or name in known:
            continue
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
        hint = ("did you mean %s?" % close[0]) if close else "the shared variables are listed in the README"
        warnings.append("variable %s is not a variable of the k8sgpu.nvidia collection, so it has no effect; %s"
                        % (name, hint))
    return warnings


def check(role, options, values, names=(), known=None, sibling_roles=(), ignore=(), rules=None):
    """Check one role's inputs. Returns (errors, warnings).

    options: the entry point's argument spec options; values: templated values of the options that are set;
    names: every variable name the host has; known: option names of every entry point of the role (default
    the options' names); rules: {option: [rule, ...]} (default RULES[role name]).
    """
    errors = []
    values = {k: v for k, v in values.items() if k in options}
    # Numbers that are not finite (NaN, infinities, 1e400) or past int64 are refused first, with a message naming
    # the variable: ansible-core's int conversion raises OverflowError on an infinity, and NaN passes every range.
    numbers = number_errors(options, values)
    errors += ["%s: %s" % (role, m) for m in numbers.values()]
    values = {k: v for k, v in values.items() if k not in numbers}
    # The values come from the host's variables, role defaults included; the spec's own defaults (templates
    # for some) are not applied again.
    validator = ArgumentSpecValidator({k: {a: b for a, b in v.items() if a != "default"} for k, v in options.items()})
    try:
        result = validator.validate(values, validate_role_argument_spec=True)
    except (OverflowError, ValueError, TypeError) as exc:  # a conversion ansible-core does not catch itself
        errors.append("%s: the role's inputs could not be read (%s); give each number as a finite number and each "
                      "string as a string" % (role, exc))
        return errors, []
    for message in result.error_messages:
        errors.append("%s: %s" % (role, message))
    refused = {n for n in values if any(n in m for m in result.error_messages)}
    if not result.error_messages:
        for name, given in values.items():
            for path, value, want in conversions(name, given, result.validated_parameters.get(name)):
                refused.add(name)
                errors.append("%s: %s is %s (%s); the role reads it as given, so give %s"
                              % (role, path, _short(value, name=name), kind(value), _HOW[want].replace("NAME", name)
                                 if want in _HOW else want))
    if rules is None:
        rules = RULES.get(role.rsplit(".", 1)[-1], {})
    for name, checks in rules.items():
        if name not in values:
            continue
        if any(name in message for message in result.error_messages):
            continue  # the argument spec refused it already
        for rule in checks:
            if values[name] is None and not getattr(rule, "takes_none", False):
                continue  # an empty value: read only by the rules marked takes_none
            errors += ["%s: %s" % (role, m) for m in rule(name, values[name], values)]
    errors += ["%s: %s" % (role, m) for m in syntax_errors(
        role.rsplit(".", 1)[-1], options, values, skip=refused)]
    warnings = unknown_variables(role, names, options.keys() if known is None else known, sibling_roles, ignore)
    warnings += unknown_shared(n for n in names if n not in ignore)
    return errors, warnings


# Rules: each takes (name, value, values) and returns a list of messages naming the variable, the value given and
# what is accepted. values holds the entry point's variables that are set (templated), for rules between fields.

# The largest magnitude a number input may have: Kubernetes' and the modules' integers are int64.
NUMBER_LIMIT = 2 ** 63 - 1


def _finite(number):
    """number when it is finite and within int64's range, else None."""
    try:
        return number if math.isfinite(number) and abs(number) <= NUMBER_LIMIT else None
    except OverflowError:  # an int too large for a float
        return None


def _number(value):
    """A number input as a number: an int, a float or a numeric string, finite and within int64's range; None
    for anything else (NaN, infinities and 1e400 included, so no range rule lets them through)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return _finite(value)
    if isinstance(value, str):
        try:
            return _finite(float(value)) if value.strip() else None
        except (ValueError, OverflowError):
            return None
    return None


def _not_finite(value):
    """Whether value is (or, as a string, reads as) a number that is not finite or is past int64's range."""
    if isinstance(value, bool):
        return False
    if isinstance(value, (int, float)):
        return _finite(value) is None
    if isinstance(value, str):
        text = value.strip()
        if not re.fullmatch(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?|[+-]?(nan|inf|infinity)", text, re.I):
            return False
        try:
            return _finite(float(text)) is None
        except (ValueError, OverflowError):
            return True
    return False


def _floats(value, path):
    """(path, value) of every float in value (lists and mappings walked) that is not finite."""
    if isinstance(value, float) and not math.isfinite(value):
        return [(path, value)]
    if isinstance(value, Mapping):
        return [hit for key, item in value.items() for hit in _floats(item, "%s.%s" % (path, key))]
    if isinstance(value, (list, tuple)):
        return [hit for index, item in enumerate(value) for hit in _floats(item, "%s[%d]" % (path, index))]
    return []


def number_errors(options, values):
    """{name: message} for the values that are numbers but not finite ones: an int, float or raw option given NaN,
    an infinity or a number past int64 (1e400, as YAML, JSON or a string), and a NaN or infinity anywhere in any
    option's value (YAML's .nan and .inf)."""
    out = {}
    for name, value in values.items():
        typ = (options.get(name) or {}).get("type", "str")
        if typ in ("int", "float", "raw") and _not_finite(value):
            out[name] = ("%s is %s; give a finite number from %d to %d (NaN, infinities and numbers past 64 bits are "
                         "refused)" % (name, _short(value), -NUMBER_LIMIT, NUMBER_LIMIT))
            continue
        hits = _floats(value, name)
        if hits:
            out[name] = "%s is %s; give a finite number (NaN and infinities are refused)" % (hits[0][0], hits[0][1])
    return out


def in_range(low=None, high=None, what="a number"):
    """A number (int, float or numeric string) from low to high inclusive."""
    bounds = ("from %s to %s" % (low, high) if low is not None and high is not None
              else "%s or more" % low if low is not None else "%s or less" % high)

    def rule(name, value, values):
        number = _number(value)
        if number is None or (low is not None and number < low) or (high is not None and number > high):
            return ["%s is %s; give %s %s" % (name, _short(value), what, bounds)]
        return []
    return rule


def weight(name, value, values):
    """Karpenter NodePool weight: 1 to 100, 0 for none."""
    number = _number(value)
    if number is None or number != int(number) or not 0 <= number <= 100:
        return ["%s is %s; give a Karpenter NodePool weight from 1 to 100 (0 leaves the weight out)" % (name, _short(value))]
    return []


def _percent_or_count(value, low, high_percent=100):
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return value >= low
    if isinstance(value, str):
        m = re.match(r"^(\d+)%$", value)
        if m:
            return low <= int(m.group(1)) <= high_percent
        return value.isdigit() and int(value) >= low
    return False


def count_or_percent(low=0):
    def rule(name, value, values):
        if not _percent_or_count(value, low):
            return ["%s is %s; give a whole number (%d or more) or a percentage from %d%% to 100%% such as '25%%'"
                    % (name, _short(value), low, low)]
        return []
    return rule


def quantity(name, value, values, allow_empty=False):
    """A Kubernetes quantity of a resource: finite and not negative (NaN, 1e400 and -1 refused)."""
    if allow_empty and value in ("", None):
        return []
    if isinstance(value, bool) or not isinstance(value, (int, float, str)) or not QUANTITY_RE.match(str(value)):
        return ["%s is %s; give a Kubernetes quantity such as 500m, 2, 512Mi or 1Gi" % (name, _short(value))]
    number = to_number(value)
    if number is None or _finite(number) is None:
        return ["%s is %s; give a finite Kubernetes quantity such as 500m, 2, 512Mi or 1Gi" % (name, _short(value))]
    if number < 0:
        return ["%s is %s; a resource quantity cannot be negative: give 0 or more, such as 500m or 1Gi"
                % (name, _short(value))]
    return []


def resources(name, value, values):
    """Kubernetes ResourceRequirements: requests and limits, each a mapping of resource name to quantity."""
    out = []
    for key, quantities in (value or {}).items():
        if key not in ("requests", "limits"):
            out.append("%s has %s; a container's resources take requests and limits" % (name, _short(key)))
            continue
        if not isinstance(quantities, Mapping):
            out.append("%s.%s is %s; give a mapping of resource name to quantity (cpu: 100m, memory: 128Mi)"
                       % (name, key, _short(quantities)))
            continue
        for resource, amount in quantities.items():
            out += quantity("%s.%s.%s" % (name, key, resource), amount, values)
    requests, limits = (value or {}).get("requests") or {}, (value or {}).get("limits") or {}
    if isinstance(requests, Mapping) and isinstance(limits, Mapping):
        for resource in set(requests) & set(limits):
            low, high = to_number(requests[resource]), to_number(limits[resource])
            if low is not None and high is not None and low > high:
                out.append("%s: requests.%s %s is more than limits.%s %s; a request cannot exceed its limit"
                           % (name, resource, _short(requests[resource]), resource, _short(limits[resource])))
    return out


_SUFFIX = {"Ki": 2 ** 10, "Mi": 2 ** 20, "Gi": 2 ** 30, "Ti": 2 ** 40, "Pi": 2 ** 50, "Ei": 2 ** 60,
           "n": 1e-9, "u": 1e-6, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18}


def to_number(amount):
    """A Kubernetes quantity as a float, None when it is not one."""
    text = str(amount)
    m = QUANTITY_RE.match(text)
    if not m or isinstance(amount, bool):
        return None
    suffix = m.group(3) or ""
    try:
        if suffix[:1] in ("e", "E") and len(suffix) > 1:
            return float(text)
        return float(text[:len(text) - len(suffix)]) * _SUFFIX.get(suffix, 1)
    except OverflowError:
        return float("inf")


def quantities(name, value, values):
    out = []
    for key, amount in (value or {}).items():
        out += quantity("%s.%s" % (name, key), amount, values)
    return out


def duration(allow=()):
    """A Go duration (90s, 5m, 1h30m); allow: other accepted words (Never, the empty string)."""
    def rule(name, value, values):
        if value in allow or (isinstance(value, str) and DURATION_RE.match(value)):
            return []
        extra = "".join(" or %s" % (repr(a) if a == "" else a) for a in allow)
        return ["%s is %s; give a duration such as 30s, 5m or 1h30m (units ns, us, ms, s, m, h)%s"
                % (name, _short(value), extra)]
    return rule


def port(name, value, values):
    return in_range(1, 65535, "a port")(name, value, values)


def driver_version(name, value, values):
    """An exact driver version or its prefix, of the branch asked for."""
    text = "" if value is None else str(value)
    if text == "":
        return []
    if not re.match(r"^(\d+:)?\d+(\.\d+)*([-+~][0-9A-Za-z.+~-]*)?$", text):
        return ["%s is %s; give a driver version or its prefix such as 535.261.03 (or '' for the newest)"
                % (name, _short(value))]
    branch = "" if values.get("driver_branch") is None else str(values.get("driver_branch"))
    bare = text.split(":", 1)[-1]
    if branch and not re.match(r"^%s(\.|$)" % re.escape(branch), bare):
        return ["%s is %s but driver_branch is %s; give a version of the %s branch (%s.*), or another driver_branch, "
                "or '' for the newest of the branch" % (name, _short(value), _short(branch), branch, branch)]
    return []


def tolerations(name, value, values):
    """Kubernetes tolerations beyond their argument spec: an empty key needs operator Exists, Exists takes no value,
    tolerationSeconds only with NoExecute."""
    out = []
    for index, item in enumerate(value or []):
        if not isinstance(item, Mapping):
            continue
        where = "%s[%d]" % (name, index)
        operator = item.get("operator") or "Equal"
        if not item.get("key") and operator != "Exists":
            out.append("%s is %s; a toleration without a key must have operator Exists" % (where, _short(dict(item))))
        if operator == "Exists" and item.get("value") not in (None, ""):
            out.append("%s is %s; operator Exists takes no value (drop value, or use operator Equal)"
                       % (where, _short(dict(item))))
        if item.get("tolerationSeconds") is not None and item.get("effect") != "NoExecute":
            out.append("%s is %s; tolerationSeconds applies only to effect NoExecute" % (where, _short(dict(item))))
    return out


def taints(name, value, values):
    """Taints beyond their argument spec: each key once per effect."""
    out, seen = [], set()
    for index, item in enumerate(value or []):
        if not isinstance(item, Mapping):
            continue
        pair = (item.get("key"), item.get("effect"))
        if pair in seen:
            out.append("%s[%d] repeats the taint %s:%s; give each key once per effect" % (name, index, pair[0], pair[1]))
        seen.add(pair)
        if not re.match(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$",
                        str(item.get("key") or "")):
            out.append("%s[%d].key is %s; give a label-style key such as nvidia.com/gpu"
                       % (name, index, _short(item.get("key"))))
    return out


def disruption_budgets(name, value, values):
    out = []
    for index, item in enumerate(value or []):
        if isinstance(item, Mapping) and "nodes" in item:
            out += count_or_percent(0)("%s[%d].nodes" % (name, index), item["nodes"], values)
        if isinstance(item, Mapping) and item.get("duration") not in (None, ""):
            out += duration()("%s[%d].duration" % (name, index), item["duration"], values)
    return out


def block_device_mappings(name, value, values):
    out = []
    for index, item in enumerate(value or []):
        ebs = item.get("ebs") if isinstance(item, Mapping) else None
        if isinstance(ebs, Mapping) and "volumeSize" in ebs:
            out += quantity("%s[%d].ebs.volumeSize" % (name, index), ebs["volumeSize"], values)
    return out


def scaling_rules(name, value, values):
    """HPAScalingRules: stabilizationWindowSeconds 0 to 3600, policies' periodSeconds 1 to 1800, value above 0."""
    out = []
    value = value or {}
    if value.get("stabilizationWindowSeconds") is not None:
        window = in_range(0, 3600, "a whole number of seconds")
        out += window("%s.stabilizationWindowSeconds" % name, value["stabilizationWindowSeconds"], values)
    for index, policy in enumerate(value.get("policies") or []):
        if not isinstance(policy, Mapping):
            continue
        if policy.get("periodSeconds") is not None:
            period = in_range(1, 1800, "a whole number of seconds")
            out += period("%s.policies[%d].periodSeconds" % (name, index), policy["periodSeconds"], values)
        if policy.get("value") is not None:
            out += in_range(1, None, "a whole number")("%s.policies[%d].value" % (name, index), policy["value"], values)
    return out


_TARGET_FORM = re.compile(r"[0-9]+(\.[0-9]+)?(m|k|M|G)?")


def gpu_target(name, value, values):
    """The HPA's target: a quantity of digits and m, k, M or G (with state present), above 0; a percentage (at most
    100) for a utilisation metric."""
    if values.get("gpu_autoscaling_state") != "absent" and not _TARGET_FORM.fullmatch(str(value)):
        return ["%s is %s; give a quantity such as 60, 2.5, 500m or 2k (digits, an optional decimal part, then "
                "optionally m, k, M or G)" % (name, _short(value))]
    number = to_number(value)
    if number is None:
        return []
    metric = values.get("gpu_autoscaling_object_metric" if values.get("gpu_autoscaling_metric_type") == "object"
                        else "gpu_autoscaling_metric") or ""
    if number <= 0:
        return ["%s is %s; give a target above 0" % (name, _short(value))]
    if "UTIL" in str(metric) and number > 100:
        return ["%s is %s; %s is a utilisation in percent, so give a target from 1 to 100" % (name, _short(value), metric)]
    return []


gpu_target.takes_none = True  # type raw: ansible-core lets None through


CA_EXPANDERS = ("random", "most-pods", "least-waste", "price", "priority", "grpc", "least-nodes")


def expander(name, value, values):
    bad = [e for e in str(value).split(",") if e.strip() not in CA_EXPANDERS]
    if bad:
        return ["%s is %s; give one or more (comma-separated) of %s" % (name, _short(value), ", ".join(CA_EXPANDERS))]
    return []


def fraction(name, value, values):
    return in_range(0, 1, "a fraction")(name, value, values)


_SECONDS = in_range(1, None, "a whole number of seconds")
_NONNEG = in_range(0, None, "a whole number")


# The checks the roles' preflight asserts made before 1.2.0 (issue 35: each check in one place), with the same
# accepted values: the ranges and forms here, the relations between settings and what the cluster or the controller
# holds in the roles' preflight. A value left empty (None) of a typed option is refused by ansible-core's validation
# of the argument spec, before this module runs; the rules of string options below refuse it themselves.
# when_present() applies a rule only with the role's state present, where the role's preflight ran only then.

def when_present(state, rule):
    """rule, only when the variable state is not 'absent' (the role removes what it made and reads nothing else)."""
    def wrapped(name, value, values):
        return [] if values.get(state) == "absent" else rule(name, value, values)
    wrapped.takes_none = getattr(rule, "takes_none", False)
    return wrapped


def pattern(regex, what, allow=(), stringify=False):
    """A string that matches regex whole (a number too with stringify); allow: other values accepted ('')."""
    compiled = re.compile(regex)

    def rule(name, value, values):
        if value in allow and isinstance(value, str):
            return []
        text = str(value) if stringify and isinstance(value, (int, float)) and not isinstance(value, bool) else value
        if isinstance(text, str) and compiled.fullmatch(text):
            return []
        return ["%s is %s; give %s" % (name, _short(value, name=name), what)]
    rule.takes_none = True
    return rule


def url(schemes=("http", "https"), userinfo=False):
    """A URL of one of schemes: no whitespace or control character anywhere (checked on the raw text: urlsplit drops
    newlines), a host for http(s), no user information unless userinfo ("https": a repository's user and password,
    over https only, which the roles give apt in auth.conf.d, never in the source; a proxy's are proxy_url's); the
    checks are module_utils/_url.py's url_problem, which the apt source filters use too."""
    def rule(name, value, values):
        problem = url_problem(value, schemes=schemes, userinfo=userinfo)
        if problem:
            return ["%s is refused (value not shown): %s; give a %s URL with nothing but the URL in it"
                    % (name, problem, " or ".join("%s://" % s for s in schemes))]
        return []
    return rule


def first_of(*rules):
    """The messages of the first of rules that refuses the value (one message for one value)."""
    def rule(name, value, values):
        for one in rules:
            out = one(name, value, values)
            if out:
                return out
        return []
    rule.takes_none = any(getattr(one, "takes_none", False) for one in rules)
    return rule


def non_empty(what):
    """A list (or mapping) with at least one entry."""
    def rule(name, value, values):
        if value is None or isinstance(value, (str, bytes)) or len(value) == 0:
            return ["%s is %s; give %s" % (name, _short(value), what)]
        return []
    rule.takes_none = True
    return rule


def max_length(limit, why):
    def rule(name, value, values):
        if isinstance(value, str) and len(value) > limit:
            return ["%s is %s (%d characters); give at most %d characters (%s)"
                    % (name, _short(value), len(value), limit, why)]
        return []
    return rule


# Prometheus' and Karpenter's durations as the roles accepted them (whole numbers, one or more units).
PROMETHEUS_DURATION = pattern(r"([0-9]+(ms|s|m|h))+", "a Prometheus duration such as 15s, 1m or 1h30m (units ms, s, m, h)")
KARPENTER_DURATION = pattern(r"Never|([0-9]+(s|m|h))+", "a duration such as 30s, 5m or 720h (units s, m, h), or Never")


def gke_image_type(name, value, values):
    """A GKE node image type that Google ships driver installers for: COS* or UBUNTU* (any case)."""
    if isinstance(value, str) and re.match(r"(COS|UBUNTU)", value.upper()):
        return []
    return ["%s is %s; give a COS* or UBUNTU* image type (such as COS_CONTAINERD): Google ships driver installers for "
            "COS and Ubuntu node images only, and Windows pools get drivers from GKE" % (name, _short(value))]


gke_image_type.takes_none = True


def node_class_ref(name, value, values):
    """Another node class for a NodePool: empty, or exactly group, kind and name."""
    if isinstance(value, Mapping) and (len(value) == 0 or sorted(value) == ["group", "kind", "name"]):
        return []
    return ["%s is %s; give {} (the role's own EC2NodeClass) or exactly group, kind and name, for example "
            "{group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}" % (name, _short(value))]


node_class_ref.takes_none = True


def _own_node_class(values):
    """karpenter_gpu makes its own EC2NodeClass: state present and no other node class given."""
    return values.get("karpenter_gpu_state") != "absent" and not values.get("karpenter_gpu_node_class")


def own_node_class(rule):
    def wrapped(name, value, values):
        return rule(name, value, values) if _own_node_class(values) else []
    wrapped.takes_none = getattr(rule, "takes_none", False)
    return wrapped


_CONFIGMAP_KEY = re.compile(r"[-._a-zA-Z0-9]+")


def dashboards(name, value, values):
    """Grafana dashboards: each a ConfigMap name (DNS-1123 subdomain) and a JSON file whose base name is a ConfigMap
    key. That the file exists and holds a dashboard is the role's preflight's, on the controller."""
    out = []
    for index, item in enumerate(value or []):
        where = "%s[%d]" % (name, index)
        if not isinstance(item, Mapping):
            continue  # the argument spec refuses it
        out += subdomain_name(where + ".name", item.get("name"), values)
        path = item.get("path")
        if not isinstance(path, str) or path == "":
            out.append("%s.path is %s; give the dashboard's JSON file on the controller" % (where, _short(path)))
        elif not _CONFIGMAP_KEY.fullmatch(path.rsplit("/", 1)[-1]):
            out.append("%s.path is %s; its base name becomes a ConfigMap key, so give a file named with letters, "
                       "digits, '-', '_' and '.' only" % (where, _short(path)))
    return out


def _local_chart(values):
    return bool(re.match(r"[./]", str(values.get("prometheus_stack_chart_ref") or "")))


def chart_repo_url(name, value, values):
    """The chart repository: an http(s):// or oci:// URL of the url rule's syntax, unless the chart is a local path
    (then it is not read)."""
    if _local_chart(values):
        return []
    if not (isinstance(value, str) and re.match(r"(https?|oci)://", value)):
        return ["%s is %s; give the chart repository's http://, https:// or oci:// URL (or a local path in "
                "prometheus_stack_chart_ref)" % (name, _short(value))]
    return url(("http", "https", "oci"))(name, value, values)


chart_repo_url.takes_none = True


def one_label(name, value, values):
    """Exactly one label: the Grafana sidecar loads dashboards by one key and value."""
    if isinstance(value, Mapping) and len(value) == 1:
        return []
    return ["%s is %s; give exactly one label (the Grafana sidecar loads dashboards by one key and value)"
            % (name, _short(value))]


one_label.takes_none = True


def alert_receiver(name, value, values):
    """An Alertmanager receiver: empty, or one with a name other than "null" (the chart's own)."""
    if not value:
        return []
    receiver = value.get("name") if isinstance(value, Mapping) else None
    if receiver is None or str(receiver) in ("", "null"):
        return ["%s.name is %s; give the receiver a name other than \"null\" (the chart's own receiver)"
                % (name, _short(receiver))]
    return []


# The one place of the ranges and forms of the roles' inputs (docs/development.md, "Where inputs are checked"):
# the argument specs say the types and choices, these rules the ranges and forms, and a role's preflight only what
# needs facts, the cluster, the controller's files or two settings together. Left elsewhere: driver_branch's form
# and node_maintenance's settings (their roles' own tasks); gpu_alerts' durations, framebuffer_percent, XID codes,
# job and selector (the filter gpu_alert_rules, whose messages the lab tests assert) and dcgm_exporter's counters
# (the filter dcgm_counters_csv), both run by the role's preflight before any change.
# node_maintenance's settings, refused before any Node is touched, in the words the lab tests read
# (tests/lab/test_maintenance_safety.py). A count as the drain module reads it: 1 or more, or 1% to 100%.
_MAINTENANCE_COUNT = re.compile(r"^\s*(\d+)\s*(%?)\s*$")


def maintenance_count(name, value, values):
    match = None if isinstance(value, bool) else _MAINTENANCE_COUNT.match(str(value))
    if match is None or int(match.group(1)) < 1 or (match.group(2) and int(match.group(1)) > 100):
        return ["%s is %s: it must be a number of GPU Nodes out of service at once (1 or more) or a percentage "
                "(1%% to 100%%), as 1 or '25%%'" % (name, value)]
    return []


def _maintenance_number(accept, what):
    def rule(name, value, values):
        number = _number(value)
        return [] if number is not None and accept(number) else ["%s is %s: it must be %s" % (name, value, what)]
    return rule


_MAINTENANCE_TIMEOUT = [_maintenance_number(lambda n: n >= 1 and n == int(n), "a whole number of seconds, 1 or more")]

RULES = {
    "cluster_autoscaler": {
        "cluster_autoscaler_scale_down_unneeded_time": [duration()],
        "cluster_autoscaler_scale_down_delay_after_add": [duration()],
        "cluster_autoscaler_scale_down_utilization_threshold": [fraction],
        "cluster_autoscaler_expander": [expander],
        "cluster_autoscaler_log_level": [in_range(0, 10, "a klog verbosity")],
        "cluster_autoscaler_resources": [resources],
    },
    "container_toolkit": {
        "container_toolkit_apt_lock_timeout": [_NONNEG],
    },
    "dcgm_exporter": {
        "dcgm_exporter_extra_tolerations": [tolerations],
        "dcgm_exporter_resources": [resources],
        "dcgm_exporter_wait_timeout": [_SECONDS],
        "dcgm_exporter_version": [pattern(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}", "an image tag such as "
                                          "4.5.3-4.8.2-ubuntu22.04 (letters, digits, '_', '.' and '-', at most 128)")],
        "dcgm_exporter_port": [port],
        "dcgm_exporter_collect_interval_ms": [in_range(100, None, "a number of milliseconds")],
        "dcgm_exporter_probe_initial_delay": [_NONNEG],
        "dcgm_exporter_probe_period": [_SECONDS],
        "dcgm_exporter_probe_timeout": [_SECONDS],
        "dcgm_exporter_probe_failure_threshold": [in_range(1, None, "a whole number")],
        "dcgm_exporter_scrape_interval": [PROMETHEUS_DURATION],
        # also the DaemonSet's and its Service's name; 52 characters at most, as the role's preflight accepted it
        "dcgm_exporter_name": [max_length(52, "the name of the exporter's DaemonSet and Service")],
    },
    "device_plugin": {
        "device_plugin_extra_tolerations": [tolerations],
        "device_plugin_resources": [resources],
        "device_plugin_wait_timeout": [_SECONDS],
        "device_plugin_time_slicing_replicas": [_NONNEG],
    },
    "driver": {
        "driver_version": [driver_version],
        "driver_reboot_timeout": [_SECONDS],
        "driver_apt_lock_timeout": [_NONNEG],
        "driver_apt_timeout": [_NONNEG],
    },
    "gke_driver_installer": {
        "gke_driver_installer_cpu_request": [quantity],
        "gke_driver_installer_image_type": [gke_image_type],
    },
    "gpu_dashboard": {
        "gpu_dashboard_extra": [dashboards],
    },
    "gpu_alerts": {
        "gpu_alerts_gpu_temp_celsius": [in_range(1, 150, "a temperature in degrees Celsius")],
        "gpu_alerts_memory_temp_celsius": [in_range(1, 150, "a temperature in degrees Celsius")],
        "gpu_alerts_gpu_replicas": [in_range(1, None, "a whole number")],
    },
    "gpu_autoscaling": {
        "gpu_autoscaling_target_value": [gpu_target],
        "gpu_autoscaling_min_replicas": [when_present("gpu_autoscaling_state", in_range(1, None, "a whole number"))],
        "gpu_autoscaling_scale_up": [scaling_rules],
        "gpu_autoscaling_scale_down": [scaling_rules],
    },
    "gpu_metrics_adapter": {
        "gpu_metrics_adapter_replicas": [in_range(1, None, "a whole number")],
        "gpu_metrics_adapter_tolerations": [tolerations],
        "gpu_metrics_adapter_resources": [resources],
        "gpu_metrics_adapter_external_port": [port],
        "gpu_metrics_adapter_wait_timeout": [_SECONDS],
        "gpu_metrics_adapter_prometheus_url": [when_present("gpu_metrics_adapter_state", first_of(pattern(
            r"https?://[^/:]+.*", "Prometheus' URL, http(s)://host[:port][/path]"), url()))],
        "gpu_metrics_adapter_relist_interval": [when_present("gpu_metrics_adapter_state", pattern(
            r"[0-9]+(ms|s|m|h)", "a duration of one unit such as 30s or 1m (units ms, s, m, h)"))],
        "gpu_metrics_adapter_cert_renew_before_days": [when_present("gpu_metrics_adapter_state", in_range(
            0, None, "a whole number of days"))],
    },
    "karpenter": {
        "karpenter_replicas": [in_range(1, None, "a whole number")],
        "karpenter_batch_max_duration": [duration()],
        "karpenter_batch_idle_duration": [duration()],
        "karpenter_vm_memory_overhead_percent": [fraction],
        "karpenter_reserved_enis": [_NONNEG],
        "karpenter_resources": [resources],
        "karpenter_tolerations": [tolerations],
        "karpenter_pdb_max_unavailable": [count_or_percent(0)],
        "karpenter_version": [pattern(r"[0-9]+\.[0-9]+\.[0-9]+", "a Karpenter release such as 1.14.1 (no v)")],
    },
    "karpenter_gpu": {
        "karpenter_gpu_taints": [taints],
        "karpenter_gpu_startup_taints": [taints],
        "karpenter_gpu_extra_limits": [quantities],
        "karpenter_gpu_weight": [weight],
        "karpenter_gpu_disruption_budgets": [disruption_budgets],
        "karpenter_gpu_block_device_mappings": [block_device_mappings],
        "karpenter_gpu_delete_timeout": [_SECONDS],
        "karpenter_gpu_instance_families": [non_empty("at least one instance family, such as [g6, p5]")],
        "karpenter_gpu_capacity_types": [non_empty("at least one of spot, on-demand and reserved")],
        "karpenter_gpu_gpu_limit": [in_range(1, None, "a whole number of GPUs")],
        "karpenter_gpu_consolidate_after": [KARPENTER_DURATION],
        "karpenter_gpu_expire_after": [KARPENTER_DURATION],
        "karpenter_gpu_termination_grace_period": [pattern(
            r"([0-9]+(s|m|h))+", "a duration such as 48h or 30m (units s, m, h), or '' for none", allow=("",))],
        "karpenter_gpu_node_class": [node_class_ref],
        # the role's own EC2NodeClass (state present, no other node class given)
        "karpenter_gpu_ami_alias": [own_node_class(pattern(
            r"(al2023|bottlerocket)@(latest|v[0-9][0-9.]*)", "an AMI alias family@version: al2023@latest, or pinned "
            "al2023@v20251120 (al2023 or bottlerocket, the families whose user data isolates GPUs: al2 is refused)"))],
        "karpenter_gpu_subnet_selector_terms": [own_node_class(non_empty("at least one subnet selector term"))],
        "karpenter_gpu_security_group_selector_terms": [own_node_class(non_empty(
            "at least one security group selector term"))],
    },
    "node_maintenance": {
        "node_maintenance_max_unavailable": [maintenance_count],
        "node_maintenance_drain_retry_delay": [_maintenance_number(lambda n: n > 0, "a number of seconds more than 0")],
        "node_maintenance_drain_timeout": _MAINTENANCE_TIMEOUT,
        "node_maintenance_wait_timeout": _MAINTENANCE_TIMEOUT,
        "node_maintenance_reboot_timeout": _MAINTENANCE_TIMEOUT,
        "node_maintenance_expected_gpus": [_maintenance_number(
            lambda n: n >= 0 and n == int(n),
            "a whole number of GPUs, 0 or more (0: the count the Node advertised before the drain)")],
    },
    "prometheus_stack": {
        "prometheus_stack_chart_repo_url": [chart_repo_url],
        "prometheus_stack_grafana_dashboard_labels": [one_label],
        "prometheus_stack_wait_timeout": [pattern(r"([0-9]+(\.[0-9]+)?(ms|s|m|h))+", "a Go duration such as 10m or "
                                                  "1h30m (units ms, s, m, h)", stringify=True)],
        "prometheus_stack_gpu_alert_receiver": [alert_receiver],
    },
    "verify": {
        "verify_node_devices": [lambda n, v, vs: [m for i, d in enumerate(v or []) for m in _NONNEG("%s[%d]" % (n, i), d, vs)]],
        "verify_node_elements": [in_range(1, None, "a whole number")],
        "verify_run_as_user": [_NONNEG],
        "verify_timeout": [_SECONDS],
    },
}


# Syntax of what a role's inputs become: Kubernetes names, namespaces, labels, annotations and taints (the rules and
# wording of k8s.io/apimachinery/pkg/util/validation), host paths and proxy URLs. A value that passes cannot add
# structure to the YAML the roles render (no newline, no ": ", no "{", no quote), and the templates render each value
# with to_json besides. Which rule an option gets is decided by syntax_kind(): by its full name (SYNTAX_BY_NAME), else
# by the end of its name (SYNTAX_BY_SUFFIX, the longest end first), else by its type (path); tests/unit/
# test_role_inputs_syntax.py asserts that every option whose name or type looks like one of these has a rule or is in
# FREE_TEXT with the reason, so a new option cannot be left out.

_DNS1123_LABEL = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN = _DNS1123_LABEL + r"(\." + _DNS1123_LABEL + ")*"
_DNS1035_LABEL = "[a-z]([-a-z0-9]*[a-z0-9])?"
_QUALIFIED_NAME = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_LABEL_VALUE = "(" + _QUALIFIED_NAME + ")?"
_PROMETHEUS_LABEL = "[a-zA-Z_][a-zA-Z0-9_]*"

_WHAT = {
    "label": ("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start "
              "and end with an alphanumeric character (e.g. 'my-name', or '123-abc', regex used for validation is '%s')"
              % _DNS1123_LABEL, _DNS1123_LABEL, 63),
    "subdomain": ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and "
                  "must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation "
                  "is '%s')" % _DNS1123_SUBDOMAIN, _DNS1123_SUBDOMAIN, 253),
    "dns1035": ("a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic "
                "character, and end with an alphanumeric character (e.g. 'my-name', or 'abc-123', regex used for "
                "validation is '%s')" % _DNS1035_LABEL, _DNS1035_LABEL, 63),
    "name_part": ("name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
                  "alphanumeric character (e.g. 'MyName', or 'my.name', or '123-abc', regex used for validation is "
                  "'%s')" % _QUALIFIED_NAME, _QUALIFIED_NAME, 63),
    "label_value": ("a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and "
                    "must start and end with an alphanumeric character (e.g. 'MyValue', or 'my_value', or '12345', "
                    "regex used for validation is '%s')" % _LABEL_VALUE, _LABEL_VALUE, 63),
    "prometheus_label": ("a Prometheus label name must match the regex '%s'" % _PROMETHEUS_LABEL, _PROMETHEUS_LABEL,
                         None),
}


def _form(form, text):
    """The Kubernetes message for text not of the form, or None when it is."""
    message, regex, limit = _WHAT[form]
    if not isinstance(text, str) or not re.fullmatch(regex, text):
        return message
    if limit is not None and len(text) > limit:
        return "must be no more than %d characters" % limit
    return None


def _qualified_name(text):
    """k8s IsQualifiedName: [prefix/]name, the prefix a DNS-1123 subdomain, the name 63 characters at most."""
    if not isinstance(text, str) or text == "":
        return "name part must be non-empty; " + _WHAT["name_part"][0]
    prefix, slash, name = text.rpartition("/")
    if slash and text.count("/") > 1:
        return ("a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start and end "
                "with an alphanumeric character, with an optional DNS subdomain prefix and '/' (e.g. "
                "'example.com/MyName')")
    if slash:
        if prefix == "":
            return "prefix part must be non-empty"
        problem = _form("subdomain", prefix)
        if problem:
            return "prefix part " + problem
    problem = _form("name_part", name)
    return ("name part " + problem if problem and not problem.startswith("name part") else problem)


def _message(name, value, kind_text, problem):
    return "%s is %s; %s: %s" % (name, _short(value, name=name), kind_text, problem)


def _single(form, kind_text):
    def rule(name, value, values):
        problem = _form(form, value) if isinstance(value, str) else "give a string"
        return [_message(name, value, kind_text, problem)] if problem else []
    return rule


def _each(item_rule):
    """A rule for a list whose items each follow item_rule, named by index."""
    def rule(name, value, values):
        out = []
        for index, item in enumerate(value or []):
            out += item_rule("%s[%d]" % (name, index), item, values)
        return out
    return rule


namespace_name = _single("label", "a namespace name")
object_name = _single("label", "a name the role gives its objects (also a label value and a container or "
                               "object name prefix)")
service_name = _single("dns1035", "a Service name")
subdomain_name = _single("subdomain", "a Kubernetes object name")
label_value = _single("label_value", "a label value")
subdomain_names = _each(subdomain_name)
label_values = _each(label_value)


def label_key(name, value, values, what="a label key"):
    problem = _qualified_name(value)
    return [_message(name, value, what + " ([prefix/]name)", problem)] if problem else []


label_keys = _each(label_key)


def taint_key(name, value, values):
    return label_key(name, value, values, "a taint key")


def labels(name, value, values):
    """A mapping of label key to label value."""
    out = []
    for key, item in (value or {}).items():
        out += label_key("%s key %s" % (name, _short(key)), key, values)
        out += label_value("%s.%s" % (name, key), "" if item is None else item if isinstance(item, str) else str(item),
                           values) if not isinstance(item, (dict, list)) else [
            "%s.%s is %s; a label value is a string" % (name, key, _short(item))]
    return out


def annotations(name, value, values):
    """A mapping of annotation key (a qualified name, compared in lower case) to any string."""
    out = []
    for key, item in (value or {}).items():
        problem = _qualified_name(key.lower() if isinstance(key, str) else key)
        if problem:
            out.append(_message("%s key" % name, key, "an annotation key ([prefix/]name)", problem))
        if isinstance(item, (dict, list)):
            out.append("%s.%s is %s; an annotation value is a string" % (name, key, _short(item)))
    return out


def prometheus_labels(name, value, values):
    """Labels of Prometheus alerts: label names of Prometheus' form, values any string."""
    out = []
    for key in value or {}:
        problem = _form("prometheus_label", key)
        if problem:
            out.append(_message("%s key" % name, key, "a Prometheus label name", problem))
    return out


def label_selector(name, value, values):
    """A Kubernetes equality- or set-based label selector, comma-separated: key, !key, key=value, key!=value."""
    out = []
    for term in str(value).split(","):
        m = re.fullmatch(r"\s*(!?)([^=!\s]+)\s*(?:(==|=|!=)\s*([^=!,\s]*))?\s*", term)
        if not m or (m.group(1) and m.group(3)):
            out.append(_message(name, value, "a label selector (key, !key, key=value or key!=value, comma-separated)",
                                "the term %r is none of these" % term))
            continue
        problem = _qualified_name(m.group(2))
        if not problem and m.group(3):
            problem = _form("label_value", m.group(4))
        if problem:
            out.append(_message(name, value, "a label selector (key, !key, key=value or key!=value, comma-separated)",
                                problem))
    return out


def namespaced_name(name, value, values):
    """namespace/name: a namespace (DNS-1123 label) and an object name (DNS-1123 subdomain)."""
    text = value if isinstance(value, str) else ""
    ns, slash, obj = text.partition("/")
    problem = ("give namespace/name" if not slash else
               _form("label", ns) and "namespace: " + _form("label", ns) or
               _form("subdomain", obj) and "name: " + _form("subdomain", obj))
    return [_message(name, value, "a namespace/name", problem)] if problem else []


def helm_release(name, value, values):
    """Helm's release name: a DNS-1123 subdomain of 53 characters at most."""
    problem = _form("subdomain", value) if isinstance(value, str) else "give a string"
    if not problem and len(value) > 53:
        problem = "must be no more than 53 characters"
    return [_message(name, value, "a Helm release name", problem)] if problem else []


def eks_cluster_name(name, value, values):
    """An EKS cluster name (1 to 100 characters, a letter or digit first, then letters, digits, - and _)."""
    if isinstance(value, str) and re.fullmatch(r"[0-9A-Za-z][A-Za-z0-9_-]{0,99}", value):
        return []
    rule = "1 to 100 letters, digits, '-' and '_', starting with a letter or digit (regex '[0-9A-Za-z][A-Za-z0-9_-]*')"
    return [_message(name, value, "an EKS cluster name", rule)]


def _path_problem(value, absolute):
    if not isinstance(value, str):
        return "give a string"
    if re.search(r"[\x00-\x1f\x7f]", value):
        return "a path cannot hold a newline or another control character"
    if absolute and not value.startswith("/"):
        return "give an absolute path (starting with /)"
    if ".." in value.split("/"):
        return "a path cannot hold a '..' component"
    if re.search(r"//|/\./|/\.$|^\./", value) or (len(value) > 1 and value.endswith("/")):
        return "give the path normalised (no '//', '/./' or trailing '/')"
    return None


def host_path(name, value, values):
    """A path on a host: absolute, normalised, no '..', no newline."""
    problem = _path_problem(value, True)
    return [_message(name, value, "a host path", problem)] if problem else []


def local_path(name, value, values):
    """A path on the controller (a file the role writes or reads): relative or absolute, no '..', no newline."""
    problem = _path_problem(value, False)
    return [_message(name, value, "a path on the controller", problem)] if problem else []


# apt's schemes for a proxy (as the filter apt_proxy_lines takes them), and a host name as apt.conf takes it.
PROXY_SCHEMES = ("http", "https", "socks5h")
_HOSTNAME = r"[A-Za-z0-9]([A-Za-z0-9_-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9_-]{0,61}[A-Za-z0-9])?)*\.?"
_USERINFO = r"[A-Za-z0-9._~!$&()*+,=%-]+(:[A-Za-z0-9._~!$&()*+,=%-]*)?"
PROXY_RE = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://(?:(?P<userinfo>[^@/]*)@)?(?P<host>\[[^\]/]*\]|[^:/]*)"
                      r"(?::(?P<port>[^/]*))?(?P<rest>.*)", re.S)


def proxy_problem(value):
    """Why a proxy URL is refused (None when it is accepted): http(s)://[user[:password]@]host[:port][/] (or
    socks5h://), nothing more, or DIRECT (no proxy). The reason never repeats the value (it may hold a password)."""
    if not isinstance(value, str):
        return "give a string"
    if value in ("", "DIRECT"):
        return None
    if re.search(r"[\s\"';\\`<>{}|^]", value):
        return "it holds whitespace, a newline, a quote, a semicolon or another character a URL cannot hold"
    m = PROXY_RE.fullmatch(value)
    if not m:
        return "give scheme://host:port"
    if m.group("scheme") not in PROXY_SCHEMES:
        return "the scheme must be http, https or socks5h"
    if m.group("userinfo") is not None and not re.fullmatch(_USERINFO, m.group("userinfo")):
        return "the user:password part holds a character a URL needs percent-encoded"
    host = m.group("host")
    if host.startswith("["):
        import ipaddress
        try:
            ipaddress.IPv6Address(host[1:-1])
        except ValueError:
            return "the host is not an IPv6 address in brackets"
    elif not re.fullmatch(_HOSTNAME, host) or len(host) > 253:
        return "the host is not a host name or an IPv4 address"
    if m.group("port") is not None and not (m.group("port").isdigit() and 1 <= int(m.group("port")) <= 65535):
        return "the port is not a number from 1 to 65535"
    if m.group("rest") not in ("", "/"):
        return "nothing may follow host:port (no path, query or fragment)"
    return None


def proxy_url(name, value, values):
    """An apt proxy: http(s)://[user[:password]@]host[:port][/] and nothing else, DIRECT, or '' for apt's own."""
    problem = proxy_problem(value)
    if problem:
        return ["%s is refused (value not shown): %s; give http://[user:password@]host:port (or https://, "
                "socks5h://) with nothing after it, DIRECT for no proxy, or '' for apt's own settings"
                % (name, problem)]
    return []


def image_digest(name, value, values):
    """An image digest: sha256: and 64 lowercase hexadecimal digits ('' for none: the tag alone)."""
    if isinstance(value, str) and re.fullmatch(r"sha256:[0-9a-f]{64}", value):
        return []
    return [_message(name, value, "an image digest", "give sha256:<64 hex> (sha256: and 64 lowercase hexadecimal "
                                                     "digits), or '' for the tag alone")]


def iam_role_arn(name, value, values):
    """An IAM role's ARN: arn:<partition>:iam::<12-digit account>:role/<path and name> ('' for none)."""
    if isinstance(value, str) and re.fullmatch(r"arn:aws[a-z-]*:iam::[0-9]{12}:role/[A-Za-z0-9_+=,.@/-]+", value):
        return []
    return [_message(name, value, "an IAM role ARN", "give arn:aws:iam::<12-digit account>:role/<name>, or '' with "
                                                     "EKS Pod Identity")]


def tolerations_syntax(name, value, values):
    """Tolerations' key (a qualified name, may be empty) and value (a label value)."""
    out = []
    for index, item in enumerate(value or []):
        if not isinstance(item, Mapping):
            continue
        if item.get("key") not in (None, ""):
            out += taint_key("%s[%d].key" % (name, index), item["key"], values)
        if isinstance(item.get("value"), str):
            out += label_value("%s[%d].value" % (name, index), item["value"], values)
    return out


def taints_syntax(name, value, values):
    """Taints' value (a label value); the key is checked by taints()."""
    out = []
    for index, item in enumerate(value or []):
        if isinstance(item, Mapping) and isinstance(item.get("value"), str):
            out += label_value("%s[%d].value" % (name, index), item["value"], values)
    return out


def requirements(name, value, values):
    """Node selector requirements: key a label key, values label values."""
    out = []
    for index, item in enumerate(value or []):
        if not isinstance(item, Mapping):
            continue
        out += label_key("%s[%d].key" % (name, index), item.get("key"), values)
        for position, entry in enumerate(item.get("values") or []):
            out += label_value("%s[%d].values[%d]" % (name, index, position), str(entry), values)
    return out


_IMAGE_PART = r"[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*"
_REGISTRY = r"[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)*(:[0-9]{1,5})?"
_TAG = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"
_DIGEST = r"sha256:[0-9a-f]{64}"
# The distribution reference grammar (github.com/distribution/reference): [registry/]path[:tag][@digest].
IMAGE_RE = re.compile(r"((%s)/)?%s(/%s)*(:%s)?(@%s)?" % (_REGISTRY, _IMAGE_PART, _IMAGE_PART, _TAG, _DIGEST))


def _pattern_kind(regex, what, allow=("",)):
    """A syntax rule: the value matches regex whole (allow: other accepted values), else a message with what."""
    compiled = re.compile(regex)

    def rule(name, value, values):
        # a whole number reads the same as a string (a branch 550, a tag 3): the argument spec accepts it
        text = str(value) if isinstance(value, int) and not isinstance(value, bool) else value
        if isinstance(text, str) and (text in allow or compiled.fullmatch(text)):
            return []
        return [_message(name, value, what, "the value is not of that form")]
    return rule


image = _pattern_kind(IMAGE_RE.pattern, "an image reference [registry/]repository[:tag][@sha256:<64 hex>] (a "
                                        "digest pins the image: tags can be moved)")
image_registry = _pattern_kind(r"%s(/%s)*" % (_REGISTRY, _IMAGE_PART), "an image registry host[:port][/path] "
                                                                       "such as nvcr.io/nvidia")
image_repository = _pattern_kind(r"((%s)/)?%s(/%s)*" % (_REGISTRY, _IMAGE_PART, _IMAGE_PART),
                                 "an image repository such as k8s-device-plugin or registry.k8s.io/pause "
                                 "(lowercase letters, digits, '.', '_', '-', '/')")
image_tag = _pattern_kind(_TAG, "an image tag (letters, digits, '_', '.' and '-', at most 128, not starting with "
                                "'.' or '-')")
version = _pattern_kind(r"[A-Za-z0-9][A-Za-z0-9.+~:_-]{0,127}", "a version such as 1.20.1, v0.19.3, 1.20.1-1 or "
                                                                "1:535.261.03-1 (letters, digits, '.', '+', '~', "
                                                                "':', '_', '-')")
prometheus_metric = _pattern_kind(r"[a-zA-Z_:][a-zA-Z0-9_:]*", "a Prometheus metric name (regex "
                                                               "'[a-zA-Z_:][a-zA-Z0-9_:]*')")
aws_region = _pattern_kind(r"[a-z]{2}(-gov|-iso[a-z]?)?-[a-z]+-[0-9]{1,2}", "an AWS region such as eu-west-1")
kubernetes_minor = _pattern_kind(r"v?1\.[0-9]{1,3}(\.[0-9]{1,3})?", "a Kubernetes minor version such as 1.33")
driver_branch = _pattern_kind(r"[0-9]{3}", "a driver branch of three digits such as 535 or 580 ('' for the "
                                           "distribution's)")
openpgp_fingerprint = _pattern_kind(r"(0[xX])?[0-9A-Fa-f ]{32,79}", "an OpenPGP fingerprint (40 hexadecimal digits "
                                                                    "for a v4 key, 64 for v6; spaces, 0x and case "
                                                                    "do not matter; '' drops the pin)")
package_name = _pattern_kind(r"[a-z0-9][a-z0-9+.-]+", "a Debian package name (lowercase letters, digits, '+', '.' "
                                                      "and '-')", allow=())
package_names = _each(package_name)
# A local path may hold any printable character (Go's module cache writes capitals as '!x'); kubernetes.core.helm
# splits its command line as a shell would, so whitespace, quotes and backslashes are refused.
chart_ref = _pattern_kind(r"[^\s\x00-\x1f\x7f'\"\\]+",
                          "a Helm chart: repo/name, a name in the chart repository, an oci:// reference or a local "
                          "path (no whitespace, quote or backslash)")
inventory_host = _pattern_kind(r"[^\s\x00-\x1f\x7f'\"{}]+",
                               "an inventory host name (no whitespace, quote or brace)", allow=())
sqs_queue = _pattern_kind(r"[A-Za-z0-9_-]{1,80}(\.fifo)?", "an SQS queue name (1 to 80 letters, digits, '-' and "
                                                           "'_')")
iam_name = _pattern_kind(r"[A-Za-z0-9+=,.@_-]{1,64}", "an IAM role or instance profile name (1 to 64 letters, "
                                                      "digits and +=,.@_-)")
log_level = _pattern_kind(r"debug|info|warn|error", "one of debug, info, warn, error", allow=())
namespaces = _each(namespace_name)
pem = _pattern_kind(r"(-----BEGIN CERTIFICATE-----\r?\n[A-Za-z0-9+/=\r\n]+-----END CERTIFICATE-----\s*)+",
                    "one or more PEM certificates (-----BEGIN CERTIFICATE----- ... -----END CERTIFICATE-----)")
variable_name = _pattern_kind(r"[a-z_][a-z0-9_]*", "an Ansible variable name", allow=())
since = _pattern_kind(r"[0-9]+(\.[0-9]+)?|[0-9]{4}-[0-9]{2}-[0-9]{2}([T ][0-9:.]+)?(Z|[+-][0-9:]+)?",
                      "seconds since boot (such as 3600) or an ISO 8601 time (such as 2026-12-07T06:00:00Z)")


def feature_gates(name, value, values):
    """Karpenter's feature gates: each a gate name (letters and digits) and true or false."""
    out = []
    for key, item in (value or {}).items():
        if not (isinstance(key, str) and re.fullmatch(r"[A-Za-z][A-Za-z0-9]*", key)) or not isinstance(item, bool):
            out.append(_message("%s.%s" % (name, key), item, "a feature gate", "give GateName: true or false"))
    return out


def aws_tags(name, value, values):
    """EC2 tags: keys of 1 to 128 and values of at most 256 characters, no control characters, keys not aws:."""
    out = []
    for key, item in (value or {}).items():
        text = "" if item is None else str(item)
        if not isinstance(key, str) or not 0 < len(key) <= 128 or key.lower().startswith("aws:") \
                or re.search(r"[\x00-\x1f\x7f]", key + text) or len(text) > 256 or isinstance(item, (dict, list)):
            out.append(_message("%s key %s" % (name, _short(key)), item, "an EC2 tag",
                                "keys of 1 to 128 characters not starting with aws:, string values of at most 256, "
                                "no control characters"))
    return out


SYNTAX = {
    "namespace": namespace_name,
    "namespaces": namespaces,
    "url": url(),
    "repo_url": url(("http", "https", "file"), userinfo="https"),
    "helm_url": url(("http", "https", "oci")),
    "image": image,
    "image_registry": image_registry,
    "image_repository": image_repository,
    "image_tag": image_tag,
    "version": version,
    "prometheus_metric": prometheus_metric,
    "aws_region": aws_region,
    "aws_profile": _pattern_kind(r"[A-Za-z0-9_.@+=,:/-]{1,128}", "an AWS profile name (no whitespace or quote)"),
    "kubernetes_minor": kubernetes_minor,
    "driver_branch": driver_branch,
    "openpgp_fingerprint": openpgp_fingerprint,
    "package_names": package_names,
    "chart_ref": chart_ref,
    "inventory_host": inventory_host,
    "sqs_queue": sqs_queue,
    "iam_name": iam_name,
    "log_level": log_level,
    "pem": pem,
    "variable_name": variable_name,
    "since": since,
    "feature_gates": feature_gates,
    "aws_tags": aws_tags,
    "object_name": object_name,
    "service_name": service_name,
    "subdomain": subdomain_name,
    "subdomains": subdomain_names,
    "label_key": label_key,
    "label_keys": label_keys,
    "taint_key": taint_key,
    "label_value": label_value,
    "label_values": label_values,
    "labels": labels,
    "annotations": annotations,
    "prometheus_labels": prometheus_labels,
    "label_selector": label_selector,
    "namespaced_name": namespaced_name,
    "helm_release": helm_release,
    "eks_cluster_name": eks_cluster_name,
    "host_path": host_path,
    "host_paths": _each(host_path),
    "local_path": local_path,
    "proxy_url": proxy_url,
    "image_digest": image_digest,
    "iam_role_arn": iam_role_arn,
    "tolerations": tolerations_syntax,
    "taints": taints_syntax,
    "requirements": requirements,
}

# By the end of the option's name; the longest end that matches wins. "<role>_name", the name a role gives its
# objects, is an object_name (see syntax_kind()).
SYNTAX_BY_SUFFIX = {
    "_namespace": "namespace",
    "_name": "subdomain",
    "_cluster_name": "eks_cluster_name",
    "_priority_class": "subdomain",
    "_runtime_class": "subdomain",
    "_pull_secrets": "subdomains",
    "_node_affinity_label": "label_key",
    "_family_key": "label_key",
    "_labels": "labels",
    "_annotations": "annotations",
    "_node_selector": "labels",
    "_taint_key": "taint_key",
    "_taint_value": "label_value",
    "_untaint_keys": "label_keys",
    "_nodes": "subdomains",
    "_instance_families": "label_values",
    "_capacity_types": "label_values",
    "_architectures": "label_values",
    "_service": "service_name",
    "_service_account": "namespaced_name",
    "_helm_release": "helm_release",
    "_node_pools": "label_values",
    "_tolerations": "tolerations",
    "_taints": "taints",
    "_requirements": "requirements",
    "_dir": "host_path",
    "_dirs": "host_paths",
    "_root": "host_path",
    "_proxy": "proxy_url",
    "_digest": "image_digest",
    "_role_arn": "iam_role_arn",
    "_url": "url",
    "_image": "image",
    "_image_registry": "image_registry",
    "_image_repository": "image_repository",
    "_tag": "image_tag",
    "_version": "version",
    "_metric": "prometheus_metric",
    "_region": "aws_region",
    "_chart_ref": "chart_ref",
    "_control_host": "inventory_host",
    "_file": "host_path",
    "_namespaces": "namespaces",
}

# By the full name, over the end of the name: None marks a name that is free text, with the reason in FREE_TEXT.
SYNTAX_BY_NAME = {
    # Service names (DNS-1035): the Service each role creates, and the Services the HPA and the adapter point at.
    "dcgm_exporter_name": "service_name",
    "gpu_metrics_adapter_name": "service_name",
    "karpenter_name": "service_name",
    "node_labels_remove": "label_keys",
    "node_maintenance_gpu_node_selector": "label_selector",
    "node_maintenance_device_plugin_name": "object_name",
    "gpu_metrics_adapter_external_name": "subdomain",
    "gpu_alerts_extra_labels": "prometheus_labels",
    # files on the controller (relative to the playbook's directory, or absolute)
    "dcgm_exporter_scrape_config_path": "local_path",
    "gpu_alerts_rules_file_path": "local_path",
    "gpu_metrics_adapter_output_dir": "local_path",
    "karpenter_crds_path": "local_path",
    "_k8s_apply_file_path": "local_path",
    "_k8s_apply_name": "subdomain",
    "node_maintenance_resource": "label_key",
    "_k8s_apply_crd": "subdomain",
    "_k8s_apply_crds": "subdomains",
    "_k8s_apply_crd_mode_variable": "variable_name",
    "_k8s_apply_file_variable": "variable_name",
    "container_toolkit_repo_url": "repo_url",
    "container_toolkit_repo_key_url": "repo_url",
    "container_toolkit_repo_key_fingerprint": "openpgp_fingerprint",
    "container_toolkit_packages": "package_names",
    "driver_mirror_url": "repo_url",
    "driver_branch": "driver_branch",
    "driver_nvidia_repo_url": "repo_url",
    "driver_nvidia_repo_key_url": "repo_url",
    "driver_nvidia_repo_key_fingerprint": "openpgp_fingerprint",
    "device_plugin_helm_repo_url": "helm_url",
    # URLs whose rule in RULES is the url rule after a form check of its own (one message each)
    "prometheus_stack_chart_repo_url": None,
    "gpu_metrics_adapter_prometheus_url": None,
    "dcgm_exporter_version": None,  # an image tag, rule in RULES
    "device_plugin_version": "image_tag",
    "gpu_metrics_adapter_version": "image_tag",
    "cluster_autoscaler_kubernetes_version": "kubernetes_minor",
    "gke_driver_installer_cos_image": "image_repository",
    "gke_driver_installer_ubuntu_image": "image_repository",
    "gke_driver_installer_pause_image": "image_repository",
    "gpu_health_nvidia_smi": "host_path",
    "gpu_health_since": "since",
    "gpu_metrics_adapter_ca_bundle": "pem",
    "karpenter_cluster_endpoint": "url",
    "karpenter_interruption_queue": "sqs_queue",
    "karpenter_log_level": "log_level",
    "karpenter_feature_gates": "feature_gates",
    "karpenter_gpu_node_role": "iam_name",
    "eks_gpu_pool_pod_identity_role": "iam_name",
    "karpenter_gpu_instance_profile": "iam_name",
    "karpenter_gpu_ec2_tags": "aws_tags",
}

FREE_TEXT = {
    "gpu_alerts_group_name": "a Prometheus rule group's name, any text (rendered by to_nice_yaml)",
    "gpu_alerts_selector": "a PromQL label matcher added to the rules' expressions (rendered by to_nice_yaml)",
    "container_toolkit_repo_key": "the armoured key itself (checked by the role against its pin)",
    "container_toolkit_runtime_name": "a runtime name in the container runtime's configuration (a choice list)",
    "container_toolkit_cdi_spec": "auto, or what the toolkit's CDI generation takes",
    "gpu_autoscaling_target_value": "a Kubernetes quantity (rule gpu_target; rendered with to_json)",
    "karpenter_gpu_node_class": "another node class's group, kind and name (rule node_class_ref; rendered with to_json)",
    "driver_secure_boot_key": "a host path or a pkcs11: URI for the kernel's sign-file (a key, not a label key); "
                              "driver_module_signing refuses a path DKMS would read wrongly as shell",
    "driver_nvidia_repo_key": "the armoured key itself (checked by the role against its pin)",
}
FREE_TEXT.update({
    "gpu_alerts_severity_critical": "the severity label of the critical alerts, any text (rendered by to_nice_yaml)",
    "gpu_alerts_severity_warning": "the severity label of the warning alerts, any text (rendered by to_nice_yaml)",
    "preflight_supported_os": "distribution and major version pairs compared with the host's facts, never rendered",
    "prometheus_stack_gpu_alert_matchers": "Alertmanager matchers, any text (rendered in the chart's values as data)",
    "node_maintenance_step": "the name of the step that failed, only in the role's message",
    # the private role k8s_apply: set by the collection's roles, never by a user
    "_k8s_apply_owner": "the role that owns the objects (the collection's own role name, set by its roles)",
    "_k8s_apply_crds_reason": "a message of the calling role, rendered only in its failure message",
    "_k8s_apply_crds_fix": "a message of the calling role, rendered only in its failure message",
    "_k8s_apply_namespace_hint": "a message of the calling role, rendered only in its failure message",
    "_k8s_apply_crd_provider": "a message of the calling role, rendered only in its failure message",
    "_k8s_apply_file_content": "the file the calling role rendered (written as data, never templated again)",
    "_k8s_apply_file_message": "a message of the calling role, rendered only in its output",
    "_k8s_apply_what": "a word of the calling role's message (pod, node)",
    "_k8s_apply_take_over_managers": "field manager names compared with the objects' managedFields, never rendered",
    "_k8s_apply_resource": "the Kubernetes API resource the calling role's objects are of (its own data)",
    "_k8s_apply_objects": "the objects the calling role built (its own data, sent to the API as JSON)",
    "_k8s_apply_removed": "the objects the calling role removes (its own data, sent to the API as JSON)",
})

# Options whose content goes through unchecked to a program, a chart or a host, each with what setting it grants (the
# one list of them: docs/security.md, "Pass-through options", lists the same names and is kept in step by
# tests/unit/test_role_inputs_declared.py). Setting one is as much as the grant says: only who may have that may set
# them. Keys of container_toolkit_config_settings and dcgm_exporter's host paths that undo a defence are refused
# unless the role's <role>_allow_unsafe_settings is true.
PASS_THROUGH = {
    "cluster_autoscaler_extra_args": "any flag of the cluster autoscaler: its AWS and cluster permissions",
    "container_toolkit_docker_settings": "any Docker daemon.json setting: root on the GPU host (Docker's socket, "
                                         "runtimes, registries)",
    "container_toolkit_config_settings": "any nvidia-container-toolkit config.toml key: root on the GPU host; the "
                                         "keys that undo GPU isolation or name binaries need "
                                         "container_toolkit_allow_unsafe_settings",
    "device_plugin_helm_values": "any value of NVIDIA's device plugin chart: a privileged DaemonSet, root on every "
                                 "GPU node",
    "prometheus_stack_values": "any value of kube-prometheus-stack: its ClusterRoles (cluster-wide read, Secrets) "
                               "and privileged node-exporter pods",
    "gpu_metrics_adapter_extra_rules": "prometheus-adapter rules: any PromQL query as a metric of the custom "
                                       "metrics API (what Prometheus holds, to whoever may read that API)",
    "karpenter_extra_env": "any environment variable of the Karpenter controller: its AWS permissions",
    "driver_reboot_command": "a command run as root on the GPU host",
    "driver_reboot_boot_time_command": "a command run as root on the GPU host",
    "node_maintenance_reboot_command": "a command run as root on the GPU host",
    "node_maintenance_reboot_boot_time_command": "a command run as root on the GPU host",
    "gpu_health_reset_command": "a command run as root on the GPU host",
    "gpu_health_processes_command": "a command run as root on the GPU host",
    "gpu_health_driver_reload_command": "a command run as root on the GPU host",
}

# Options whose syntax is checked by a role's own code rather than a rule here, with where (docs/development.md,
# "Where inputs are checked").
CHECKED_BY = {
    # The cloud pool roles pass these to the collection's modules, whose argument specs check them before any API
    # call (as the shared k8sgpu_eks_*/k8sgpu_gke_* they default to, SHARED_KINDS' module_options).
    "eks_gpu_pool_cluster": "the module eks_cluster's argument spec, before any API call",
    "eks_gpu_pool_nodegroup": "the module eks_nodegroup's argument spec, before any API call",
    "gke_gpu_pool_cluster": "the module gke_cluster's argument spec, before any API call",
    "gke_gpu_pool_node_pool": "the module gke_node_pool's argument spec, before any API call",
    "dcgm_exporter_counters": "the filter dcgm_counters_csv (field names and types), before any change",
    "dcgm_exporter_extra_counters": "the filter dcgm_counters_csv (field names and types), before any change",
    "gpu_alerts_job": "the filter gpu_alert_rules (a Prometheus label value), before any change",
    # The module refuses a path DKMS would read wrongly as shell, a certificate that is not X.509, a key of another
    # certificate, before it writes anything.
    "driver_secure_boot_key_content": "the module driver_module_signing (a private key of the certificate)",
    "driver_secure_boot_certificate": "the module driver_module_signing (an absolute plain path)",
    "driver_secure_boot_certificate_content": "the module driver_module_signing (an X.509 certificate)",
} | {"gpu_alerts_%s_for" % n: "the filter gpu_alert_rules (a Prometheus duration), before any change"
     for n in ("target_down", "xid", "gpu_temp", "memory_temp", "ecc_dbe", "row_remap", "framebuffer", "gpu_count")}

# The kubeconfig file and context are read by the Kubernetes client on the controller, never rendered; inventory
# group names are not Kubernetes names.
FREE_SUFFIXES = ("_kubeconfig", "_kube_context", "_context", "_gpu_group", "_group")


def declared_kind(role, name, spec=None, rules=None):
    """How an option's syntax is declared, None when it is not: its type (bool, int, float), its choices, a syntax
    rule (syntax_kind()), a range or form rule (RULES), free text rendered only as data (FREE_TEXT), a
    pass-through option (PASS_THROUGH) or a role's own check (CHECKED_BY)."""
    spec = spec or {}
    typ = spec.get("type", "str")
    if typ in ("bool", "int", "float"):
        return typ
    if typ == "list" and spec.get("elements") in ("bool", "int", "float"):
        return "list of %s" % spec["elements"]
    if spec.get("choices"):
        return "choices"
    kind_ = syntax_kind(role, name, spec)
    if kind_:
        return kind_
    if name in (RULES.get(role.rsplit(".", 1)[-1], {}) if rules is None else rules):
        return "rule"
    if name in FREE_TEXT or name.endswith(FREE_SUFFIXES):
        return "free_text"
    if name in PASS_THROUGH:
        return "pass_through"
    if name in CHECKED_BY:
        return "checked_by"
    return None


def syntax_kind(role, name, spec=None):
    """The SYNTAX key of an option (None for none), by SYNTAX_BY_NAME, SYNTAX_BY_SUFFIX and its type."""
    spec = spec or {}
    if spec.get("type", "str") in ("bool", "int", "float"):
        return None
    if name in SYNTAX_BY_NAME:
        return SYNTAX_BY_NAME[name]
    if name in FREE_TEXT or name.endswith(FREE_SUFFIXES):
        return None
    if name == role_prefix(role) + "name":
        return "object_name"
    for suffix in sorted(SYNTAX_BY_SUFFIX, key=len, reverse=True):
        if name.endswith(suffix):
            return SYNTAX_BY_SUFFIX[suffix]
    if spec.get("type") == "path":
        return "host_path"
    return None


def syntax_errors(role, options, values, skip=()):
    """The syntax rules' messages for the values set (an empty value passes where the option's default is empty)."""
    out = []
    for name, value in values.items():
        if name in skip or name not in options:
            continue
        kind_ = syntax_kind(role, name, options[name])
        if kind_ is None:
            continue
        # '' where the default is '' or none: the role derives the value or leaves the setting out
        if value is None or (value == "" and (options[name] or {}).get("default") in ("", None)):
            continue
        out += SYNTAX[kind_](name, value, values)
    return out
