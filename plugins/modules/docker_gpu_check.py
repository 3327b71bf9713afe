#!/usr/bin/python
# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: docker_gpu_check
short_description: Run nvidia-smi -L in a Docker container with every GPU, from an image the host already has
version_added: 1.0.0
description:
  - Runs C(docker run --rm --pull never --gpus all <image> nvidia-smi -L), the NVIDIA container toolkit guide's
    check that Docker gives containers the GPUs, and returns the GPUs the container saw.
  - Pulls nothing unless O(pull=true). The image is O(image) when set; when it is empty, O(default_image), but only
    where that is already a local image of the host's Docker (C(docker image inspect)). Nothing runs when there is no
    usable image; RV(reason) then says why, so that the caller can name what to set.
  - The module does not fail when the check does not pass; RV(passed) and RV(reason) say what happened, for the
    caller to report with its own variables' names. It fails only on bad input or when C(docker) is missing.
  - Why not M(community.docker.docker_container) (with C(device_requests), C(pull=never), C(detach=false)) - it needs the
    Python C(requests) library on every GPU host, which minimal and air-gapped hosts lack; it creates a named container
    and reports a change on every run, where this is a read-only check; and it does not tell an image that is not
    local from one that failed to run, which this check must name.
author:
  - k8sgpu.nvidia maintainers (@k8sgpu)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - k8sgpu.nvidia.attributes
attributes:
  check_mode:
    support: full
    details: Chooses the image (C(docker image inspect) only) and returns the command; runs no container.
  diff_mode:
    support: none
options:
  image:
    description:
      - The image to run, for example a site registry's C(registry.site.example/cuda-base:12.4). Any image with a
        C(/bin/sh) and the C(ld.so) of glibc will do; the NVIDIA runtime mounts C(nvidia-smi) and the driver's libraries.
      - Empty uses O(default_image) where it is a local image.
    type: str
    default: ""
  default_image:
    description: The image used when O(image) is empty, only where it is already a local image (or O(pull=true)).
    type: str
    default: ubuntu:24.04
  pull:
    description:
      - Let Docker pull the image when it is not local (C(docker run --pull missing)). With V(false), the default,
        C(--pull never), and an image that is not local is not run (RV(reason) V(image_not_local)).
    type: bool
    default: false
  docker:
    description: Path of the C(docker) client. Default C(docker) found on the PATH.
    type: path
  volume_mount:
    description:
      - Also ask for every GPU with C(--volume /dev/null:/var/run/nvidia-container-devices/all:ro), the request the
        NVIDIA runtime accepts from an unprivileged container when its C(config.toml) sets
        C(accept-nvidia-visible-devices-as-volume-mounts = true) and ignores C(NVIDIA_VISIBLE_DEVICES) (which
        C(--gpus all) sets) there, as the M(k8sgpu.nvidia.container_toolkit) role does for GPU isolation.
    type: bool
    default: false
notes:
  - C(docker run --pull) needs Docker 20.10 or later (Debian 12 ships 20.10).
"""

EXAMPLES = r"""
- name: Run nvidia-smi in a container with every GPU, from the site's image
  k8sgpu.nvidia.docker_gpu_check:
    image: registry.site.example/cuda-base:12.4
    pull: true
  register: gpu_check

- name: Fail when it did not pass
  ansible.builtin.assert:
    that: gpu_check.passed
    fail_msg: "{{ inventory_hostname }}: {{ gpu_check.msg }}"
"""

RETURN = r"""
passed:
  description: Whether the container ran and listed at least one GPU.
  returned: always
  type: bool
  sample: true
reason:
  description:
    - Empty when RV(passed); else V(no_image) (O(image) empty and O(default_image) not local, pulls not allowed),
      V(image_not_local) (O(image) not local, pulls not allowed), V(run_failed) (C(docker run) failed) or
      V(no_gpus) (it ran but listed no GPU); V(check_mode) in check mode.
  returned: always
  type: str
  sample: no_image
msg:
  description: What happened, in words.
  returned: always
  type: str
  sample: "ubuntu:24.04 is not a local image and pulls are not allowed."
image:
  description: The image run (or, in check mode, to be run); empty when there was none to run.
  returned: always
  type: str
  sample: ubuntu:24.04
image_local:
  description: Whether the image was a local image before the task.
  returned: always
  type: bool
  sample: true
cmd:
  description: The docker command run (or to be run); empty when nothing was to run.
  returned: always
  type: list
  elements: str
  sample: [docker, run, --rm, --pull, never, --gpus, all, "ubuntu:24.04", nvidia-smi, -L]
exit_status:
  description: Exit status of C(docker run) (not C(rc), which would make Ansible count the task as failed).
  returned: when it ran
  type: int
  sample: 0
stdout:
  description: Its standard output.
  returned: when it ran
  type: str
  sample: "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-5c1a...)"
stderr:
  description: Its standard error.
  returned: when it ran
  type: str
  sample: ""
gpus:
  description: The C(GPU <n>:) lines the container printed.
  returned: always
  type: list
  elements: str
  sample: ["GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-5c1a...)"]
"""

import re
from collections.abc import Callable

from ansible.module_utils.basic import AnsibleModule

_GPU_LINE = re.compile(r"^GPU \d+: ")


class DockerError(RuntimeError):
    """docker itself failed (no daemon, no permission); the message has its words."""


def is_local(run_command: Callable, docker: str, image: str) -> bool:
    """Whether image is a local image of the Docker daemon (docker image inspect)."""
    rc, _out, err = run_command([docker, "image", "inspect", "--format", "{{.Id}}", image])
    if rc == 0:
        return True
    if "no such image" in err.lower() or "no such object" in err.lower():
        return False
    raise DockerError(f"docker image inspect {image} failed (exit {rc}): {err.strip() or 'no output'}")


def choose_image(image: str, default_image: str, pull: bool, local: Callable[[str], bool]) -> tuple[str, bool, str]:
    """(image to run or "", whether it is local, reason when there is none)."""
    wanted = image or default_image
    found = local(wanted)
    if found or pull:
        return wanted, found, ""
    return "", False, "image_not_local" if image else "no_image"


def command(docker: str, image: str, pull: bool, volume_mount: bool = False) -> list[str]:
    # The NVIDIA runtime's request for every GPU that it accepts from an unprivileged container when it ignores
    # NVIDIA_VISIBLE_DEVICES (which --gpus all sets) there: /dev/null mounted at /var/run/nvidia-container-devices/all.
    mount = ["--volume", "/dev/null:/var/run/nvidia-container-devices/all:ro"] if volume_mount else []
    return [docker, "run", "--rm", "--pull", "missing" if pull else "never", "--gpus", "all", *mount, image,
            "nvidia-smi", "-L"]


def gpu_lines(stdout: str) -> list[str]:
    return [line.strip() for line in stdout.splitlines() if _GPU_LINE.match(line.strip())]


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            image=dict(type="str", default=""),
            default_image=dict(type="str", default="ubuntu:24.04"),
            pull=dict(type="bool", default=False),
            docker=dict(type="path"),
            volume_mount=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )
    p = module.params
    image, default_image = (p["image"] or "").strip(), (p["default_image"] or "").strip()
    if not image and not default_image:
        module.fail_json(msg="image and default_image are both empty: name an image to run.")
    docker = p["docker"] or module.get_bin_path("docker")
    if not docker:
        module.fail_json(msg="docker was not found on the PATH; set docker to the client's path.")

    try:
        chosen, local, reason = choose_image(
            image, default_image, p["pull"], lambda name: is_local(module.run_command, docker, name)
        )
    except DockerError as exc:
        module.fail_json(msg=str(exc))
    result = dict(changed=False, passed=False, reason=reason, image=chosen, image_local=local, cmd=[], gpus=[])
    if reason:
        wanted = image or default_image
        result["msg"] = f"{wanted} is not a local image of this host's Docker and pulls are not allowed; nothing was run."
        module.exit_json(**result)

    result["cmd"] = command(docker, chosen, p["pull"], p["volume_mount"])
    if module.check_mode:
        result.update(reason="check_mode", msg="Check mode: nothing was run.")
        module.exit_json(**result)
    rc, out, err = module.run_command(result["cmd"])
    result.update(exit_status=rc, stdout=out, stderr=err, gpus=gpu_lines(out))
    if rc != 0:
        detail = (err or out).strip().splitlines()
        result.update(reason="run_failed", msg=f"docker run failed (exit {rc}): {' '.join(detail[-3:]) or 'no output'}")
    elif not result["gpus"]:
        result.update(reason="no_gpus", msg=f"The container listed no GPU: {out.strip()[-300:] or 'no output'}")
    else:
        result.update(passed=True, msg=f"{len(result['gpus'])} GPU(s) in a container from {chosen}.")
    module.exit_json(**result)


if __name__ == "__main__":
    main()
