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
* variables with the role's prefix that no entry point of the role knows: a warning naming the closest known one.
"""
from __future__ import annotations

import difflib
import re
from collections.abc import Mapping, Sequence

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

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


def check(role, options, values, names=(), known=None, sibling_roles=(), ignore=(), rules=None):
    """Check one role's inputs. Returns (errors, warnings).

    options: the entry point's argument spec options; values: templated values of the options that are set;
    names: every variable name the host has; known: option names of every entry point of the role (default
    the options' names); rules: {option: [rule, ...]} (default RULES[role name]).
    """
    errors = []
    values = {k: v for k, v in values.items() if k in options}
    # The values come from the host's variables, role defaults included; the spec's own defaults (templates
    # for some) are not applied again.
    validator = ArgumentSpecValidator({k: {a: b for a, b in v.items() if a != "default"} for k, v in options.items()})
    result = validator.validate(values, validate_role_argument_spec=True)
    for message in result.error_messages:
        errors.append("%s: %s" % (role, message))
    if not result.error_messages:
        for name, given in values.items():
            for path, value, want in conversions(name, given, result.validated_parameters.get(name)):
                errors.append("%s: %s is %s (%s); the role reads it as given, so give %s"
                              % (role, path, _short(value, name=name), kind(value), _HOW[want].replace("NAME", name)
                                 if want in _HOW else want))
    if rules is None:
        rules = RULES.get(role.rsplit(".", 1)[-1], {})
    for name, checks in rules.items():
        if name not in values or values[name] is None:
            continue
        if any(name in message for message in result.error_messages):
            continue  # the argument spec refused it already
        for rule in checks:
            errors += ["%s: %s" % (role, m) for m in rule(name, values[name], values)]
    warnings = unknown_variables(role, names, options.keys() if known is None else known, sibling_roles, ignore)
    return errors, warnings


# Rules: each takes (name, value, values) and returns a list of messages naming the variable, the value given and
# what is accepted. values holds the entry point's variables that are set (templated), for rules between fields.

def _number(value):
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return value
    if isinstance(value, str):
        try:
            return float(value) if value.strip() else None
        except ValueError:
            return None
    return None


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
    if allow_empty and value in ("", None):
        return []
    if isinstance(value, bool) or not isinstance(value, (int, float, str)) or not QUANTITY_RE.match(str(value)):
        return ["%s is %s; give a Kubernetes quantity such as 500m, 2, 512Mi or 1Gi" % (name, _short(value))]
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
    if suffix[:1] in ("e", "E") and len(suffix) > 1:
        return float(text)
    return float(text[:len(text) - len(suffix)]) * _SUFFIX.get(suffix, 1)


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


def gpu_target(name, value, values):
    """The HPA's target: above 0; a percentage (at most 100) for a utilisation metric."""
    number = to_number(value)
    if number is None:
        return []  # not a quantity: the role's preflight names it with its other settings
    metric = values.get("gpu_autoscaling_object_metric" if values.get("gpu_autoscaling_metric_type") == "object"
                        else "gpu_autoscaling_metric") or ""
    if number <= 0:
        return ["%s is %s; give a target above 0" % (name, _short(value))]
    if "UTIL" in str(metric) and number > 100:
        return ["%s is %s; %s is a utilisation in percent, so give a target from 1 to 100" % (name, _short(value), metric)]
    return []


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

# Settings the roles check themselves, before any change, with messages the lab tests assert, are left to them:
# dcgm_exporter's port, intervals and probes; device_plugin_time_slicing_replicas; driver_branch's form;
# gpu_alerts' durations and framebuffer_percent (filter gpu_alert_rules); gpu_autoscaling's replicas and the
# target's form; gpu_metrics_adapter's relist interval and certificate days; karpenter_removal_timeout;
# karpenter_gpu's GPU limit and durations; node_maintenance's settings (tasks/settings.yml).
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
    },
    "device_plugin": {
        "device_plugin_extra_tolerations": [tolerations],
        "device_plugin_resources": [resources],
        "device_plugin_wait_timeout": [_SECONDS],
    },
    "driver": {
        "driver_version": [driver_version],
        "driver_reboot_timeout": [_SECONDS],
        "driver_apt_lock_timeout": [_NONNEG],
    },
    "gke_driver_installer": {
        "gke_driver_installer_cpu_request": [quantity],
    },
    "gpu_alerts": {
        "gpu_alerts_gpu_temp_celsius": [in_range(1, 150, "a temperature in degrees Celsius")],
        "gpu_alerts_memory_temp_celsius": [in_range(1, 150, "a temperature in degrees Celsius")],
        "gpu_alerts_gpu_replicas": [in_range(1, None, "a whole number")],
    },
    "gpu_autoscaling": {
        "gpu_autoscaling_target_value": [gpu_target],
        "gpu_autoscaling_scale_up": [scaling_rules],
        "gpu_autoscaling_scale_down": [scaling_rules],
    },
    "gpu_metrics_adapter": {
        "gpu_metrics_adapter_replicas": [in_range(1, None, "a whole number")],
        "gpu_metrics_adapter_tolerations": [tolerations],
        "gpu_metrics_adapter_resources": [resources],
        "gpu_metrics_adapter_external_port": [port],
        "gpu_metrics_adapter_wait_timeout": [_SECONDS],
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
    },
    "karpenter_gpu": {
        "karpenter_gpu_taints": [taints],
        "karpenter_gpu_startup_taints": [taints],
        "karpenter_gpu_extra_limits": [quantities],
        "karpenter_gpu_weight": [weight],
        "karpenter_gpu_disruption_budgets": [disruption_budgets],
        "karpenter_gpu_block_device_mappings": [block_device_mappings],
        "karpenter_gpu_delete_timeout": [_SECONDS],
    },
    "verify": {
        "verify_node_devices": [lambda n, v, vs: [m for i, d in enumerate(v or []) for m in _NONNEG("%s[%d]" % (n, i), d, vs)]],
        "verify_node_elements": [in_range(1, None, "a whole number")],
        "verify_run_as_user": [_NONNEG],
        "verify_timeout": [_SECONDS],
    },
}
