# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin k8sgpu.nvidia.role_inputs: checks the inputs of the role whose task calls it (see the module's
documentation, plugins/modules/role_inputs.py; the checks are in module_utils/_role_inputs.py)."""
from __future__ import annotations

import os

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.k8sgpu.nvidia.plugins.module_utils._role_inputs import (
    SHARED_PREFIX, SHARED_SYNTAX, SYNTAX, check, role_prefix, shared_syntax_errors)


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False
    _VALID_ARGS = frozenset()

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        result["changed"] = False
        role = self._task._role
        if role is None:
            raise AnsibleActionFail("k8sgpu.nvidia.role_inputs checks a role's inputs: call it from a role's task file")
        name = role.get_name()
        short = role.get_name(include_role_fqcn=False)
        entry = (getattr(role, "_from_files", None) or {}).get("tasks") or "main"
        entry = os.path.splitext(os.path.basename(entry))[0]
        # The task heads each entry point's task file; main.yml may import another entry point's file
        # (node_maintenance's drain.yml), whose copy of the task then has nothing to do.
        here = os.path.splitext(os.path.basename(self._task.get_path().rsplit(":", 1)[0]))[0]
        result["role"] = name
        result["entry_point"] = entry
        if here and here != entry:
            result["msg"] = "%s: inputs checked at the entry point %s" % (name, entry)
            return result
        specs = role._get_role_argspecs() or {}
        spec = specs.get(entry) or {}
        options = spec.get("options") or {}
        known = set()
        for other in specs.values():
            known.update((other or {}).get("options") or {})
        # Values as the role reads them: role params over the host's variables, templated.
        values = {k: task_vars[k] for k in options if k in task_vars}
        values.update({k: v for k, v in (getattr(role, "_role_params", None) or {}).items() if k in options})
        values = self._templar.template(values)

        prefix = role_prefix(short)
        names = [k for k in task_vars if k.startswith((prefix, SHARED_PREFIX))]
        ignore = set(getattr(role, "_role_vars", None) or {})
        ignore.update(task_vars.get("ansible_facts", {}) or {})
        try:
            ignore.update(self._task._variable_manager._nonpersistent_fact_cache.get(task_vars.get("inventory_hostname"), {}))
        except AttributeError:
            pass
        try:
            siblings = os.listdir(os.path.dirname(role._role_path))
        except (OSError, TypeError):
            siblings = []
        errors, warnings = check(short, options, values, names=names, known=known, sibling_roles=siblings,
                                 ignore=ignore)
        # The shared variables the host has that a syntax rule declares (module_utils/_role_inputs.py SHARED_SYNTAX),
        # templated one by one: one that cannot be templated here is left to the task that reads it.
        shared = {}
        for key in names:
            if key.startswith(SHARED_PREFIX) and SHARED_SYNTAX.get(key) in SYNTAX:
                try:
                    shared[key] = self._templar.template(task_vars[key])
                except Exception:  # pylint: disable=broad-except
                    continue
        errors += ["%s: %s" % (short, m) for m in shared_syntax_errors(shared)]
        if warnings:
            result["warnings"] = warnings
        result["checked"] = sorted(values)
        if errors:
            result["failed"] = True
            result["errors"] = errors
            result["msg"] = "%s: %s (entry point %s): %d input%s refused:\n%s" % (
                task_vars.get("inventory_hostname", "?"), name, entry, len(errors), "" if len(errors) == 1 else "s", "\n".join(errors))
        else:
            result["msg"] = "%s (entry point %s): %d input%s checked" % (
                name, entry, len(values), "" if len(values) == 1 else "s")
        return result
