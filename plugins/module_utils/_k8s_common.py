# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private to k8sgpu.nvidia: what the collection's Kubernetes modules share.

Authentication and the API client are kubernetes.core's (get_api_client), so
every module takes the same options and K8S_AUTH_* variables as kubernetes.core.
Requests go through its dynamic client with plain-dict responses (raw_json),
which is much cheaper than building the typed client's models for large lists.
"""
from __future__ import annotations

import json

from ansible.module_utils.basic import AnsibleModule, env_fallback

# The collection's own connection option (doc fragment k8sgpu.nvidia.k8s_request): how long each request may wait for
# the API server. kubernetes.core has none (its issue 897), nor has the kubernetes client by default: a kube-apiserver
# that accepts connections and never answers (stopped, overloaded, a network path that drops packets) held a run
# for ever.
REQUEST_ARG_SPEC = {
    "request_timeout": {"type": "float", "default": 30.0, "fallback": (env_fallback, ["K8SGPU_K8S_REQUEST_TIMEOUT"])},
}
# A new TCP connection to the API server gets at most this long (seconds), or request_timeout where that is shorter.
CONNECT_TIMEOUT = 10.0


def _kubernetes_core():
    """kubernetes.core's authentication options, get_api_client and AnsibleK8SModule, or None when not installed.

    Imported when a module runs, not when this file is imported: the collection's filter plugins import
    helpers from module_utils, and Ansible imports every filter file of the collection in each task that uses
    one of its filters, so a top-level import here cost every such task the import of the kubernetes client
    (about 0.35 s).
    """
    try:
        from ansible_collections.kubernetes.core.plugins.module_utils.args_common import AUTH_ARG_SPEC
        from ansible_collections.kubernetes.core.plugins.module_utils.k8s.client import get_api_client
        from ansible_collections.kubernetes.core.plugins.module_utils.k8s.core import AnsibleK8SModule
    except ImportError:  # reported by k8s_module(), with the fix
        return None
    return AUTH_ARG_SPEC, get_api_client, AnsibleK8SModule


def raw_json(_client, data):
    """Serializer for the dynamic client: keep the API's JSON as plain dicts."""
    return data


def k8s_module(argument_spec: dict, **kwargs):
    """An AnsibleK8SModule with kubernetes.core's authentication options and request_timeout added to argument_spec."""
    core = _kubernetes_core()
    if core is None:
        AnsibleModule(argument_spec=argument_spec, **kwargs).fail_json(
            msg="this module needs the kubernetes.core collection (ansible-galaxy collection install kubernetes.core)")
    auth_arg_spec, _get_api_client, module_class = core
    return module_class(argument_spec={**argument_spec, **auth_arg_spec, **REQUEST_ARG_SPEC}, **kwargs)


def bound_requests(timeout: float) -> None:
    """Every request of the kubernetes client in this process (the module's) waits at most `timeout` seconds for the API
    server to answer, and at most min(CONNECT_TIMEOUT, timeout) for a connection, unless the caller sets its own
    _request_timeout. Set on the client's REST class, so that the dynamic client's discovery, which runs when
    get_api_client builds it, is bounded too. urllib3 retries an idempotent request (GET) whose read timed out up to
    3 times (its default), so such a request gives up after at most 4 x timeout."""
    if not timeout or timeout <= 0:
        return
    try:
        from kubernetes.client import rest  # pylint: disable=import-outside-toplevel
    except ImportError:  # get_api_client reports the missing library, with the fix
        return

    original = getattr(rest.RESTClientObject.request, "_k8sgpu_unbound", rest.RESTClientObject.request)
    bounds = (min(CONNECT_TIMEOUT, timeout), timeout)

    def request(self, *args, **kwargs):
        if not kwargs.get("_request_timeout"):
            kwargs["_request_timeout"] = bounds
        return original(self, *args, **kwargs)

    request._k8sgpu_unbound = original  # pylint: disable=protected-access
    rest.RESTClientObject.request = request


def dynamic_client(module):
    """kubernetes.core's dynamic client for the module's connection options; fails the module clearly."""
    get_api_client = _kubernetes_core()[1]
    timeout = module.params.get("request_timeout")
    try:
        bound_requests(timeout)
        return get_api_client(module=module).client
    except Exception as exc:  # kubernetes.core raises CoreException, kubernetes raises ConfigException
        why = f" (request_timeout {timeout:g} s)" if "timed out" in str(exc) else ""
        module.fail_json(msg=f"Could not reach the Kubernetes API: {exc}{why}")


def api_error_message(exc: Exception) -> str:
    """The API server's own message from a dynamic-client exception, else str(exc)."""
    body = getattr(exc, "body", None)
    if body:
        try:
            return json.loads(body).get("message") or str(exc)
        except (ValueError, AttributeError, TypeError):
            pass
    status = getattr(exc, "status", None)
    return f"HTTP {status}: {getattr(exc, 'reason', exc)}" if status else str(exc)
