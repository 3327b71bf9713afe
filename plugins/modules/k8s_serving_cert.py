#!/usr/bin/python
# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: k8s_serving_cert
short_description: Keep a CA and a serving certificate for an aggregated API server in a Kubernetes Secret
version_added: 1.0.0
description:
  - Makes sure the Secret O(namespace)/O(name) (type C(kubernetes.io/tls)) holds C(tls.crt) and C(tls.key), a serving
    certificate for O(dns_names), and C(ca.crt), the CA that signed it, and returns that CA's certificate as
    RV(ca_bundle) for an C(APIService)'s C(caBundle).
  - An existing pair is kept as long as the key belongs to the certificate, the CA signed it, its DNS names are
    O(dns_names) and neither expires within O(renew_before_days); otherwise a new CA and certificate are made and
    the Secret replaced, and RV(reason) says why. A second run with the same settings changes nothing.
  - The CA's private key is discarded once it has signed the certificate, so the CA vouches for this one
    certificate only; renewing makes a new CA as well, and the caller updates the C(caBundle) from RV(ca_bundle).
  - Only a CA this module made is kept (since 1.1.0). When it makes a CA it records the SHA-256 fingerprint of the
    CA's certificate on the Secret's Namespace (annotation C(k8sgpu.nvidia/serving-ca-sha256), a JSON object by
    Secret name; a merge patch with field manager C(<field_manager>/serving-cert)), and a CA found in the Secret
    whose fingerprint is not the one recorded is not trusted - a new CA and certificate replace it, and RV(reason)
    says so. Why there - the Secret's CA becomes the C(caBundle) the API server's aggregator trusts for the
    adapter, so whoever can write the Secret would otherwise choose it; a record in the same Secret (or any
    namespaced object) could be written by the same people. The Namespace is cluster-scoped - a RoleBinding to
    C(admin) or C(edit) in the namespace, which lets its holder write Secrets there, does not let them write the
    Namespace. What this does not defend against - who may patch Namespaces (cluster-wide), or who may write
    the APIService itself, can still choose the CA; and a pair written into the Secret is served by the adapter
    until the next run replaces it (the aggregator refuses it meanwhile, its CA not being the caBundle).
  - O(trusted_ca_sha256) pins the CA instead (a CA made elsewhere, by cert-manager or a site CA) - only a CA with
    one of those fingerprints is kept, and the module never makes one; O(trust_existing_ca=true) keeps any valid CA
    found (the behaviour of 1.0.0).
  - With O(write_dir), also writes C(tls.crt), C(tls.key) (mode 0600) and C(ca.crt) there, for an API server running
    outside the cluster (C(--tls-cert-file), C(--tls-private-key-file)); a file is rewritten only when it differs.
  - No key material is ever returned or shown in a diff.
  - Written because M(community.crypto.x509_certificate) works on files, and an C(APIService) needs the CA in the
    cluster, renewed together with the certificate, with nothing to clean up on the controller.
author:
  - k8sgpu.nvidia maintainers (@k8sgpu)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - k8sgpu.nvidia.attributes
  - k8sgpu.nvidia.k8s_auth
  - k8sgpu.nvidia.k8s_request
attributes:
  check_mode:
    support: full
    details:
      - Reports whether the Secret (and files) would change and writes nothing.
      - A would-be new CA is returned as RV(ca_bundle) so the caller can dry-run the C(APIService).
  diff_mode:
    support: full
    details: Before and after show the DNS names, expiry and SHA-256 digests, never the key.
options:
  namespace:
    description: Namespace of the Secret. It must exist.
    type: str
    required: true
  name:
    description: Name of the Secret.
    type: str
    required: true
  dns_names:
    description:
      - DNS names of the certificate. The API server's aggregator checks C(<service>.<namespace>.svc).
    type: list
    elements: str
    required: true
  validity_days:
    description: Days the certificate is valid (the CA one day more).
    type: int
    default: 730
  renew_before_days:
    description: Make a new CA and certificate when the current ones expire within this many days.
    type: int
    default: 30
  labels:
    description: Labels of the Secret.
    type: dict
    default: {}
  field_manager:
    description: Field manager of the server-side apply that writes the Secret.
    type: str
    default: k8sgpu.nvidia
  write_dir:
    description: A directory on the host to write C(tls.crt), C(tls.key) and C(ca.crt) to. Not written when empty.
    type: path
  trusted_ca_sha256:
    description:
      - SHA-256 fingerprints (of the DER certificate, hex, colons allowed, any case - as
        C(openssl x509 -noout -fingerprint -sha256) prints them) of the CAs to trust in the Secret, made elsewhere.
      - When given, a CA in the Secret is kept only when its fingerprint is one of them, and the task fails, changing
        nothing, when the Secret's pair cannot be kept (another CA, invalid, expiring) - the module does not make a CA
        that the pin would refuse. Nothing is recorded on the Namespace.
    type: list
    elements: str
    default: []
    version_added: 1.1.0
  trust_existing_ca:
    description:
      - Keep any valid CA found in the Secret, whoever put it there (the behaviour of 1.0.0) - for a Secret that another
        trusted tool (cert-manager) keeps. Nothing is recorded on the Namespace.
    type: bool
    default: false
    version_added: 1.1.0
requirements:
  - kubernetes >= 24.2.0 (Python)
  - cryptography >= 40 (Python)
notes:
  - Needs RBAC C(get) and C(patch) on C(secrets) in O(namespace), and (unless O(trusted_ca_sha256) or
    O(trust_existing_ca)) C(get) and C(patch) on the Namespace O(namespace) itself.
"""

EXAMPLES = r"""
- name: Serving certificate of prometheus-adapter
  k8sgpu.nvidia.k8s_serving_cert:
    namespace: gpu-monitoring
    name: prometheus-adapter-serving-cert
    dns_names: [prometheus-adapter.gpu-monitoring.svc, prometheus-adapter.gpu-monitoring, prometheus-adapter]
  register: cert

- name: Register the adapter, verified by that CA
  kubernetes.core.k8s:
    state: present
    definition:
      apiVersion: apiregistration.k8s.io/v1
      kind: APIService
      metadata: {name: v1beta1.custom.metrics.k8s.io}
      spec:
        group: custom.metrics.k8s.io
        version: v1beta1
        groupPriorityMinimum: 100
        versionPriority: 100
        caBundle: "{{ cert.ca_bundle | b64encode }}"
        service: {name: prometheus-adapter, namespace: gpu-monitoring, port: 443}
"""

RETURN = r"""
ca_bundle:
  description: PEM of the CA that signed the serving certificate (public; for an C(APIService)'s C(caBundle), base64-encoded).
  returned: success
  type: str
ca_sha256:
  description: SHA-256 fingerprint of the CA certificate in place (DER, lower-case hex), as recorded on the Namespace.
  returned: success
  type: str
  version_added: 1.1.0
reason:
  description: Why a new CA and certificate were made (for a CA the module did not make, says so), or C(kept).
  returned: always
  type: str
  sample: "DNS names ['a.b.svc'] are not ['prometheus-adapter.gpu-monitoring.svc']"
certificate:
  description: The serving certificate in place after the run (in check mode, the one that would be).
  returned: success
  type: dict
  contains:
    dns_names:
      description: Its DNS names.
      type: list
      elements: str
    not_after:
      description: When it expires (UTC, ISO 8601).
      type: str
    cert_sha256:
      description: SHA-256 of the certificate (DER).
      type: str
    ca_sha256:
      description: SHA-256 of the CA's PEM.
      type: str
files:
  description: The files written or checked under O(write_dir).
  returned: when O(write_dir) is set
  type: list
  elements: str
"""

import base64
import os
import tempfile

from ansible.module_utils.common.text.converters import to_native
from ansible_collections.k8sgpu.nvidia.plugins.module_utils._k8s_common import (
    api_error_message,
    dynamic_client,
    k8s_module,
    raw_json,
)
from ansible_collections.k8sgpu.nvidia.plugins.module_utils._serving_cert import (
    HAS_CRYPTOGRAPHY,
    KEYS,
    ca_fingerprint,
    ca_trust_problem,
    describe,
    issue,
    problems,
    record_patch,
    recorded_fingerprints,
)


def _read(api, path: str) -> dict | None:
    try:
        return api.request("get", path, serializer=raw_json)
    except Exception as exc:  # the dynamic client raises NotFoundError (status 404)
        if getattr(exc, "status", None) == 404:
            return None
        raise


def _decode(secret: dict | None) -> dict:
    data = (secret or {}).get("data") or {}
    out = {}
    for key in KEYS:
        try:
            out[key] = base64.b64decode(data.get(key) or "").decode()
        except (ValueError, UnicodeDecodeError):
            out[key] = ""
    return out


def _write(path: str, text: str, mode: int, check: bool) -> bool:
    """Write text to path (mode) when it differs; True when it did (or would)."""
    try:
        with open(path, encoding="utf-8") as f:
            same = f.read() == text
        same = same and (os.stat(path).st_mode & 0o777) == mode
    except FileNotFoundError:
        same = False
    if same or check:
        return not same
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".k8sgpu-")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return True


def main() -> None:
    argument_spec = dict(
        namespace=dict(type="str", required=True),
        name=dict(type="str", required=True),
        dns_names=dict(type="list", elements="str", required=True),
        validity_days=dict(type="int", default=730),
        renew_before_days=dict(type="int", default=30),
        labels=dict(type="dict", default={}),
        field_manager=dict(type="str", default="k8sgpu.nvidia"),
        write_dir=dict(type="path"),
        trusted_ca_sha256=dict(type="list", elements="str", default=[], no_log=False),
        trust_existing_ca=dict(type="bool", default=False),
    )
    module = k8s_module(argument_spec, supports_check_mode=True)
    p = module.params
    if not HAS_CRYPTOGRAPHY:
        module.fail_json(msg="k8s_serving_cert needs the Python package cryptography on the host that runs it "
                             "(pip install -r requirements-cert.txt; ansible-core's controller has it).")
    if not p["dns_names"]:
        module.fail_json(msg="dns_names must name at least one DNS name (the Service's <name>.<namespace>.svc)")
    if p["validity_days"] <= p["renew_before_days"] or p["renew_before_days"] < 0:
        module.fail_json(msg=f"validity_days ({p['validity_days']}) must be more than renew_before_days "
                             f"({p['renew_before_days']}), which must not be negative: otherwise every run renews")
    if p["write_dir"] and not os.path.isdir(p["write_dir"]):
        module.fail_json(msg=f"write_dir {p['write_dir']} is not a directory on {os.uname().nodename}: create it first")
    api = dynamic_client(module)
    where = f"Secret {p['namespace']}/{p['name']}"
    pins, trust_existing = p["trusted_ca_sha256"], p["trust_existing_ca"]
    record = not pins and not trust_existing
    ns_path = f"/api/v1/namespaces/{p['namespace']}"
    try:
        secret = _read(api, f"{ns_path}/secrets/{p['name']}")
        namespace = _read(api, ns_path) if record else None
    except Exception as exc:
        module.fail_json(msg=f"Could not read {where} (or its Namespace): {api_error_message(exc)}")
    current = _decode(secret)
    why = problems(current, p["dns_names"], p["renew_before_days"])
    if secret is not None and not why:
        distrust = ca_trust_problem(current, recorded_fingerprints(namespace).get(p["name"]), pins, trust_existing)
        if distrust:
            why = [distrust]
    if why and pins:
        module.fail_json(msg=f"{where}: " + "; ".join(why) + ". With trusted_ca_sha256 the module makes no CA: put a "
                         "pair signed by a pinned CA in the Secret (or fix the pin). Nothing was changed.",
                         ca_sha256=ca_fingerprint(current.get("ca.crt", "")))
    labels_differ = any(((secret or {}).get("metadata") or {}).get("labels", {}).get(k) != v
                        for k, v in p["labels"].items())
    pem = issue(p["dns_names"], p["validity_days"]) if why else current
    changed = bool(why) or labels_differ or (secret or {}).get("type") != "kubernetes.io/tls"
    if changed and not module.check_mode:
        body = {
            "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
            "metadata": {"name": p["name"], "namespace": p["namespace"], "labels": p["labels"]},
            "data": {k: base64.b64encode(pem[k].encode()).decode() for k in KEYS},
        }
        try:
            if secret is not None and secret.get("type") != "kubernetes.io/tls":
                # A Secret's type cannot change in place.
                api.request("delete", f"/api/v1/namespaces/{p['namespace']}/secrets/{p['name']}", serializer=raw_json)
            api.request("patch", f"/api/v1/namespaces/{p['namespace']}/secrets/{p['name']}", body=body,
                        content_type="application/apply-patch+yaml", field_manager=p["field_manager"],
                        force_conflicts=True, serializer=raw_json)
        except Exception as exc:
            module.fail_json(msg=f"Could not write {where}: {api_error_message(exc)}")
    if why and record and not module.check_mode:
        # After the Secret: a failure between the two leaves a CA without its record, which the next run replaces.
        try:
            api.request("patch", ns_path, body=record_patch(namespace, p["name"], ca_fingerprint(pem["ca.crt"])),
                        content_type="application/merge-patch+json",
                        field_manager=f"{p['field_manager']}/serving-cert", serializer=raw_json)
        except Exception as exc:
            module.fail_json(msg=f"Wrote {where}, but could not record its CA on Namespace {p['namespace']}: "
                                 f"{api_error_message(exc)}. The next run makes a new CA again.")
    files = []
    if p["write_dir"]:
        for key, mode in (("ca.crt", 0o644), ("tls.crt", 0o644), ("tls.key", 0o600)):
            path = os.path.join(p["write_dir"], key)
            try:
                changed |= _write(path, pem[key], mode, module.check_mode)
            except OSError as exc:
                module.fail_json(msg=f"Could not write {path}: {to_native(exc)}")
            files.append(path)
    result = dict(changed=changed, ca_bundle=pem["ca.crt"], certificate=describe(pem),
                  ca_sha256=ca_fingerprint(pem["ca.crt"]),
                  reason=f"{where}: " + "; ".join(why) if why else "kept")
    if p["write_dir"]:
        result["files"] = files
    if module._diff:
        result["diff"] = {"before": describe(current) if secret else {}, "after": describe(pem),
                          "before_header": where, "after_header": where}
    module.exit_json(**result)


if __name__ == "__main__":
    main()
