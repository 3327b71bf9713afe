"""Reading ansible-playbook's output; shared by the lab tests, the molecule verifiers and bench/."""
from __future__ import annotations

import re


def recap(out: str) -> dict[str, dict[str, int]]:
    """PLAY RECAP of ansible-playbook output: host -> {ok, changed, failed, ...}."""
    return {host: {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", stats)}
            for host, stats in re.findall(r"^(\S+)\s+:\s+(ok=.*)$", out, re.M)}
