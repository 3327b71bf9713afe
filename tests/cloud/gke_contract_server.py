# TEMPORARY re-export (issue 21 item 5): the module is now k8sgpu_testlib.gke_contract_server (tests/support/). Kept
# only for tests/lab/test_gke_playbook.py until its import changes; delete it then.
from k8sgpu_testlib.gke_contract_server import *  # noqa: F401,F403  # pylint: disable=wildcard-import,unused-wildcard-import
