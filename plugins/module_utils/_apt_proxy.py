# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private to k8sgpu.nvidia (filters apt_proxy_lines, apt_proxy_auth and apt_proxy_redact of the roles driver and container_toolkit).

apt.conf settings that send apt (every host, or one repository's host) through a proxy.

One code path for every role that sets apt's proxy (driver: every host; container_toolkit: its repository's host):
the proxy URL goes to a world-readable apt.conf.d file without its user and password (apt_proxy_lines), which go to a
file of /etc/apt/auth.conf.d/ that only root reads (apt_proxy_auth); messages show it with the password hidden
(apt_proxy_redact). Nothing that reaches apt.conf is copied from the input as it is: the lines are rebuilt from the
parsed scheme, host and port, and an input holding anything else (a quote, ;, a brace, white space, a control
character, a path, a query) is refused, so a value can never add a setting or an apt hook.
"""
from __future__ import annotations

import re
from urllib.parse import unquote, urlsplit


class AptProxyError(ValueError):
    """A bad URL or proxy, with a message naming the variable and the fix."""


SOURCE_SCHEMES = ("http", "https", "file")
PROXY_SCHEMES = ("http", "https", "socks5h")
# A host name or an IPv4 address as apt.conf and auth.conf take it (IPv6 literals are kept in brackets).
_HOST = re.compile(r"^(?:[A-Za-z0-9](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9])?)(?:\.[A-Za-z0-9](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9])?)*\.?$")
_IPV6 = re.compile(r"^[0-9A-Fa-f:.]+$")
# What apt.conf or auth.conf could read as syntax, anywhere in a proxy URL.
_UNSAFE = re.compile(r'["\';{}\\\s\x00-\x1f\x7f]')


def _proxy_parts(proxy: str, proxy_name: str) -> tuple[str, str, int | None]:
    """(scheme, host, port) of a proxy URL, refusing anything else in it (a path other than /, a query, ...)."""
    if _UNSAFE.search(proxy):
        raise AptProxyError(
            f"{proxy_name}: the proxy URL holds a character apt.conf cannot take (a quote, ;, a brace, a backslash, "
            "white space or a control character); value not shown. Set it to scheme://[user:password@]host:port.")
    target = urlsplit(proxy)
    try:
        port = target.port
    except ValueError:
        port = -1
    host = target.hostname or ""
    ok_host = bool(_HOST.match(host)) or ("[" in target.netloc and bool(_IPV6.match(host)))
    if (target.scheme not in PROXY_SCHEMES or not ok_host or port == -1 or port == 0
            or target.path not in ("", "/") or target.query or target.fragment or proxy.endswith(("?", "#"))):
        raise AptProxyError(
            f"{proxy_name} {apt_proxy_redact(proxy)!r} is not a proxy URL (http://host:port, https:// or socks5h:// with "
            "a host, an optional port and nothing after it), nor DIRECT (no proxy) nor empty (apt's own settings).")
    return target.scheme, host, port


def _shown(scheme: str, host: str, port: int | None) -> str:
    """The proxy URL rebuilt from its parts, without user and password."""
    host = f"[{host}]" if ":" in host else host
    return f"{scheme}://{host}" + (f":{port}" if port else "")


def apt_proxy_lines(url: str, proxy: str, url_name: str = "url", proxy_name: str = "proxy") -> list[str]:
    """The apt.conf lines that send url's host (every host: url empty) through proxy; [] when there is nothing to write.

    proxy: empty (apt's own settings), DIRECT (no proxy) or a proxy URL. A file:// source is read from the host's
    disk, through no proxy, so it gets none. For an http or https source both of apt's methods get the host, as a
    redirect between them keeps the host. Without a URL (every host) the line is apt's Acquire::http::Proxy.
    """
    if not isinstance(url, str) or not isinstance(proxy, str):
        raise AptProxyError(f"apt_proxy_lines: {url_name} and {proxy_name} must be strings")
    proxy = proxy.strip()
    shown = "DIRECT"
    if proxy and proxy != "DIRECT":
        shown = _shown(*_proxy_parts(proxy, proxy_name))
    url = url.strip()
    if not url:
        return [f'Acquire::http::Proxy "{shown}";'] if proxy else []
    source = urlsplit(url)
    if source.scheme not in SOURCE_SCHEMES:
        raise AptProxyError(
            f"{url_name} {url!r} is not an http://, https:// or file:// URL; apt's other methods are not supported."
        )
    if not proxy or source.scheme == "file":
        return []
    if not source.hostname:
        raise AptProxyError(f"{url_name} {url!r} has no host name.")
    if not _HOST.match(source.hostname):
        raise AptProxyError(f"{url_name} {url!r}: its host name is not one apt.conf can take.")
    # Credentials never go to this world-readable file: apt_proxy_auth gives them for /etc/apt/auth.conf.d/.
    return [f'Acquire::{method}::Proxy::{source.hostname} "{shown}";' for method in ("http", "https")]


def apt_proxy_auth(proxy: str, proxy_name: str = "proxy") -> list[str]:
    """The apt_auth.conf(5) lines (machine, login, password) for a proxy URL with user:password@; [] without.

    apt reads proxy credentials from /etc/apt/auth.conf.d/*.conf, a file only root reads (mode 0600), so they stay
    out of apt.conf.d (world-readable) and out of diffs. The machine names the proxy's scheme (apt matches an entry
    without one only for https) and its port when the URL gives one.
    """
    if not isinstance(proxy, str):
        raise AptProxyError(f"apt_proxy_auth: {proxy_name} must be a string")
    proxy = proxy.strip()
    if not proxy or proxy == "DIRECT":
        return []
    scheme, host, port = _proxy_parts(proxy, proxy_name)
    target = urlsplit(proxy)
    if target.username is None and target.password is None:
        return []
    login, password = unquote(target.username or ""), unquote(target.password or "")
    if not login or any(c.isspace() or ord(c) < 0x20 or ord(c) == 0x7F for c in login + password):
        raise AptProxyError(
            f"{proxy_name}: the proxy's user name is empty or its user name or password holds white space or a "
            "control character, which apt's auth.conf cannot take; use a proxy account without them."
        )
    return [f"machine {_shown(scheme, host, port)}", f"login {login}", f"password {password}"]


def apt_proxy_redact(proxy: str) -> str:
    """The proxy URL with its password (or, without one, its user name) replaced by ***, for messages."""
    if not isinstance(proxy, str) or "@" not in proxy:
        return proxy
    scheme, _sep, rest = proxy.strip().partition("://")
    userinfo, _at, hostpart = rest.rpartition("@")
    user = userinfo.split(":", 1)[0] if ":" in userinfo else ""
    return f"{scheme}://{user}:***@{hostpart}" if _sep else "***@" + hostpart
