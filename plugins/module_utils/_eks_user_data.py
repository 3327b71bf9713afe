# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private to k8sgpu.nvidia: the user data that isolates GPUs on the EKS nodes playbooks/eks.yml makes.

Not a public API. The EKS AL2023 NVIDIA AMIs ship the NVIDIA Container Toolkit with NVIDIA's defaults:
``accept-nvidia-visible-devices-envvar-when-unprivileged = true`` (any container whose image or spec sets
``NVIDIA_VISIBLE_DEVICES=all`` gets every GPU of the node, allocated or not) and
``accept-nvidia-visible-devices-as-volume-mounts = false`` (the device plugin's ``volume-mounts`` list strategy,
which the collection deploys, is not honoured). The collection does not manage those nodes' files, so the settings
go in the nodes' user data, the same two keys the container_toolkit role sets on bare-metal hosts, set the same way
(``nvidia-ctk config --in-place --set``, the command line of module_utils/_nvidia_ctk.py):

- AL2023 (nodeadm): a MIME multi-part document with one ``text/x-shellscript`` part. cloud-init runs it before
  nodeadm's run phase starts the kubelet; EKS (managed nodegroups) and Karpenter merge their own NodeConfig part
  into it. If nvidia-ctk is missing or the file does not hold the settings afterwards, the script masks the
  kubelet (``systemctl mask --runtime``): the node never joins, rather than joining with every GPU open.
- Bottlerocket: TOML settings (``settings.nvidia-container-runtime``), whose defaults are already these values;
  written so that they are explicit.

The document is byte-for-byte the same on every call (a fixed MIME boundary), so a launch template or an
EC2NodeClass made from it does not change between runs.
"""
from __future__ import annotations

import shlex

from ansible_collections.k8sgpu.nvidia.plugins.module_utils._nvidia_ctk import (
    TOOLKIT_CONFIG_PATH,
    config_command,
    config_value,
)

ENVVAR_KEY = "accept-nvidia-visible-devices-envvar-when-unprivileged"
VOLUME_MOUNTS_KEY = "accept-nvidia-visible-devices-as-volume-mounts"
# The toolkit settings under which the device plugin's list strategy is the only way to a GPU for an unprivileged
# container (the container_toolkit role's container_toolkit_isolate_gpus: true).
ISOLATION_SETTINGS = {VOLUME_MOUNTS_KEY: True, ENVVAR_KEY: False}
# The device plugin's list strategy those nodes accept: the one playbooks/eks.yml deploys.
DEVICE_LIST_STRATEGY = ("volume-mounts",)
BOUNDARY = "==k8sgpu-nvidia-gpu-isolation=="
# EKS AMI types (botocore's AMITypes) with the NVIDIA driver and toolkit, by the user data format they take.
NVIDIA_AMI_TYPES = {
    "AL2023_x86_64_NVIDIA": "al2023",
    "AL2023_ARM_64_NVIDIA": "al2023",
    "BOTTLEROCKET_x86_64_NVIDIA": "bottlerocket",
    "BOTTLEROCKET_ARM_64_NVIDIA": "bottlerocket",
}
# Karpenter's EC2NodeClass amiSelectorTerms alias families (the NVIDIA variant is chosen per instance type).
KARPENTER_FAMILIES = ("al2023", "bottlerocket")
LOG_PREFIX = "k8sgpu.nvidia GPU isolation"


class UserDataError(ValueError):
    """No isolating user data exists for the AMI asked for; the message says which and what to use."""


def family(ami: str) -> str:
    """``al2023`` or ``bottlerocket`` from an EKS AMI type (AL2023_x86_64_NVIDIA) or a Karpenter alias (al2023@latest).

    Anything else (AL2, a non-NVIDIA AMI type, CUSTOM, Windows) is refused: its user data format or toolkit is not
    one this module knows to isolate, and a GPU node without isolation is what this code exists to prevent."""
    if not isinstance(ami, str) or not ami:
        raise UserDataError(f"{ami!r} is neither an EKS AMI type nor a Karpenter AMI alias")
    if "@" in ami:
        name = ami.split("@", 1)[0]
        if name in KARPENTER_FAMILIES:
            return name
        raise UserDataError(f"Karpenter AMI alias {ami!r}: GPU isolation user data exists for "
                            f"{' and '.join(f'{f}@<version>' for f in KARPENTER_FAMILIES)} only (AL2 reached its "
                            "end of support; its nodes are not isolated by the collection)")
    if ami in NVIDIA_AMI_TYPES:
        return NVIDIA_AMI_TYPES[ami]
    raise UserDataError(f"AMI type {ami!r}: a GPU pool needs one of {', '.join(NVIDIA_AMI_TYPES)} (the NVIDIA driver "
                        "and container toolkit, whose GPU isolation the collection sets in the user data)")


def isolation_command(nvidia_ctk: str = "nvidia-ctk", config_path: str = TOOLKIT_CONFIG_PATH) -> str:
    """The shell command that sets ISOLATION_SETTINGS in config_path (the container_toolkit_config module's)."""
    return shlex.join(config_command(nvidia_ctk, config_path, ISOLATION_SETTINGS))


def expected_lines() -> list[str]:
    """The lines nvidia-ctk writes for ISOLATION_SETTINGS (top-level keys, ``key = value``)."""
    return [f"{key} = {config_value(ISOLATION_SETTINGS[key])}" for key in sorted(ISOLATION_SETTINGS)]


def isolation_script(config_path: str = TOOLKIT_CONFIG_PATH) -> str:
    """The shell script of the AL2023 user data: set, check, or keep the kubelet from starting."""
    quoted = shlex.quote(config_path)
    checks = " && ".join(f"grep -qxF {shlex.quote(line)} {quoted}" for line in expected_lines())
    return "\n".join([
        "#!/bin/bash",
        "# k8sgpu.nvidia (playbooks/eks.yml): GPU isolation. Runs before nodeadm starts the kubelet. Sets the",
        "# NVIDIA Container Toolkit so that an unprivileged container gets GPUs only through the device plugin's",
        "# volume-mounts list strategy (NVIDIA_VISIBLE_DEVICES ignored); if that fails, the kubelet is masked and",
        "# the node never joins the cluster.",
        "set -u",
        "refuse() {",
        f"  echo \"{LOG_PREFIX}: $1; the kubelet is masked: this node does not join the cluster\" >&2",
        "  systemctl mask --runtime kubelet.service",
        "  exit 1",
        "}",
        "command -v nvidia-ctk >/dev/null || refuse 'nvidia-ctk not found (not an NVIDIA AMI?)'",
        f"{isolation_command(config_path=config_path)} || refuse {shlex.quote('nvidia-ctk config failed on ' + config_path)}",
        f"{checks} || refuse {shlex.quote(config_path + ' does not hold the isolation settings')}",
        f"echo {shlex.quote(LOG_PREFIX + ': set in ' + config_path)}",
        "",
    ])


def mime_user_data(script: str) -> str:
    """A MIME multi-part document (as nodeadm, EKS and Karpenter take it) with script as its one part."""
    # The line break before a boundary belongs to the boundary (RFC 2046): the part's body is the script as given.
    head = "\n".join([
        "MIME-Version: 1.0",
        f'Content-Type: multipart/mixed; boundary="{BOUNDARY}"',
        "",
        f"--{BOUNDARY}",
        'Content-Type: text/x-shellscript; charset="us-ascii"',
        "",
        "",
    ])
    return f"{head}{script.rstrip(chr(10))}\n\n--{BOUNDARY}--\n"


def bottlerocket_user_data() -> str:
    """Bottlerocket's TOML settings with the same two decisions (its names for the toolkit's keys)."""
    return "\n".join([
        "# k8sgpu.nvidia (playbooks/eks.yml): GPU isolation (Bottlerocket's defaults, made explicit)",
        "[settings.nvidia-container-runtime]",
        f"visible-devices-as-volume-mounts = {config_value(ISOLATION_SETTINGS[VOLUME_MOUNTS_KEY])}",
        f"visible-devices-envvar-when-unprivileged = {config_value(ISOLATION_SETTINGS[ENVVAR_KEY])}",
        "",
    ])


def gpu_user_data(ami: str) -> str:
    """The user data (text, not base64) that isolates GPUs on a node of ami (an EKS AMI type or Karpenter alias)."""
    if family(ami) == "bottlerocket":
        return bottlerocket_user_data()
    return mime_user_data(isolation_script())


def script_of(user_data: str) -> str:
    """The shell script part of mime_user_data's document (for the lab test, which runs it on a node)."""
    marker = f"--{BOUNDARY}\n"
    if marker not in user_data:
        raise UserDataError("the user data is not the collection's MIME document")
    part = user_data.split(marker, 1)[1].split(f"\n--{BOUNDARY}--", 1)[0]
    return part.split("\n\n", 1)[1]
