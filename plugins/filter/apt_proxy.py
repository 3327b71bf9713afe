# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""apt.conf settings that send one repository's host through a proxy."""
from __future__ import annotations

from urllib.parse import unquote, urlsplit

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
    # Credentials never go to this world-readable file: apt_proxy_auth gives them for /etc/apt/auth.conf.d/.
    shown = _without_userinfo(proxy) if proxy != "DIRECT" else proxy
    return [f'Acquire::{method}::Proxy::{source.hostname} "{shown}";' for method in ("http", "https")]


def _without_userinfo(proxy: str) -> str:
    target = urlsplit(proxy)
    netloc = target.netloc.rsplit("@", 1)[-1]
    return target._replace(netloc=netloc).geturl()


def apt_proxy_auth(proxy: str, proxy_name: str = "proxy") -> list[str]:
    """The apt_auth.conf(5) lines (machine, login, password) for a proxy URL with user:password@; [] without.

    apt reads proxy credentials from /etc/apt/auth.conf.d/*.conf, a file only root reads (mode 0600), so they stay
    out of apt.conf.d (world-readable) and out of diffs. The machine names the proxy's scheme (apt matches an entry
    without one only for https) and its port when the URL gives one.
    """
    if not isinstance(proxy, str):
        raise AnsibleFilterError(f"apt_proxy_auth: {proxy_name} must be a string")
    proxy = proxy.strip()
    if not proxy or proxy == "DIRECT":
        return []
    target = urlsplit(proxy)
    if target.username is None and target.password is None:
        return []
    login, password = unquote(target.username or ""), unquote(target.password or "")
    if any(c.isspace() for c in login + password) or not login:
        raise AnsibleFilterError(
            f"{proxy_name}: the proxy's user name is empty or its user name or password holds white space, which "
            "apt's auth.conf cannot take; use a proxy account without spaces."
        )
    machine = f"{target.scheme}://{target.hostname}" + (f":{target.port}" if target.port else "")
    return [f"machine {machine}", f"login {login}", f"password {password}"]


def apt_proxy_redact(proxy: str) -> str:
    """The proxy URL with its password replaced by ***, for messages."""
    if not isinstance(proxy, str) or "@" not in proxy:
        return proxy
    target = urlsplit(proxy.strip())
    user = target.username or ""
    return target._replace(netloc=f"{user}:***@" + target.netloc.rsplit("@", 1)[-1]).geturl()


class FilterModule:
    def filters(self) -> dict:
        return {"apt_proxy_lines": apt_proxy_lines, "apt_proxy_auth": apt_proxy_auth,
                "apt_proxy_redact": apt_proxy_redact}
