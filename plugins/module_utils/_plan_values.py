# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Role variables as the host roles' plan filters (driver_plan, container_toolkit_plan) read them: Ansible hands
them over templated, so a boolean may arrive as a string and an unset value as None."""
from __future__ import annotations

from typing import Any


def as_bool(value: Any) -> bool:
    """A role variable as a boolean: the strings Ansible's own conversion takes for true, else Python's truth."""
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on", "y", "t")
    return bool(value)


def as_text(value: Any) -> str:
    """A role variable as text, None as the empty string."""
    return "" if value is None else str(value)
