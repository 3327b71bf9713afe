# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin k8sgpu.nvidia.gpu_facts: runs the module (plugins/modules/gpu_facts.py) on the host, or with
reuse=true hands back the facts an earlier read of the same ansible-playbook run left, without a round trip.

The run is told apart by a token every process of one controller run shares and no other run has: a hash of the
multiprocessing authentication key, which ansible-playbook's main process draws at random when it starts and its
forked workers inherit. Facts that come from a fact cache (an earlier run) carry another token and are read again.
"""
from __future__ import annotations

import hashlib
import multiprocessing

from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase

from ansible_collections.k8sgpu.nvidia.plugins.module_utils._nvidia_smi import READ_FACT, read_marker, reusable


def run_token() -> str:
    """A token of this controller run (see the module docstring); never the key itself."""
    return hashlib.sha256(bytes(multiprocessing.current_process().authkey)).hexdigest()[:16]


class ActionModule(ActionBase):
    TRANSFERS_FILES = False

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        args = dict(self._task.args)
        reuse = boolean(args.pop("reuse", False), strict=False)
        token = run_token()
        if reuse:
            facts = task_vars.get("ansible_facts") or {}
            why = reusable(facts, token, args)
            if why is None:
                result.update(changed=False, reused=True,
                              ansible_facts={k: v for k, v in facts.items() if k.startswith("nvidia_")})
                return result
        result.update(self._execute_module(module_name="k8sgpu.nvidia.gpu_facts", module_args=args,
                                           task_vars=task_vars))
        if "ansible_facts" in result and not result.get("failed"):
            result["ansible_facts"][READ_FACT] = read_marker(token, args)
        result["reused"] = False
        return result
