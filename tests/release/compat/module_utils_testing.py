"""ansible.module_utils.testing.patch_module_args for ansible-core 2.17 (make compat).

The unit tests give modules their arguments through patch_module_args, which ansible-core has from 2.19 on. On 2.17
the Makefile copies this file into .venv-compat's ansible-core as ansible/module_utils/testing.py: the same
contract (the arguments AnsibleModule reads, restored afterwards) through 2.17's basic._ANSIBLE_ARGS. Only the test
harness is supplied; the modules run on 2.17's own AnsibleModule.
"""
from __future__ import annotations

import contextlib
import json

from ansible.module_utils import basic
from ansible.module_utils.common.text.converters import to_bytes


@contextlib.contextmanager
def patch_module_args(args=None):
    args = dict(args or {})
    args.setdefault("_ansible_remote_tmp", "/tmp")
    args.setdefault("_ansible_keep_remote_files", False)
    saved = basic._ANSIBLE_ARGS
    basic._ANSIBLE_ARGS = to_bytes(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    try:
        yield
    finally:
        basic._ANSIBLE_ARGS = saved
