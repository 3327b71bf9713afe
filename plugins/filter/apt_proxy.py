# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""apt.conf settings that send one repository's host through a proxy."""
from __future__ import annotations

from urllib.parse import urlsplit

from ansible.errors import AnsibleFilterError

SOURCE_SCHEMES = ("http", "https", "file")
PROXY_SCHEMES = ("http", "https", "socks5h")


def apt_proxy_lines(url: str, proxy: str, url_name: str = "url", proxy_name: str = "proxy") -> list[str]:
    """The apt.conf lines that send url's host through proxy; [] when there is nothing to write.

    proxy: empty (apt's own settings), DIRECT (no proxy for that host) or a proxy URL. A file:// source is read
    from the host's disk, through no proxy, so it gets none. For an http or https source both of apt's methods get
    the host, as a redirect between them keeps the host.
    """
    if not isinstance(url, str) or not isinstance(proxy, str):
        raise AnsibleFilterError(f"apt_proxy_lines: {url_name} and {proxy_name} must be strings, got {url!r}, {proxy!r}")
    source = urlsplit(url.strip())
    if source.scheme not in SOURCE_SCHEMES:
        raise AnsibleFilterError(
            f"{url_name} {url!r} is not an http://, https:// or file:// URL; apt's other methods are not supported."
        )
    proxy = proxy.strip()
    if proxy and proxy != "DIRECT":
        target = urlsplit(proxy)
        if target.scheme not in PROXY_SCHEMES or not target.hostname:
            raise AnsibleFilterError(
                f"{proxy_name} {proxy!r} is not a proxy URL (http://host:port, https:// or socks5h://), nor DIRECT "
                "(no proxy) nor empty (apt's own settings)."
            )
        if any(c in proxy for c in '"\n;'):
            raise AnsibleFilterError(f"{proxy_name} {proxy!r} holds a character apt.conf cannot take (quote, ;, newline).")
    if not proxy or source.scheme == "file":
        return []
    if not source.hostname:
        raise AnsibleFilterError(f"{url_name} {url!r} has no host name.")
    return [f'Acquire::{method}::Proxy::{source.hostname} "{proxy}";' for method in ("http", "https")]


class FilterModule:
    def filters(self) -> dict:
        return {"apt_proxy_lines": apt_proxy_lines}
