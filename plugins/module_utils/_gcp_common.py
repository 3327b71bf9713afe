# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private to k8sgpu.nvidia: what the collection's Google Cloud modules share.

Credentials come from google-auth, in one of three ways (option ``auth_kind``, inferred when unset):
``application`` - application default credentials (``GOOGLE_APPLICATION_CREDENTIALS``, gcloud's
``application_default_credentials.json``, the metadata server of a GCE VM or GKE workload identity);
``serviceaccount`` - a service-account key file or its contents; ``accesstoken`` - an OAuth2 access token
(``gcloud auth print-access-token``). The GKE client is google-cloud-container's ClusterManagerClient over
REST (``transport="rest"``).

Where the credentials go: only over https to a Google API host (``googleapis.com`` or a subdomain: the default
``container.googleapis.com``, regional, mTLS and private endpoints, the Compute API's ``www.googleapis.com``), or
to the origin of an ``api_endpoint`` the task sets. An ``http://`` api_endpoint is taken only on a loopback host
(a local emulator or test server) unless ``allow_http_api_endpoint`` is set; URLs read from API responses (a node
pool's instance groups) are checked before the session sends its token there.
"""
from __future__ import annotations

import ipaddress
import json
import time
import traceback
from urllib.parse import urlsplit

from ansible.module_utils.basic import AnsibleModule, env_fallback, missing_required_lib

try:
    import google.auth
    import google.auth.exceptions
    import google.oauth2.credentials
    import google.oauth2.service_account
    from google.api_core import exceptions as gexc
    from google.auth.transport.requests import AuthorizedSession
    from google.cloud import container_v1
    from google.protobuf import json_format
    HAS_GOOGLE = True
    GOOGLE_IMPORT_ERROR = None
except ImportError:
    HAS_GOOGLE = False
    GOOGLE_IMPORT_ERROR = traceback.format_exc()
    gexc = None  # pylint: disable=invalid-name

CLOUD_PLATFORM = "https://www.googleapis.com/auth/cloud-platform"

# The project and location of every GKE resource's name (projects/<project>/locations/<location>/...) and the
# connection options; documented once in plugins/doc_fragments/gcp.py.
GKE_LOCATION_ARG_SPEC = {
    "project": {"type": "str", "required": True},
    "location": {"type": "str", "required": True},
}

GCP_ARG_SPEC = {
    "auth_kind": {"type": "str", "choices": ["application", "serviceaccount", "accesstoken"],
                  "fallback": (env_fallback, ["GCP_AUTH_KIND"])},
    "service_account_file": {"type": "path", "fallback": (env_fallback, ["GCP_SERVICE_ACCOUNT_FILE"])},
    "service_account_contents": {"type": "jsonarg", "no_log": True},
    "access_token": {"type": "str", "no_log": True, "fallback": (env_fallback, ["GCP_ACCESS_TOKEN"])},
    "scopes": {"type": "list", "elements": "str", "default": [CLOUD_PLATFORM]},
    "api_endpoint": {"type": "str", "fallback": (env_fallback, ["GKE_API_ENDPOINT"])},
    "allow_http_api_endpoint": {"type": "bool", "default": False},
    "request_timeout": {"type": "float", "default": 60.0},
}


def gcp_module(argument_spec: dict, **kwargs) -> AnsibleModule:
    """An AnsibleModule with the project, location and connection options added to argument_spec; fails naming the
    library when it cannot be imported."""
    module = AnsibleModule(argument_spec={**GKE_LOCATION_ARG_SPEC, **argument_spec, **GCP_ARG_SPEC}, **kwargs)
    hide_key_contents(module)
    if not HAS_GOOGLE:
        module.fail_json(msg=missing_required_lib("google-cloud-container and google-auth "
                                                  "(pip install -r requirements-gke.txt)"),
                         exception=GOOGLE_IMPORT_ERROR)
    return module


# Fields of a key file (service account, or authorized user) that are secrets; the others (type, project_id,
# client_email, token_uri, ...) are not, and are not hidden elsewhere in the output.
KEY_SECRET_FIELDS = ("private_key", "private_key_id", "client_secret", "refresh_token")


def hide_key_contents(module: AnsibleModule) -> None:
    """Hide service_account_contents in the module's output (invocation at -vvv, messages), however it was given.

    AnsibleModule hides a no_log option by the strings it holds; for a mapping it takes the mapping's values,
    before type conversion. jsonarg then turns the mapping into its JSON text, in which the private key's newlines
    are escaped, so the key no longer matched and was printed whole in invocation.module_args, while short values
    (the key's type, project, "1") were masked in every other string of the output. Here the JSON text itself and
    the secret fields (raw and JSON-escaped) are hidden, and the key's other fields are no longer masked.
    """
    value = module.params.get("service_account_contents")
    if not value:
        return
    module.no_log_values.add(value if isinstance(value, str) else json.dumps(value))
    try:
        info = json.loads(value) if isinstance(value, str) else value
    except ValueError:
        return
    if not isinstance(info, dict):
        return
    others = {module.params.get(name) for name, spec in module.argument_spec.items()
              if spec.get("no_log") and name != "service_account_contents"}
    for field, leaf in info.items():
        if not isinstance(leaf, str) or not leaf:
            continue
        if field in KEY_SECRET_FIELDS:
            module.no_log_values.update((leaf, json.dumps(leaf)[1:-1]))
        elif leaf not in others:
            module.no_log_values.discard(leaf)


class EndpointError(ValueError):
    """An endpoint the credentials must not be sent to; the message says why and what to set."""


def _url(url: str):
    """urlsplit of url, a bare host[:port] taken as https (as google-api-core's REST transport does)."""
    return urlsplit(url if "://" in url else f"https://{url}")


def _port(parts) -> int | None:
    try:
        return parts.port or {"https": 443, "http": 80}.get(parts.scheme)
    except ValueError:
        return None


def is_loopback(host: str) -> bool:
    """localhost, 127.0.0.0/8 or ::1."""
    if (host or "").lower() in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def is_google_api_url(url: str) -> bool:
    """Whether url is https on googleapis.com or a subdomain (container, regional, mTLS, www for Compute)."""
    parts = _url(url)
    host = (parts.hostname or "").lower().rstrip(".")
    return (parts.scheme == "https" and not parts.username and _port(parts) is not None
            and (host == "googleapis.com" or host.endswith(".googleapis.com")))


def check_api_endpoint(url: str, allow_http: bool = False) -> None:
    """Raise EndpointError when an api_endpoint set by the task must not receive the credentials."""
    parts = _url(url)
    if parts.scheme not in ("https", "http") or not parts.hostname or _port(parts) is None:
        raise EndpointError(f"api_endpoint {url!r} is not an https:// URL (or a host name, taken as https)")
    if parts.username is not None:
        raise EndpointError("api_endpoint has user information (user@ or user:password@); give credentials with "
                            "access_token, service_account_file or service_account_contents, never in the URL")
    if parts.scheme == "http" and not is_loopback(parts.hostname) and not allow_http:
        raise EndpointError(
            f"api_endpoint {url} is plain http on {parts.hostname}, not a loopback address: the access token "
            "would cross the network unencrypted. Use https, or set allow_http_api_endpoint: true for a test "
            "server on a network you trust")


def same_origin(url: str, other: str) -> bool:
    a, b = _url(url), _url(other)
    return (a.scheme, (a.hostname or "").lower(), _port(a)) == (b.scheme, (b.hostname or "").lower(), _port(b)) \
        and a.username is None


def token_may_go(url: str, api_endpoint: str | None) -> bool:
    """Whether the module sends its credentials to url: a Google API host over https, or api_endpoint's origin."""
    return is_google_api_url(url) or bool(api_endpoint) and same_origin(url, api_endpoint)


def auth_kind(params: dict) -> str:
    """The auth_kind asked for, or the one the other options imply."""
    if params.get("auth_kind"):
        return params["auth_kind"]
    if params.get("access_token"):
        return "accesstoken"
    if params.get("service_account_file") or params.get("service_account_contents"):
        return "serviceaccount"
    return "application"


def credentials(module: AnsibleModule):
    """google-auth credentials for the module's options; fails with what to set when there are none."""
    p = module.params
    kind = auth_kind(p)
    scopes = p["scopes"] or [CLOUD_PLATFORM]
    if kind == "accesstoken":
        if not p["access_token"]:
            module.fail_json(msg="auth_kind is accesstoken but no access_token is given (option access_token or "
                                 "GCP_ACCESS_TOKEN, e.g. from `gcloud auth print-access-token`)")
        return google.oauth2.credentials.Credentials(token=p["access_token"])
    if kind == "serviceaccount":
        try:
            if p["service_account_contents"]:
                info = p["service_account_contents"]
                info = json.loads(info) if isinstance(info, str) else info
                return google.oauth2.service_account.Credentials.from_service_account_info(info, scopes=scopes)
            if p["service_account_file"]:
                return google.oauth2.service_account.Credentials.from_service_account_file(
                    p["service_account_file"], scopes=scopes)
        except (OSError, ValueError) as e:
            where = p["service_account_file"] or "service_account_contents"
            module.fail_json(msg=f"service account key {where}: {e} (a JSON key file of type service_account, "
                                 "from `gcloud iam service-accounts keys create`)")
        module.fail_json(msg="auth_kind is serviceaccount but neither service_account_file nor "
                             "service_account_contents is given")
    try:
        creds, _project = google.auth.default(scopes=scopes)
    except google.auth.exceptions.DefaultCredentialsError as e:
        module.fail_json(msg=("no Google Cloud credentials found (auth_kind application, application default "
                              f"credentials): {e} Fix: run `gcloud auth application-default login`, set "
                              "GOOGLE_APPLICATION_CREDENTIALS to a service-account key file, or give "
                              "service_account_file or access_token"))
    return creds


def gke_client(module: AnsibleModule, creds):
    """google-cloud-container's ClusterManagerClient over REST, on api_endpoint when given.

    Fails, before any request, when the credentials would go elsewhere than https to a Google API host or the
    api_endpoint the task set (see check_api_endpoint).
    """
    endpoint = module.params["api_endpoint"]
    if endpoint:
        try:
            check_api_endpoint(endpoint, module.params["allow_http_api_endpoint"])
        except EndpointError as e:
            module.fail_json(msg=str(e))
    options = {"api_endpoint": endpoint} if endpoint else None
    client = container_v1.ClusterManagerClient(credentials=creds, transport="rest", client_options=options)
    if not endpoint and not is_google_api_url(client.api_endpoint):
        module.fail_json(msg=f"the GKE client would send the credentials to {client.api_endpoint} (from the "
                             "environment, such as GOOGLE_CLOUD_UNIVERSE_DOMAIN), not to a Google API host "
                             "(*.googleapis.com); set api_endpoint to the endpoint you mean")
    return client


def authorized_session(creds) -> AuthorizedSession:
    """A requests session that sends the same credentials (for the Compute API reads)."""
    return AuthorizedSession(creds)


def to_dict(message) -> dict:
    """A proto-plus or protobuf message as a dict with the proto's snake_case names, enums as names."""
    pb = getattr(type(message), "pb", None)
    pb = pb(message) if pb else message
    return json_format.MessageToDict(pb, preserving_proto_field_name=True)


def enum_names(enum) -> list[str]:
    """The value names of a proto-plus enum, for checking a task's value before any request."""
    return list(enum.__members__)


def api_error(what: str, e: Exception) -> str:
    """'<what>: <HTTP code> <status>: <message>' for a google-api-core error."""
    if HAS_GOOGLE and isinstance(e, google.auth.exceptions.RefreshError):
        return (f"{what}: the credentials were refused and could not be refreshed ({e}). An access_token lasts "
                "about an hour: give a new one (gcloud auth print-access-token), or use application default "
                "credentials or a service-account key")
    if gexc is not None and isinstance(e, gexc.GoogleAPICallError):
        status = getattr(e, "grpc_status_code", None)
        status = f" {status.name}" if status is not None else ""
        return f"{what}: HTTP {e.code}{status}: {e.message}"
    return f"{what}: {type(e).__name__}: {e}"


class GkeRun:
    """One run of a GKE module (gke_cluster, gke_node_pool): the client, the write requests it sent (or in check
    mode would send), the operations it followed, one failure path naming the resource (``ident``).

    A subclass names the request type of each client method it writes through (``REQUEST_TYPES``, names in
    ``google.cloud.container_v1.types``) and how long the poll of an operation may back off (``MAX_POLL_DELAY``)."""

    REQUEST_TYPES: dict[str, str] = {}
    MAX_POLL_DELAY = 15.0

    def __init__(self, module: AnsibleModule, ident: str):
        self.module = module
        self.p = module.params
        self.creds = credentials(module)
        self.client = gke_client(module, self.creds)
        self.requests: list[dict] = []
        self.operations: list[dict] = []
        self.ident = ident

    def fail(self, msg: str, **kw):
        self.module.fail_json(msg=msg, requests=self.requests, operations=self.operations, **kw)

    def call(self, what: str, fn, **kw):
        try:
            return fn(**kw, timeout=self.p["request_timeout"])
        except Exception as e:  # pylint: disable=broad-except  # API, transport and auth errors, with context
            self.fail(api_error(f"{self.ident}: {what}", e))

    def wait(self, op, what: str) -> None:
        """Follow the operation until DONE, within wait_timeout (monotonic clock); fail with its error."""
        done = container_v1.types.Operation.Status.DONE
        name = f"projects/{self.p['project']}/locations/{self.p['location']}/operations/{op.name}"
        deadline = time.monotonic() + self.p["wait_timeout"]
        delay = 1.0
        while op.status != done:
            if time.monotonic() >= deadline:
                self.fail(f"{self.ident}: {what}: operation {op.name} still {op.status.name} after "
                          f"wait_timeout={self.p['wait_timeout']}s")
            op = self.call("get_operation", self.client.get_operation, name=name)
            if op.status != done:
                time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
                delay = min(delay * 2, self.MAX_POLL_DELAY)
        self.operations.append(to_dict(op))
        if op.error and (op.error.code or op.error.message):
            self.fail(f"{self.ident}: {what}: operation {op.name} ({op.operation_type.name}) failed: "
                      f"code {op.error.code}: {op.error.message}")
        if op.status_message and not op.error.message:
            self.module.warn(f"{what}: operation {op.name}: {op.status_message}")

    def write(self, method: str, what: str, **request) -> None:
        """Record a write request; send it and wait for its operation unless in check mode."""
        self.requests.append({"method": method, "request": {k: v for k, v in request.items() if k != "name"}})
        if self.module.check_mode:
            return
        req_type = getattr(container_v1.types, self.REQUEST_TYPES[method])
        op = self.call(method, getattr(self.client, method), request=req_type(request))
        self.wait(op, what)
