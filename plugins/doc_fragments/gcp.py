# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations


class ModuleDocFragment:
    """The project, location and connection options of the collection's GKE modules (gke_cluster, gke_node_pool;
    argument spec GCP_ARG_SPEC in plugins/module_utils/_gcp_common.py)."""

    DOCUMENTATION = r"""
options:
  project:
    description: The Google Cloud project ID (C(projects/<project>) in the resource's name).
    type: str
    required: true
  location:
    description:
      - The cluster's region (regional cluster, for example C(us-central1)) or zone (zonal cluster, for example
        C(us-central1-a)); C(locations/<location>) in the resource's name.
    type: str
    required: true
  auth_kind:
    description:
      - V(application) - application default credentials; V(serviceaccount) - O(service_account_file) or
        O(service_account_contents); V(accesstoken) - O(access_token). Unset - V(accesstoken) with an
        O(access_token), V(serviceaccount) with a key, else V(application). Env C(GCP_AUTH_KIND).
    type: str
    choices: [application, serviceaccount, accesstoken]
  service_account_file:
    description: Path of a service-account JSON key. Env C(GCP_SERVICE_ACCOUNT_FILE).
    type: path
  service_account_contents:
    description:
      - A service-account JSON key's contents, as a mapping or as JSON text.
      - Never printed, also at C(-vvv) (the task's C(invocation)), where it shows as C(VALUE_SPECIFIED_IN_NO_LOG_PARAMETER);
        its secret fields (C(private_key), C(private_key_id), C(client_secret), C(refresh_token)) are hidden wherever
        else they would appear in the output.
    type: jsonarg
  access_token:
    description: An OAuth2 access token, for example from C(gcloud auth print-access-token). Env C(GCP_ACCESS_TOKEN).
    type: str
  scopes:
    description: OAuth scopes asked for with application default credentials and service-account keys.
    type: list
    elements: str
    default: [https://www.googleapis.com/auth/cloud-platform]
  api_endpoint:
    description:
      - Base URL of the GKE API (C(client_options.api_endpoint)), for example a regional or private endpoint, or a
        local emulator. A host without a scheme is taken as https. Unset - C(https://container.googleapis.com). Env
        C(GKE_API_ENDPOINT).
      - The credentials go only over https to a Google API host (C(googleapis.com) and its subdomains) or to this
        endpoint's origin. URLs read from API responses (a node pool's instance group URLs, read for its node count)
        are sent the token only when they are one of those; the task fails otherwise.
      - A URL with user information (C(user:password@)) is refused. A plain C(http://) URL is refused unless its host
        is a loopback address (C(localhost), C(127.0.0.0/8), C(::1)) or O(allow_http_api_endpoint=true).
    type: str
  allow_http_api_endpoint:
    description:
      - Accept a plain C(http://) O(api_endpoint) on a host other than loopback. B(Unsafe) - the access token (or the
        token obtained with the service-account key) crosses the network unencrypted, readable by anyone on the path;
        for a test server on a network you trust only.
    type: bool
    default: false
  request_timeout:
    description: Seconds for each HTTP request.
    type: float
    default: 60.0
requirements:
  - google-cloud-container >= 2.67.0
  - google-auth
"""
