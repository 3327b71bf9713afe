# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private to k8sgpu.nvidia: the one redaction of secrets in configuration that modules return or show in a diff.

Not a public API; modules of this collection only (docker_daemon_config for daemon.json, container_runtime_config
and container_toolkit_config for containerd/CRI-O/toolkit TOML). The files keep the real values; what the module
returns (results, diffs, hence logs at any verbosity) gets these copies.

What counts as a secret, in JSON values (redact_config) and TOML text (redact_toml) alike:
- the value of a key named like a secret (is_secret_key: token, secret, password, passphrase, credential, api-key,
  private-key, access-key, pwd, cookie, authorization, a key that is or ends in ``auth``/``auths``/``pass``/``sig``/``signature``),
  whole, or leaf by leaf for lists and objects - so containerd's ``registry.configs."<host>".auth`` table (username,
  password, auth, identitytoken) is redacted whole;
- in any string: an ``Authorization:`` (or ``Proxy-Authorization:``) header's value, the credentials after an HTTP
  authentication scheme (``Basic ...``, ``Bearer ...``), the userinfo of a URL (``https://user:pw@host`` -> ``https://********@host``), the values of query
  parameters named like secrets (``?token=``, ``?sig=``, ``X-Amz-Signature=``, ``X-Amz-Credential=``,
  ``X-Goog-Signature=``), and the value of a ``name=value`` string whose name is a secret's
  (``labels: ["api_key=..."]``, ``--password=...``);
- under keys naming URLs (proxy, mirror, registry, url, address, endpoint, host), a URL without a scheme
  (``user:pass@proxy:3128``).
"""
from __future__ import annotations

import re
from typing import Any

REDACTED = "********"
# Key names whose whole value is a secret.
_SECRET_KEY = re.compile(
    r"token|secret|passw(?:or)?d|passphrase|credential|api[-_]?key|private[-_]?key|access[-_]?key|pwd|"
    r"cookie|authori[sz]ation$|(?:^|[-_.])(?:auths?|pass|sig|signature)$",
    re.IGNORECASE)
# Keys whose values may be URLs written without a scheme (user:pass@proxy:3128), as dockerd accepts for proxies.
_URL_KEY = re.compile(r"proxy|mirror|registr|url|address|endpoint|host", re.IGNORECASE)
_URL = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<authority>[^/?#\s\"']*)(?P<rest>[^\s\"']*)")
_BARE_AUTHORITY = re.compile(r"^(?P<authority>[^/?#\s]*@[^/?#\s]*)(?P<rest>.*)$", re.DOTALL)
# HTTP credentials in any string: an Authorization (or Proxy-Authorization) header written as text, and the
# credentials of an authentication scheme (Basic, Bearer, ...) wherever they appear.
_HEADER = re.compile(r"(?P<name>\b(?:proxy-)?authori[sz]ation\s*[:=]\s*)(?P<value>\S.*)", re.IGNORECASE | re.DOTALL)
_SCHEME_CREDENTIALS = re.compile(r"(?P<scheme>\b(?:Basic|Bearer|Digest|Negotiate|Token|AWS4-HMAC-SHA256)\s+)"
                                 r"(?P<value>[A-Za-z0-9._~+/=,:-]{6,})")
# name=value (a label, an environment entry, a --flag=value argument).
_ASSIGNMENT = re.compile(r"^(?P<name>-{0,2}[A-Za-z_][A-Za-z0-9_.\-/]*)=(?P<value>.+)$", re.DOTALL)


def is_secret_key(key: Any) -> bool:
    """Whether a key (or a query parameter's, a label's, a flag's name) names a secret."""
    return isinstance(key, str) and bool(_SECRET_KEY.search(key.strip("\"' -")))


def _redact_query(rest: str) -> str:
    """A URL's path, query and fragment, the values of query parameters named like secrets replaced."""
    path, sep, query = rest.partition("?")
    if not sep:
        return rest
    query, hsep, fragment = query.partition("#")
    params = []
    for param in query.split("&"):
        name, eq, value = param.partition("=")
        params.append(f"{name}={REDACTED}" if eq and value and is_secret_key(name) else param)
    return f"{path}?{'&'.join(params)}{hsep}{fragment}"


def _redact_authority(authority: str) -> str:
    userinfo, at, host = authority.rpartition("@")
    return f"{REDACTED}@{host}" if at and userinfo else authority


def redact_string(value: str, bare_url: bool = False) -> str:
    """value with the userinfo of every URL in it replaced by ********, host and path kept, query parameters named
    like secrets redacted, and the value of a ``name=value`` string whose name is a secret's redacted. With
    bare_url, value may also be a URL without a scheme."""
    assignment = _ASSIGNMENT.match(value)
    if assignment and is_secret_key(assignment["name"]):
        return f"{assignment['name']}={REDACTED}"
    value = _HEADER.sub(lambda m: m["name"] + REDACTED, value)
    value = _SCHEME_CREDENTIALS.sub(lambda m: m["scheme"] + REDACTED, value)
    redacted = _URL.sub(lambda m: m["scheme"] + _redact_authority(m["authority"]) + _redact_query(m["rest"]), value)
    if bare_url and redacted == value:
        match = _BARE_AUTHORITY.match(value)
        if match:
            return _redact_authority(match["authority"]) + _redact_query(match["rest"])
    return redacted


def redact_config(value: Any, key: Any = None) -> Any:
    """A copy of a JSON-like value safe to print: the values of keys named like secrets replaced by ******** whole
    (strings) or leaf by leaf (lists and objects), and every string redacted as redact_string says."""
    if is_secret_key(key):
        return _redact_all(value)
    if isinstance(value, dict):
        return {k: redact_config(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [redact_config(v, key) for v in value]
    if isinstance(value, str):
        return redact_string(value, bare_url=isinstance(key, str) and bool(_URL_KEY.search(key)))
    return value


def _redact_all(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _redact_all(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_redact_all(v) for v in value]
    if isinstance(value, (str, int, float)) and not isinstance(value, bool) and value != "":
        return REDACTED
    return value


def secret_strings(value: Any, key: Any = None, secret: bool = False) -> set[str]:
    """The strings of value that redact_config changes: a module hides them in its invocation too
    (module.no_log_values)."""
    secret = secret or is_secret_key(key)
    if isinstance(value, dict):
        return set().union(*(secret_strings(v, k, secret) for k, v in value.items()))
    if isinstance(value, list):
        return set().union(*(secret_strings(v, key, secret) for v in value))
    if isinstance(value, str) and value and (secret or redact_config(value, key) != value):
        return {value}
    return set()


# TOML: [table] / [[array]] headers, key = value lines, quoted strings.
_TOML_HEADER = re.compile(r"^\s*\[\[?\s*(?P<name>[^\]]+?)\s*\]\]?\s*(#.*)?$")
_TOML_KEY_VALUE = re.compile(r"^(?P<indent>\s*)(?P<key>(?:\"[^\"]*\"|'[^']*'|[A-Za-z0-9_.\-\s])+?)\s*=\s*(?P<value>.*)$")
_TOML_STRING = re.compile(r"\"(?:[^\"\\]|\\.)*\"|'[^']*'")
_TOML_INLINE_KEY = re.compile(r"(?P<key>\"[^\"]*\"|'[^']*'|[A-Za-z0-9_\-]+)\s*=\s*(?P<value>\"(?:[^\"\\]|\\.)*\"|'[^']*'|\{)")


def _toml_key_parts(key: str) -> list[str]:
    return [p.strip().strip("\"'") for p in re.findall(r"\"[^\"]*\"|'[^']*'|[^.]+", key)]


def _redact_strings(text: str) -> str:
    """Every quoted string of a TOML value redacted as redact_string says (URL userinfo, signed query, name=value)."""
    def one(match: re.Match) -> str:
        quote, inner = match.group(0)[0], match.group(0)[1:-1]
        return quote + redact_string(inner) + quote
    return _TOML_STRING.sub(one, text)


def _redact_value(value: str) -> str:
    """A whole TOML value replaced: each string in it (or the scalar itself) becomes ********, comments kept."""
    if _TOML_STRING.search(value):
        return _TOML_STRING.sub(lambda m: m.group(0)[0] + REDACTED + m.group(0)[0], value)
    scalar, hash_, comment = value.partition("#")
    return f'"{REDACTED}"' + (f" #{comment}" if hash_ else "")


def _redact_inline(value: str) -> str:
    """An inline table's or a line's own key = value pairs: those of secret keys redacted, and every key's value
    after a secret key that opens an inline table ({...})."""
    out, pos, secret_from = [], 0, None
    for match in _TOML_INLINE_KEY.finditer(value):
        if secret_from is not None:
            break
        key = match["key"].strip("\"'")
        if is_secret_key(key):
            out.append(value[pos:match.start("value")])
            if match["value"] == "{":
                secret_from = match.start("value")
                pos = secret_from
                break
            out.append(_redact_value(match["value"]))
            pos = match.end("value")
    out.append(_redact_value(value[pos:]) if secret_from is not None else value[pos:])
    return "".join(out)


def redact_toml(text: str) -> str:
    """TOML text (containerd's config.toml and drop-ins, CRI-O's crio.conf, the toolkit's config.toml) safe to show.

    Line by line: inside a table whose name has a part named like a secret (containerd's
    ``[plugins."io.containerd.grpc.v1.cri".registry.configs."registry.example".auth]``) every value is redacted; a
    ``key = value`` whose key (its last dotted part, or any part) names a secret is redacted; inline tables are
    redacted key by key; and every string of every other value as redact_string says (URL userinfo, secret query
    parameters, secret name=value strings). A multi-line string (triple quotes) under a secret key is redacted to
    its end."""
    out = []
    secret_table = False
    in_multiline = None  # the closing quote of a secret multi-line string being skipped
    for line in text.splitlines(keepends=True):
        body = line.rstrip("\r\n")
        end = line[len(body):]
        if in_multiline:
            if in_multiline in body:
                in_multiline = None
                out.append(REDACTED + _multiline_close(body) + end)
            else:
                out.append(REDACTED + end)
            continue
        header = _TOML_HEADER.match(body)
        if header:
            secret_table = any(is_secret_key(p) for p in _toml_key_parts(header["name"]))
            out.append(line)
            continue
        kv = _TOML_KEY_VALUE.match(body)
        if kv and not body.lstrip().startswith("#"):
            value = kv["value"]
            secret = secret_table or any(is_secret_key(p) for p in _toml_key_parts(kv["key"]))
            if secret:
                opening = value.lstrip()[:3]
                if opening in ('"""', "'''") and value.count(opening) < 2:
                    in_multiline = opening
                    out.append(f"{kv['indent']}{kv['key']} = {opening}{REDACTED}{end}")
                    continue
                out.append(f"{kv['indent']}{kv['key']} = {_redact_value(value)}{end}")
                continue
            out.append(f"{kv['indent']}{kv['key']} = {_redact_strings(_redact_inline(value))}{end}")
            continue
        out.append(_redact_strings(body) + end)
    return "".join(out)


def _multiline_close(body: str) -> str:
    """What follows the closing triple quote of a redacted multi-line string (the quote itself, a comment)."""
    for quote in ('"""', "'''"):
        if quote in body:
            return body[body.index(quote):]
    return ""


def toml_holds_secret(text: str) -> bool:
    """Whether TOML text holds something redact_toml hides (a new file holding one is made 0600)."""
    return redact_toml(text) != text
