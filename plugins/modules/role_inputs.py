#!/usr/bin/python
# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: role_inputs
short_description: Check the inputs of the role that calls it, beyond what its argument spec can say
version_added: 1.0.0
description:
  - The first task of each role of the collection (and of each of its other entry points). Runs on the controller,
    after ansible-core's own argument spec validation, with no arguments; the role, its entry point and argument spec
    come from the task's role.
  - Validates the values the role will read (role parameters over the host's variables, templated) against the entry
    point's argument spec, suboptions included (taint and toleration effects, operators).
  - Refuses a value that the argument spec accepts only by converting it into a list or a mapping (a string
    V(docker,containerd) for a list), or into a string from a boolean, a decimal, a list or a mapping (a taint
    value V(true) unquoted, a tag V(3.10), which YAML reads as the number 3.1), because the role's tasks read the
    variable as given, not as converted. A string for a number or a boolean (what C(-e key=value) and INI
    inventories give) and a whole number for a string (a V(driver_branch) of V(550)) are accepted.
  - Applies the checks an argument spec cannot express, each role's own (ranges, percentages, weights, ports, Kubernetes
    quantities and durations, image tags, a Karpenter release, an AMI alias, a driver version of the branch asked
    for, relations inside tolerations and taints). It is the one place of these checks; a role's own preflight keeps
    only what needs facts, the cluster, the controller's files or two settings together.
  - Checks the syntax of every input that becomes a Kubernetes name (DNS-1123 subdomain, or label where Kubernetes needs
    one, DNS-1035 label for a Service), namespace, label key or value, annotation key, taint key or value, a host path
    (absolute, normalised, no C(..), no newline), an apt proxy URL (scheme, host and port, nothing else), an image
    digest (C(sha256:) and 64 hexadecimal digits) or an IAM role ARN, in the words and regular expressions of
    Kubernetes' own validation, so that no value can add structure to the YAML a role renders. Which check an option
    gets follows from its name (C(_namespace), C(_name), C(_labels), C(_dir) ...) and, for the exceptions, a table;
    a unit test keeps every role's options covered.
  - Each refusal names the role, the variable (with its path inside a list or mapping), the value given and what is
    accepted. All refusals of the role are reported together.
  - Warns about each variable with the role's prefix that no entry point of the role knows (a misspelt name has no
    effect), naming the closest known variable. A variable with the longer prefix of another role of the
    collection (V(karpenter_gpu_) from V(karpenter)), a registered result, a fact and the role's own vars are not
    reported.
  - Warns, once per run, about each C(k8sgpu_*) variable that is not one of the collection's shared variables (a
    misspelt V(k8sgpu_kubconfig) would leave the roles on the default kubeconfig), naming the closest one. The
    internal C(_k8sgpu_*) variables are not reported.
author:
  - k8sgpu.nvidia maintainers (@k8sgpu)
extends_documentation_fragment:
  - action_common_attributes
  - action_common_attributes.conn
  - action_common_attributes.flow
options: {}
attributes:
  action:
    support: full
  async:
    support: none
  become:
    support: none
  bypass_host_loop:
    support: none
  connection:
    support: none
  check_mode:
    support: full
    details: It only reads variables; it never reports a change.
  delegation:
    support: none
  diff_mode:
    support: none
  platform:
    platforms: all
notes:
  - Values given as role parameters or extra variables are checked like any other.
  - The checks run on the values as the role will read them; the task changes no variable.
"""

EXAMPLES = r"""
# roles/<role>/tasks/main.yml
- name: Check the role's inputs
  k8sgpu.nvidia.role_inputs:
  tags: [always]
"""

RETURN = r"""
role:
  description: The role checked.
  returned: always
  type: str
  sample: k8sgpu.nvidia.driver
entry_point:
  description: Its entry point (C(tasks_from)).
  returned: always
  type: str
  sample: main
checked:
  description: The variables of the entry point that were set and checked.
  returned: when the task heads the entry point's task file
  type: list
  elements: str
  sample: [driver_branch, driver_version]
errors:
  description: One message for each refused input.
  returned: failure
  type: list
  elements: str
  sample:
    - "driver: driver_version is '535.216.03' but driver_branch is '550'; give a version of the 550 branch (550.*) or leave it empty"
"""
