# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The apt_key_file filter: the host path of a file:// repository key URL, only under a key directory (issue 46 item 6)."""
from __future__ import annotations

DOCUMENTATION = r"""
name: _apt_key_file
version_added: 2.0.0
short_description: >-
  Private to the roles container_toolkit and driver, not API: the path of a file:// repository key URL, refused
  outside the key directories
description:
  - Returns an empty string for an http:// or https:// key URL (fetched, not read from the host's disk).
  - For a file:// key URL returns its path when it lies under C(/etc/apt/keyrings), C(/usr/share/keyrings), a
    directory of O(dirs) (the site's C(container_toolkit_key_dirs)), or is exactly C(<repo_url>/gpgkey) of a
    file:// mirror (the layout of NVIDIA's repository). Anything else fails naming the host, the variable and the
    fix, before the role reads or writes anything (a key URL could otherwise make the role read any file of the
    host as root).
  - The path is checked as text, after the URL syntax check of module_utils/_url.py - absolute, no C(..), no C(.),
    no empty segment; the directories must be absolute and are compared segment by segment.
positional: _input
options:
  _input:
    description: The key URL.
    type: str
    required: true
  dirs:
    description: More key directories (absolute paths).
    type: list
    elements: str
    default: []
  repo_url:
    description: The repository URL; when file://, its C(gpgkey) is allowed.
    type: str
    default: ""
  host:
    description: The host, for the message.
    type: str
    default: ""
  name:
    description: The key URL's variable, for the message.
    type: str
    default: container_toolkit_repo_key_url
  dirs_name:
    description: The key directories' variable, for the message.
    type: str
    default: container_toolkit_key_dirs
"""

EXAMPLES = r"""
path: "{{ 'file:///etc/apt/keyrings/mirror.asc' | k8sgpu.nvidia._apt_key_file([], host=inventory_hostname) }}"
# /etc/apt/keyrings/mirror.asc; file:///etc/shadow fails naming the host, container_toolkit_repo_key_url and the fix
"""

RETURN = r"""
_value:
  description: The path to read on the host; empty for a key URL that is fetched.
  type: str
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.k8sgpu.nvidia.plugins.module_utils import _url

KEY_DIRS = ("/etc/apt/keyrings", "/usr/share/keyrings")


def _clean(path):
    parts = path.split("/")
    return path.startswith("/") and all(p not in ("", ".", "..") for p in parts[1:])


def apt_key_file(value, dirs=None, repo_url="", host="", name="container_toolkit_repo_key_url",
                 dirs_name="container_toolkit_key_dirs"):
    """The path of a file:// key URL under a key directory; '' for a key that is fetched; otherwise an error."""
    where = "%s: " % host if host else ""
    problem = _url.url_problem(value, schemes=("http", "https", "file"))
    if problem:
        raise AnsibleFilterError("%s%s is refused (value not shown): %s" % (where, name, problem))
    if not value.lower().startswith("file:"):
        return ""
    path = _url.rebuild(value)[len("file://"):]
    allowed = list(KEY_DIRS)
    for index, entry in enumerate(dirs or []):
        if not isinstance(entry, str) or not _clean(entry.rstrip("/") or "/"):
            raise AnsibleFilterError("%s%s[%d] is not an absolute directory without '.', '..' or '//'; give "
                                     "absolute paths such as /srv/keys" % (where, dirs_name, index))
        allowed.append(entry.rstrip("/") or "/")
    own = ""
    if isinstance(repo_url, str) and repo_url.lower().startswith("file:") and not _url.url_problem(repo_url):
        own = _url.rebuild(repo_url)[len("file://"):].rstrip("/") + "/gpgkey"
    if _clean(path) and (path == own or any(path.startswith(d.rstrip("/") + "/") for d in allowed)):
        return path
    raise AnsibleFilterError(
        "%s%s %s is a file:// key outside the key directories (%s, the file:// mirror's own gpgkey): the role "
        "would read it as root. Put the key in /etc/apt/keyrings or /usr/share/keyrings, add its directory to %s, "
        "or give the key's text in container_toolkit_repo_key." % (where, name, value, ", ".join(allowed), dirs_name))


class FilterModule:
    def filters(self) -> dict:
        return {"_apt_key_file": apt_key_file}
