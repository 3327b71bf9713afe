# TEMPORARY re-export (issue 21 item 5): the module is now k8sgpu_testlib.scale_from_zero (tests/support/). Kept only
# for test_eks_playbook.py and test_gke_playbook.py until their imports change; delete it then.
from k8sgpu_testlib.scale_from_zero import *  # noqa: F401,F403  # pylint: disable=wildcard-import,unused-wildcard-import
