# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private to k8sgpu.nvidia: what the collection's Google Cloud modules share.

Credentials come from google-auth, in one of three ways (option ``auth_kind``, inferred when unset):
``application`` - application default credentials (``GOOGLE_APPLICATION_CREDENTIALS``, gcloud's
``application_default_credentials.json``, the metadata server of a GCE VM or GKE workload identity);
``serviceaccount`` - a service-account key file or its contents; ``accesstoken`` - an OAuth2 access token
(``gcloud auth print-access-token``). The GKE client is google-cloud-container's ClusterManagerClient over
REST (``transport="rest"``), so ``api_endpoint`` may be any https or http URL.
"""
from __future__ import annotations

import json
import traceback

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

GCP_ARG_SPEC = {
    "auth_kind": {"type": "str", "choices": ["application", "serviceaccount", "accesstoken"],
                  "fallback": (env_fallback, ["GCP_AUTH_KIND"])},
    "service_account_file": {"type": "path", "fallback": (env_fallback, ["GCP_SERVICE_ACCOUNT_FILE"])},
    "service_account_contents": {"type": "jsonarg", "no_log": True},
    "access_token": {"type": "str", "no_log": True, "fallback": (env_fallback, ["GCP_ACCESS_TOKEN"])},
    "scopes": {"type": "list", "elements": "str", "default": [CLOUD_PLATFORM]},
    "api_endpoint": {"type": "str", "fallback": (env_fallback, ["GKE_API_ENDPOINT"])},
    "request_timeout": {"type": "float", "default": 60.0},
}


def gcp_module(argument_spec: dict, **kwargs) -> AnsibleModule:
    """An AnsibleModule with the connection options; fails naming the library when it cannot be imported."""
    module = AnsibleModule(argument_spec={**argument_spec, **GCP_ARG_SPEC}, **kwargs)
    if not HAS_GOOGLE:
        module.fail_json(msg=missing_required_lib("google-cloud-container and google-auth "
                                                  "(pip install -r requirements.txt)"),
                         exception=GOOGLE_IMPORT_ERROR)
    return module


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
    """google-cloud-container's ClusterManagerClient over REST, on api_endpoint when given."""
    options = {"api_endpoint": module.params["api_endpoint"]} if module.params["api_endpoint"] else None
    return container_v1.ClusterManagerClient(credentials=creds, transport="rest", client_options=options)


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
