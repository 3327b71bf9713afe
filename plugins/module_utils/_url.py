# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private to k8sgpu.nvidia: the one syntax of the URLs the roles take (repository mirrors, chart repositories,
endpoints), for the role-input rules (module_utils/_role_inputs.py, kinds url, repo_url, helm_url) and the filter
apt_source_uri, which rebuilds the URL written into an apt source from these parsed parts.

The raw text is checked before it is parsed: urllib.parse.urlsplit drops newlines and tabs (bpo-43882), so a value
ending in "\\nTrusted: yes" would pass a check made on its parts and then add a field to a deb822 source."""
from __future__ import annotations

import ipaddress
import re

_FORBIDDEN = re.compile(r"[\x00-\x20\x7f\"'<>\\^`{|}]")
_URL_RE = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://(?P<authority>[^/?#]*)(?P<path>[^?#]*)"
                     r"(?:\?(?P<query>[^#]*))?(?:#(?P<fragment>.*))?", re.S)
_HOST_RE = re.compile(r"[A-Za-z0-9]([A-Za-z0-9_-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9_-]{0,61}[A-Za-z0-9])?)*\.?")
# RFC 3986 pchar and '/': unreserved, percent-encoded, sub-delims, ':' and '@'.
_PATH_RE = re.compile(r"(/([A-Za-z0-9._~!$&()*+,;=:@-]|%[0-9A-Fa-f]{2})*)*")


class URLError(ValueError):
    """A URL refused; the message never repeats the URL (it may hold a password)."""


def parse(value, schemes=("http", "https", "file"), userinfo=False):
    """(scheme, user information or None, host, port or None, path) of value, or URLError saying why not.

    value: scheme://[user[:password]@]host[:port][/path] with a scheme of schemes; file:// takes no host (file:///p).
    No whitespace or control character anywhere, no query or fragment; user information (a non-empty user) only with
    userinfo: True for any of schemes, "https" for https:// only (a repository's credentials, for apt's auth.conf)."""
    if not isinstance(value, str):
        raise URLError("give a string")
    if _FORBIDDEN.search(value):
        raise URLError("it holds whitespace, a newline, a control character, a quote or another character a URL "
                       "cannot hold unencoded")
    match = _URL_RE.fullmatch(value)
    if not match:
        raise URLError("give scheme://host[:port][/path]")
    scheme = match["scheme"].lower()
    if scheme not in schemes:
        raise URLError("the scheme must be %s" % ", ".join(schemes))
    if match["query"] is not None or match["fragment"] is not None:
        raise URLError("a query (?) or fragment (#) is not accepted")
    authority, path = match["authority"], match["path"]
    if not _PATH_RE.fullmatch(path):
        raise URLError("the path holds a character that must be percent-encoded")
    if scheme == "file":
        if authority not in ("", "localhost"):
            raise URLError("a file:// URL names no host (file:///path)")
        if not path.startswith("/") or ".." in path.split("/"):
            raise URLError("a file:// URL needs an absolute path without '..'")
        return scheme, None, "", None, path
    info, at, hostport = authority.rpartition("@")
    if at and not userinfo:
        raise URLError("user information (user:password@) is not accepted in this URL: give the credentials to apt "
                       "in /etc/apt/auth.conf.d (apt_auth.conf(5)) or to the client, not in the URL")
    if at and userinfo == "https" and scheme != "https":
        raise URLError("a user and password are sent only over https:// (over %s:// anyone on the way reads them): "
                       "use the repository's https:// URL" % scheme)
    if at and not info.partition(":")[0]:
        raise URLError("the user name before '@' is empty")
    host, port = hostport, None
    if hostport.startswith("["):
        host, _sep, rest = hostport[1:].partition("]")
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise URLError("the host is not an IPv6 address in brackets") from None
        host = "[%s]" % host
        if rest:
            if not rest.startswith(":"):
                raise URLError("give [IPv6]:port")
            port = rest[1:]
    elif ":" in hostport:
        host, port = hostport.rsplit(":", 1)
    if not host.startswith("[") and (not _HOST_RE.fullmatch(host) or len(host) > 253):
        raise URLError("the host is not a host name or an IP address")
    if port is not None:
        if not (port.isdigit() and 1 <= int(port) <= 65535):
            raise URLError("the port is not a number from 1 to 65535")
        port = int(port)
    return scheme, (info if at else None), host, port, path


def url_problem(value, schemes=("http", "https", "file"), userinfo=False):
    """Why value is refused as a URL of schemes (None when it is accepted); the reason never repeats the value."""
    try:
        parse(value, schemes, userinfo)
    except URLError as exc:
        return str(exc)
    return None


def rebuild(value, schemes=("http", "https", "file"), userinfo=False):
    """value written again from its parsed parts (the scheme in lower case, host, port and path as given), or
    URLError: what an apt source or a client gets is only ever a URL of this syntax."""
    scheme, _info, host, port, path = parse(value, schemes, userinfo)
    if scheme == "file":
        return "file://" + path
    return "%s://%s%s%s" % (scheme, host, "" if port is None else ":%d" % port, path)


def apt_auth_lines(value, schemes=("http", "https", "file")):
    """The apt_auth.conf(5) lines (machine, login, password) for a repository URL with user:password@, [] without;
    the machine is the URL without its credentials (scheme, host, port and path: apt matches the scheme and the path
    as a prefix). Credentials only over https (URLError otherwise); a user or password that decodes to whitespace
    or a control character is refused (auth.conf cannot hold it)."""
    _scheme, info, _host, _port, _path = parse(value, schemes, userinfo="https")
    if info is None:
        return []
    uri, _host, user, password = split_credentials(value)
    if any(c.isspace() or ord(c) < 0x20 or ord(c) == 0x7F for c in user + (password or "")):
        raise URLError("the user name or password decodes to whitespace or a control character, which apt's "
                       "auth.conf cannot hold; use an account without them")
    return ["machine %s" % uri, "login %s" % user, "password %s" % (password or "")]


def split_credentials(value):
    """(the URL without its user information, host, user, password) of a URL url_problem accepts with userinfo=True;
    user and password percent-decoded, None where the URL has none. For apt: the source gets the URL, and
    /etc/apt/auth.conf.d (mode 0600) the machine, login and password. URLError as url_problem's reason."""
    from urllib.parse import unquote
    scheme, info, host, port, path = parse(value, ("http", "https", "file"), userinfo=True)
    user = password = None
    if info is not None:
        user, sep, password = info.partition(":")
        user, password = unquote(user), (unquote(password) if sep else None)
    return rebuild(value, ("http", "https", "file"), userinfo=True), host, user, password
