"""One run of the driver role on a lab GPU host of a test's own (tests/lab/test_driver_*.py): the process, the role's
driver_result (tests/lab/playbooks/driver.yml writes it on the controller), the recap and every task's result, read
from Ansible's json callback; and the host's boot marks, which tell a reboot (or a container restart) apart."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Callable

PLAY = "tests/lab/playbooks/driver.yml"
JSON_CALLBACK = {"ANSIBLE_LOAD_CALLBACK_PLUGINS": "1", "ANSIBLE_STDOUT_CALLBACK": "json"}


class RoleRun:
    def __init__(self, cp: subprocess.CompletedProcess, result: dict | None, host: str):
        self.cp, self.result, self.host = cp, result, host
        self.out = json.loads(cp.stdout) if cp.stdout.strip().startswith("{") else {}
        self.tasks = [(t["task"]["name"], t["hosts"].get(host, {}))
                      for play in self.out.get("plays", []) for t in play["tasks"]]

    @property
    def stats(self) -> dict:
        return self.out.get("stats", {}).get(self.host, {})

    def task(self, name: str) -> list[dict]:
        """The results of the tasks so named that ran (kernels.yml is imported twice: load.yml's, main.yml's)."""
        return [r for n, r in self.tasks if n.endswith(name) and not r.get("skipped")]

    def changed_tasks(self) -> list[str]:
        return [n for n, r in self.tasks if r.get("changed")]

    def failures(self) -> list[str]:
        return [r.get("msg", "") for _n, r in self.tasks if r.get("failed")]

    def text(self) -> str:
        return self.cp.stdout + self.cp.stderr

    def tail(self) -> str:
        return f"rc {self.cp.returncode}\n{self.cp.stdout[-4000:]}\n{self.cp.stderr[-2000:]}"


def role_run(run: Callable, host: str, inventory: Path, tmp_path: Path, name: str, extra: dict | None = None,
             args: tuple = (), timeout: int = 1800) -> RoleRun:
    """tests/lab/playbooks/driver.yml on ``host`` alone (``run``: the lab conftest's), with ``extra`` as -e."""
    out = tmp_path / f"{name}.json"
    extra_file = tmp_path / f"{name}-vars.json"
    extra_file.write_text(json.dumps({"node": host, "out": str(out), **(extra or {})}))
    cp = run(["ansible-playbook", "-i", "inventories/lab", "-i", str(inventory), "-l", host, PLAY,
              "-e", f"@{extra_file}", *args], timeout=timeout, env_extra=JSON_CALLBACK)
    return RoleRun(cp, json.loads(out.read_text()) if out.exists() else None, host)


def boot_marks(host: str) -> tuple[str, str]:
    """PID 1's start time (the lab inventory's driver_reboot_boot_time_command) and Docker's restart count."""
    started = subprocess.run(["docker", "exec", host, "cut", "-d ", "-f22", "/proc/1/stat"],
                             capture_output=True, text=True, check=True).stdout.strip()
    restarts = subprocess.run(["docker", "inspect", "-f", "{{.RestartCount}} {{.State.StartedAt}}", host],
                              capture_output=True, text=True, check=True).stdout.strip()
    return started, restarts
