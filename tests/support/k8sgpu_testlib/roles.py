"""The collection's roles as its tests see them: which are private, and the prefix of each one's variables."""
from __future__ import annotations

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[3]
PRIVATE_MARK = "Private to k8sgpu.nvidia"


def is_private(role: str) -> bool:
    """A role the collection's own roles include, refusing direct use: its main entry point's short_description
    says so (roles/k8s_apply)."""
    spec = ROOT / "roles" / role / "meta" / "argument_specs.yml"
    if not spec.is_file():
        return False
    main = (yaml.safe_load(spec.read_text()) or {}).get("argument_specs", {}).get("main", {})
    return str(main.get("short_description", "")).startswith(PRIVATE_MARK)


def variable_prefix(role: str) -> str:
    """The prefix of a role's inputs (defaults/main.yml): ``<role>_``; a private role's are internal, ``_<role>_``.
    Its internal variables (vars/main.yml) take one more underscore."""
    return f"_{role}_" if is_private(role) else f"{role}_"
