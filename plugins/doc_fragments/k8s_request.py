# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations


class ModuleDocFragment:
    """The collection's own connection option, beside kubernetes.core's (k8s_auth): module_utils/_k8s_common.py's
    REQUEST_ARG_SPEC."""

    DOCUMENTATION = r"""
options:
  request_timeout:
    description:
      - Seconds each request may wait for the API server to answer (a new connection waits at most 10 seconds of
        them). A request that times out fails the task with C(Read timed out), naming the API server; the
        kubernetes client retries a read request (GET) that timed out up to 3 times, so one gives up after at most
        4 times this.
      - Without it, a kube-apiserver that accepts connections and never answers (stopped with SIGSTOP, overloaded,
        a network path that drops packets) holds the task for ever; kubernetes.core's modules have no such option.
      - Can also be specified via the E(K8SGPU_K8S_REQUEST_TIMEOUT) environment variable. V(0) waits for ever.
      - Not for C(module_defaults) of the group C(k8sgpu.nvidia.k8s), whose kubernetes.core modules do not take it.
        Set it on the task, or through the environment variable.
    type: float
    default: 30
    version_added: 2.0.0
"""
