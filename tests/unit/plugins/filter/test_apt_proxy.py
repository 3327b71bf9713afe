"""apt_proxy_lines: every repository scheme (http, https, file) with every proxy setting (none, a URL, DIRECT),
as the container_toolkit role's apt proxy file gets them (issue 10, defect 2)."""
from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.k8sgpu.nvidia.plugins.filter._apt_proxy_lines import apt_proxy_lines

HTTP = "http://mirror.site.example:8080/libnvidia-container"
HTTPS = "https://nvidia.github.io/libnvidia-container"
FILE = "file:///srv/mirror/libnvidia-container"
PROXY = "http://proxy.site.example:3128"


def both(host: str, proxy: str) -> list[str]:
    return [f'Acquire::http::Proxy::{host} "{proxy}";', f'Acquire::https::Proxy::{host} "{proxy}";']


@pytest.mark.parametrize(("url", "proxy", "lines"), [
    # No proxy setting: apt's own settings, no file.
    (HTTP, "", []),
    (HTTPS, "", []),
    (FILE, "", []),
    # A proxy URL: the repository's host (without its port) through it; a file:// source has no host to proxy.
    (HTTP, PROXY, both("mirror.site.example", PROXY)),
    (HTTPS, PROXY, both("nvidia.github.io", PROXY)),
    (FILE, PROXY, []),
    # DIRECT: the host bypasses the site's proxy.
    (HTTP, "DIRECT", both("mirror.site.example", "DIRECT")),
    (HTTPS, "DIRECT", both("nvidia.github.io", "DIRECT")),
    (FILE, "DIRECT", []),
])
def test_every_scheme_with_every_proxy(url, proxy, lines):
    assert apt_proxy_lines(url, proxy) == lines


def test_whitespace_and_the_host_as_apt_matches_it():
    assert apt_proxy_lines(" https://Mirror.Site.Example/x ", f" {PROXY} ") == both("mirror.site.example", PROXY)


@pytest.mark.parametrize(("url", "proxy", "message"), [
    ("ftp://mirror/x", "", "container_toolkit_repo_url 'ftp://mirror/x' is not an http://, https:// or file:// URL"),
    ("mirror.site.example/x", PROXY, "is not an http://, https:// or file:// URL"),
    ("http:///x", PROXY, "has no host name"),
    (HTTPS, "proxy.site.example:3128", "container_toolkit_repo_proxy 'proxy.site.example:3128' is not a proxy URL"),
    (FILE, "direct", "is not a proxy URL"),
    (HTTPS, 'http://p:1/";', "cannot take"),
])
def test_bad_settings_fail_naming_the_variable(url, proxy, message):
    with pytest.raises(AnsibleFilterError, match=message):
        apt_proxy_lines(url, proxy, url_name="container_toolkit_repo_url", proxy_name="container_toolkit_repo_proxy")
