#!/usr/bin/python
# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: openpgp_key_fetch
short_description: Fetch a repository's signing key over http(s), through a proxy given as a secret option
version_added: 1.1.0
description:
  - Reads the text at O(url) (an C(http://) or C(https://) URL, for example a repository's C(gpgkey)) with a GET and
    returns it, for the controller to verify (P(k8sgpu.nvidia._openpgp_key#filter)) before anything is written.
  - The proxy, with its user and password, is an option of the module (O(proxy), C(no_log)), not the process
    environment, so it is never in a command line, in C(ps) on the host or in the output at C(-vvv); the
    password is hidden in every result and message.
  - Redirects are followed only within the URL's scheme; a redirect from C(https://) to C(http://) (or the other way)
    fails naming both URLs, before the second URL is read.
  - C(https://) is read with the host's trusted certificate authorities, the certificate and the host name checked.
  - Our own module because M(ansible.builtin.uri) and M(ansible.builtin.get_url) take a proxy only from the process
    environment (C(environment) on the task), where its credentials are in C(/proc/PID/environ) of the module's
    process for the whole read and in the task's arguments at C(-vvv), and because their
    O(ansible.builtin.uri#module:follow_redirects) has no setting that keeps a redirect within the URL's scheme.
author:
  - k8sgpu.nvidia maintainers (@k8sgpu)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - k8sgpu.nvidia.attributes
  - k8sgpu.nvidia.attributes.read_only
options:
  url:
    description:
      - The URL to read, C(http://) or C(https://).
      - A repository that needs a login takes it in the URL, over C(https://) only
        (C(https://user:password@host/path), percent-encoded), as the roles' repository URLs do; it is sent in an
        C(Authorization) header (HTTP Basic) to that host only (dropped on a redirect to another host or port), and
        the password is hidden in every result and message, which name the URL without the user information.
    type: str
    required: true
  proxy:
    description:
      - V("") reads through the proxy of the host's environment, if any (C(https_proxy), C(http_proxy)).
      - V(DIRECT) reads without a proxy.
      - Otherwise an C(http://) or C(https://) proxy URL, C(http://user:password@proxy:3128) with credentials
        (percent-encoded), sent to the proxy in C(Proxy-Authorization), never to O(url)'s server.
    type: str
    default: ""
  timeout:
    description: Seconds to wait for each connection and read.
    type: int
    default: 30
  max_bytes:
    description: The most bytes read; a longer answer fails (a key is a few kilobytes).
    type: int
    default: 1048576
notes:
  - A C(socks5h://) proxy, which apt takes, is not supported here; give the key's text to the role instead
    (C(container_toolkit_repo_key)) or use a C(file://) key URL.
seealso:
  - module: ansible.builtin.uri
"""

EXAMPLES = r"""
- name: Fetch the repository key through the site's proxy
  k8sgpu.nvidia.openpgp_key_fetch:
    url: https://nvidia.github.io/libnvidia-container/gpgkey
    proxy: "{{ site_apt_proxy }}"
  register: repo_key

- name: Verify it and keep only the pinned key
  ansible.builtin.set_fact:
    repo_keyring_text: "{{ repo_key.content | k8sgpu.nvidia._openpgp_key('C95B321B61E88C1809C4F759DDCAE044F796ECB0') }}"
"""

RETURN = r"""
content:
  description: The text read (UTF-8; bytes that are not are replaced).
  returned: success
  type: str
url:
  description: The URL the text came from, after any redirects (within O(url)'s scheme), without user information.
  returned: success
  type: str
  sample: https://nvidia.github.io/libnvidia-container/gpgkey
status:
  description: The HTTP status of the last answer.
  returned: success
  type: int
  sample: 200
"""

import base64
import urllib.error
import urllib.request
from urllib.parse import unquote, urlsplit

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.k8sgpu.nvidia.plugins.module_utils import _url


class SchemeChanged(urllib.error.URLError):
    pass


class SameSchemeRedirects(urllib.request.HTTPRedirectHandler):
    """urllib's redirects (GET and HEAD, at most 10), refused where the scheme changes; the Authorization header
    (a repository's login) follows only to the same host and port."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        if urlsplit(newurl).scheme.lower() != urlsplit(req.full_url).scheme.lower():
            raise SchemeChanged(f"{req.full_url} redirects ({code}) to {newurl}, another scheme; refused")
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None and urlsplit(newurl).netloc.lower() != urlsplit(req.full_url).netloc.lower():
            new.remove_header("Authorization")
        return new


def _redact(proxy: str) -> str:
    if "@" not in proxy:
        return proxy
    scheme, _sep, rest = proxy.partition("://")
    return f"{scheme}://***@{rest.rpartition('@')[2]}"


def fetch(url: str, proxy: str, timeout: int, max_bytes: int,
          login: tuple[str, str] | None = None) -> tuple[str, str, int]:
    if proxy == "DIRECT":
        proxies = urllib.request.ProxyHandler({})
    elif proxy:
        proxies = urllib.request.ProxyHandler({"http": proxy, "https": proxy})
    else:
        proxies = urllib.request.ProxyHandler()  # the environment's, as urllib reads it
    opener = urllib.request.build_opener(proxies, SameSchemeRedirects())
    headers = {"User-Agent": "k8sgpu.nvidia openpgp_key_fetch"}
    if login is not None:
        token = base64.b64encode(("%s:%s" % login).encode("utf-8")).decode("ascii")
        headers["Authorization"] = "Basic " + token
    request = urllib.request.Request(url, headers=headers)
    with opener.open(request, timeout=timeout) as answer:
        data = answer.read(max_bytes + 1)
        if len(data) > max_bytes:
            raise ValueError(f"the answer is longer than {max_bytes} bytes (max_bytes)")
        return data.decode("utf-8", errors="replace"), answer.geturl(), answer.status


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "url": {"type": "str", "required": True},
            "proxy": {"type": "str", "default": "", "no_log": True},
            "timeout": {"type": "int", "default": 30},
            "max_bytes": {"type": "int", "default": 1048576},
        },
        supports_check_mode=True,
    )
    url, proxy = module.params["url"].strip(), module.params["proxy"].strip()
    target = urlsplit(proxy) if proxy not in ("", "DIRECT") else None
    if target is not None and target.password:
        module.no_log_values.update({target.password, unquote(target.password)})
    shown = _redact(proxy) if proxy else "the environment's proxy, if any"
    login = None
    if "@" in urlsplit(url).netloc:
        try:
            _scheme, info, _host, _port, _path = _url.parse(url, ("http", "https"), userinfo="https")
            url, _host, user, password = _url.split_credentials(url)
        except _url.URLError as exc:
            module.fail_json(msg=f"url (value not shown): {exc}.")
        login = (user, password or "")
        module.no_log_values.update(value for value in (info, info.partition(":")[2], password) if value)
    if urlsplit(url).scheme not in ("http", "https") or not urlsplit(url).hostname:
        module.fail_json(msg=f"url {url!r} is not an http:// or https:// URL with a host.")
    if target is not None and target.scheme not in ("http", "https"):
        module.fail_json(msg=f"proxy {_redact(proxy)!r}: only http:// and https:// proxies can fetch {url} (or DIRECT, "
                             "or empty); give the key's text instead.")
    try:
        content, final, status = fetch(url, proxy, module.params["timeout"], module.params["max_bytes"], login)
    except SchemeChanged as exc:
        module.fail_json(msg=f"{exc.reason} (a key must come over the scheme of its URL; set the key URL to the "
                             "final URL if that one is right).")
    except urllib.error.HTTPError as exc:
        module.fail_json(msg=f"{url}: HTTP {exc.code} {exc.reason} (through {shown}).", status=exc.code)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        module.fail_json(msg=f"{url}: cannot be read through {shown}: {reason}.")
    module.exit_json(changed=False, content=content, url=final, status=status)


if __name__ == "__main__":
    main()
