# Copyright: k8sgpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Private to k8sgpu.nvidia (module driver_kernels, filter driver_plan of the driver role).

The installed kernels of a host and the NVIDIA kernel module of each, read from a filesystem tree given by its root
(``/`` on a host, a test's own directory in the unit tests), and the decisions taken from them:

- ``headers_metapackages``: the headers metapackage of each installed kernel metapackage (Debian
  ``linux-image-amd64`` -> ``linux-headers-amd64``, ``-cloud-``, ``-rt-``; Ubuntu ``linux-generic`` and
  ``linux-generic-hwe-<release>`` -> ``linux-headers-generic[-hwe-<release>]``, ...), so that the next kernel the
  site's patching installs comes with its headers and DKMS builds the NVIDIA module for it;
- ``kernel_status``: for every installed kernel (``/lib/modules/<release>``, ``/boot/vmlinuz-<release>``) whether the
  NVIDIA module of the branch is built (DKMS's tree, or ``dkms status``'s lines) and installed (a ``nvidia*.ko*``
  under ``/lib/modules/<release>/``), whether its headers are there, and the fix when not;
- ``boot_kernel``: the kernel the host will boot - GRUB's ``next_entry`` (grub-reboot), else its saved entry where
  ``GRUB_DEFAULT=saved``, else an entry named in ``GRUB_DEFAULT``, else the newest installed image (GRUB's first
  entry, as update-grub sorts them); an entry that names no installed kernel leaves every installed image to check;
- ``reboot_decision``: a reboot is refused when a kernel the host may boot has no built module of the branch, naming
  the host, the kernel and the fix.
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

_MODULE_SUFFIXES = (".ko", ".ko.xz", ".ko.zst", ".ko.gz")
_IMAGE_PREFIXES = ("vmlinuz-", "vmlinux-")
_BRANCH = re.compile(r"^(?:\d+:)?(\d{3,})\.")

# Debian's kernel metapackages per architecture and flavour, and their headers metapackage.
DEBIAN_FLAVOURS = {"amd64": ("", "cloud-", "rt-"), "arm64": ("", "cloud-", "rt-")}
# Ubuntu's kernel metapackages linux-image-<flavour> (which linux-<flavour> depends on) and their headers metapackage
# linux-headers-<flavour>; the HWE ones carry the release (linux-image-generic-hwe-24.04).
UBUNTU_FLAVOURS = ("generic", "virtual", "nvidia", "aws", "azure", "gcp", "oracle")
UBUNTU_HWE_FLAVOURS = ("generic", "nvidia")


# --- headers metapackages ---------------------------------------------------------------------------------------

def kernel_metapackages(distribution: str, release: str, arch: str) -> dict[str, str]:
    """The kernel metapackages of the distribution (name -> its headers metapackage), to read from dpkg."""
    arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(arch, arch)
    if distribution == "Debian":
        return {f"linux-image-{f}{arch}": f"linux-headers-{f}{arch}" for f in DEBIAN_FLAVOURS.get(arch, ("",))}
    if distribution == "Ubuntu":
        flavours = list(UBUNTU_FLAVOURS) + ([f"{f}-hwe-{release}" for f in UBUNTU_HWE_FLAVOURS] if release else [])
        return {f"linux-image-{f}": f"linux-headers-{f}" for f in flavours}
    return {}


def headers_metapackages(distribution: str, release: str, arch: str, packages: Mapping | None) -> list[str]:
    """The headers metapackages of the installed kernel metapackages (``packages``: dpkg_packages' ``packages``)."""
    wanted: list[str] = []
    for image, headers in kernel_metapackages(distribution, release, arch).items():
        info = (packages or {}).get(image)
        if isinstance(info, Mapping) and info.get("installed") and headers not in wanted:
            wanted.append(headers)
    return wanted


# --- Debian version order (dpkg's verrevcmp, as update-grub sorts kernels) -------------------------------------

def _order(char: str) -> int:
    if char == "~":
        return -1
    if char.isdigit():
        return 0
    if char.isalpha():
        return ord(char)
    return ord(char) + 256


def _verrevcmp(a: str, b: str) -> int:
    i = j = 0
    while i < len(a) or j < len(b):
        first_diff = 0
        while (i < len(a) and not a[i].isdigit()) or (j < len(b) and not b[j].isdigit()):
            ac = _order(a[i]) if i < len(a) else 0
            bc = _order(b[j]) if j < len(b) else 0
            if ac != bc:
                return ac - bc
            i += 1
            j += 1
        while i < len(a) and a[i] == "0":
            i += 1
        while j < len(b) and b[j] == "0":
            j += 1
        while i < len(a) and a[i].isdigit() and j < len(b) and b[j].isdigit():
            if not first_diff:
                first_diff = ord(a[i]) - ord(b[j])
            i += 1
            j += 1
        if i < len(a) and a[i].isdigit():
            return 1
        if j < len(b) and b[j].isdigit():
            return -1
        if first_diff:
            return first_diff
    return 0


def compare_releases(a: str, b: str) -> int:
    """<0, 0, >0 as kernel release ``a`` sorts before, with, after ``b`` (dpkg --compare-versions)."""
    return _verrevcmp(a, b)


def newest(releases: Iterable[str]) -> str:
    best = ""
    for release in releases:
        if not best or compare_releases(release, best) > 0:
            best = release
    return best


# --- reading the tree -------------------------------------------------------------------------------------------

def _under(root: Path, path: str) -> Path:
    return root / path.lstrip("/")


def _resolve_in(root: Path, link: Path) -> Path:
    """A symlink's target read inside ``root`` (an absolute target is taken relative to the root)."""
    target = os.readlink(link)
    return _under(root, target) if target.startswith("/") else link.parent / target


def installed_kernels(root: Path) -> dict[str, dict]:
    """Every kernel of the tree: release -> {image (a /boot/vmlinuz-<release>), modules (a /lib/modules/<release>
    with the kernel's own modules), headers (its build link reaches a directory)}.

    A /lib/modules/<release> with neither the kernel's own modules nor headers (what DKMS left of a removed kernel) and
    no image is no installed kernel."""
    found: dict[str, dict] = {}
    boot = _under(root, "/boot")
    if boot.is_dir():
        for entry in boot.iterdir():
            for prefix in _IMAGE_PREFIXES:
                if entry.name.startswith(prefix) and entry.is_file() and not entry.name.endswith(".old"):
                    found.setdefault(entry.name[len(prefix):], {})["image"] = True
    modules_root = _under(root, "/lib/modules")
    if modules_root.is_dir():
        for entry in modules_root.iterdir():
            if not entry.is_dir() or entry.is_symlink():
                continue
            own = (entry / "modules.dep").is_file() or (entry / "kernel").is_dir()
            headers = headers_installed(root, entry.name)
            if own or headers or entry.name in found:
                info = found.setdefault(entry.name, {})
                info["modules"] = own
    for release, info in found.items():
        info.setdefault("image", False)
        info.setdefault("modules", False)
        info["headers"] = headers_installed(root, release)
    return dict(sorted(found.items(), key=lambda kv: _SortKey(kv[0])))


class _SortKey:
    def __init__(self, release: str):
        self.release = release

    def __lt__(self, other: "_SortKey") -> bool:
        return compare_releases(self.release, other.release) < 0


def headers_installed(root: Path, release: str) -> bool:
    """The kernel's headers are there: /lib/modules/<release>/build (a link into /usr/src) reaches a directory with a
    Makefile, else /usr/src/linux-headers-<release> has one."""
    build = _under(root, f"/lib/modules/{release}/build")
    try:
        target = _resolve_in(root, build) if build.is_symlink() else build
    except OSError:
        target = build
    for candidate in (target, _under(root, f"/usr/src/linux-headers-{release}")):
        if (candidate / "Makefile").is_file():
            return True
    return False


def driver_module_paths(kernel_dir: Path) -> list[str]:
    """The NVIDIA driver's module files (nvidia*.ko*) under a kernel's module directory (/lib/modules/<release>),
    full paths, less the kernel's own (kernel/drivers/); no link followed (build and source point into the headers).
    driver_reboot_check reads the same."""
    found = []
    if not kernel_dir.is_dir():
        return found
    for top, dirs, files in os.walk(kernel_dir):
        dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(top, d))]
        rel = os.path.relpath(top, kernel_dir)
        # The kernel's own modules (kernel/drivers/...: nvidia-wmi-ec-backlight, ...) are not the driver's; Ubuntu's
        # prebuilt driver modules are under kernel/nvidia-<branch>[srv]/, DKMS's under updates/dkms/.
        if (rel == "kernel" or rel.startswith("kernel/")) and not rel.startswith("kernel/nvidia"):
            continue
        found += [os.path.join(top, name) for name in files
                  if name.startswith("nvidia") and name.endswith(_MODULE_SUFFIXES)]
    return sorted(found)


def module_files(root: Path, release: str) -> list[str]:
    """driver_module_paths of /lib/modules/<release>/ under root, paths as on the host."""
    return ["/" + os.path.relpath(path, root) for path in driver_module_paths(_under(root, f"/lib/modules/{release}"))]


def dkms_tree(root: Path) -> list[dict]:
    """DKMS's own records of its NVIDIA modules (/var/lib/dkms/<module>/<version>/<release>/<arch>/), as
    ``dkms status`` derives them: state ``built`` with a module/ directory of .ko files, ``installed`` where the
    module's kernel-<release>-<arch> link points at that version; a version without a kernel is ``added``."""
    base = _under(root, "/var/lib/dkms")
    found: list[dict] = []
    if not base.is_dir():
        return found
    for module in sorted(p for p in base.iterdir() if p.is_dir() and p.name.startswith("nvidia")):
        installed_links = {}
        for link in module.iterdir():
            if link.name.startswith("kernel-") and link.is_symlink():
                installed_links[link.name] = os.readlink(link).rstrip("/")
        for version in sorted(p for p in module.iterdir() if p.is_dir() and not p.is_symlink()
                              and not p.name.startswith("kernel-")):
            kernels = [k for k in sorted(version.iterdir()) if k.is_dir() and k.name not in ("build", "source")
                       and not k.is_symlink()]
            any_kernel = False
            for kernel in kernels:
                for arch in sorted(a for a in kernel.iterdir() if a.is_dir()):
                    built = (arch / "module").is_dir() and any(
                        n.endswith(_MODULE_SUFFIXES) for n in os.listdir(arch / "module"))
                    if not built:
                        continue
                    any_kernel = True
                    link = installed_links.get(f"kernel-{kernel.name}-{arch.name}", "")
                    state = "installed" if link.endswith(f"{version.name}/{kernel.name}/{arch.name}") else "built"
                    found.append({"module": module.name, "version": version.name, "kernel": kernel.name,
                                  "arch": arch.name, "state": state})
            if not any_kernel:
                found.append({"module": module.name, "version": version.name, "kernel": "", "arch": "",
                              "state": "added"})
    return found


_DKMS_LINE = re.compile(
    r"^(?P<module>[^,/\s]+)(?:/|,\s*)(?P<version>[^,\s:]+)(?:,\s*(?P<kernel>[^,\s:]+)(?:,\s*(?P<arch>[^,\s:]+))?)?"
    r":\s*(?P<state>[A-Za-z-]+)")


def parse_dkms_status(text: str) -> list[dict]:
    """``dkms status``'s lines (DKMS 3: ``module/version, kernel, arch: state``; DKMS 2: ``module, version, kernel,
    arch: state``; a warning in parentheses may follow) of the NVIDIA modules."""
    found = []
    for line in (text or "").splitlines():
        match = _DKMS_LINE.match(line.strip())
        if not match or not match.group("module").startswith("nvidia"):
            continue
        found.append({"module": match.group("module"), "version": match.group("version"),
                      "kernel": match.group("kernel") or "", "arch": match.group("arch") or "",
                      "state": match.group("state").lower()})
    return found


def branch_of(version: Any) -> str:
    match = _BRANCH.match(str(version or ""))
    return match.group(1) if match else ""


def infer_branch(dkms: Sequence[Mapping], running: str) -> str:
    """The branch in use where none is given: that of the running kernel's DKMS module, else the newest version DKMS
    has; empty where DKMS has none (a prebuilt module then counts whatever its branch)."""
    mine = [d["version"] for d in dkms if d.get("kernel") == running and d.get("state") in ("built", "installed")]
    versions = mine or [d["version"] for d in dkms if d.get("version")]
    return branch_of(newest(versions)) if versions else ""


def kernel_status(root: Path, dkms: Sequence[Mapping], branch: str = "", running: str = "") -> dict[str, dict]:
    """Per installed kernel: image, headers, the NVIDIA module files, DKMS's entries, ``ok`` (a built and installed
    module of ``branch``), ``status`` (ok, not_built, no_headers) with ``detail`` and ``fix``.

    ``dkms``: DKMS's records (dkms_tree or parse_dkms_status). A kernel with module files and no DKMS entry at all
    has a prebuilt module (Ubuntu's linux-modules-nvidia-*): it counts, its branch unread."""
    result = {}
    for release, info in installed_kernels(root).items():
        files = module_files(root, release)
        entries = [dict(d) for d in dkms if d.get("kernel") == release]
        of_branch = [d for d in entries if not branch or branch_of(d.get("version")) == branch]
        built = [d for d in of_branch if d.get("state") in ("built", "installed")]
        others = sorted({branch_of(d.get("version")) for d in entries} - {branch, ""})
        ok = bool(files) and (bool(built) or not entries)
        what = f"branch {branch}" if branch else "the driver"
        if ok:
            which = f"{built[0]['module']} {built[0]['version']} " if built else "prebuilt "
            status, detail, fix = "ok", "module " + which + "installed", ""
        elif info["headers"]:
            status = "not_built"
            detail = (f"headers installed, no NVIDIA module of {what} built"
                      + (f" (DKMS has branch {', '.join(others)})" if others else "")
                      + (" (built, not installed)" if built and not files else ""))
            fix = f"dkms autoinstall -k {release}"
        else:
            status = "no_headers"
            detail = f"no headers, so DKMS cannot build the NVIDIA module of {what}"
            fix = f"apt-get install linux-headers-{release} && dkms autoinstall -k {release}"
        result[release] = {
            "image": info["image"], "headers": info["headers"], "running": release == running,
            "module_files": files, "dkms": entries, "ok": ok, "status": status, "detail": detail, "fix": fix,
        }
    return result


# --- the kernel the host will boot ------------------------------------------------------------------------------

def _kv_lines(text: str) -> dict[str, str]:
    values = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _sep, value = line.partition("=")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        values[key.strip()] = value
    return values


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def grub_default(root: Path) -> tuple[str, str]:
    """(the GRUB entry the next boot takes, where it was read); ("", ...) for GRUB's first entry."""
    env = _kv_lines(_read(_under(root, "/boot/grub/grubenv")))
    if env.get("next_entry"):
        return env["next_entry"], "GRUB's next_entry (grub-reboot) in /boot/grub/grubenv"
    default = ""
    for path in [_under(root, "/etc/default/grub")] + sorted(_under(root, "/etc/default/grub.d").glob("*.cfg")):
        value = _kv_lines(_read(path)).get("GRUB_DEFAULT")
        if value is not None:
            default = value
    if default == "saved":
        if env.get("saved_entry"):
            return env["saved_entry"], "GRUB's saved_entry in /boot/grub/grubenv (GRUB_DEFAULT=saved)"
        return "", "GRUB_DEFAULT=saved with no saved entry: GRUB's first entry"
    if default and default != "0":
        return default, "GRUB_DEFAULT in /etc/default/grub"
    return "", "GRUB's first entry"


def _named_kernel(entry: str, releases: Iterable[str]) -> str:
    """The installed kernel release an entry (title or id, ``>`` for a submenu) names: the longest that appears in it
    between non-version characters."""
    best = ""
    for release in releases:
        if re.search(rf"(?<![\w.+~]){re.escape(release)}(?![\w.+~])", entry) and len(release) > len(best):
            best = release
    return best


def boot_kernel(root: Path, kernels: Mapping[str, Mapping]) -> dict:
    """The kernel the host will boot: ``kernel`` (empty when undetermined), ``source``, ``candidates`` (the kernels a
    reboot may come up in: that one, or every installed image when the entry names none)."""
    images = [k for k, info in kernels.items() if info.get("image")]
    if not images:
        return {"kernel": "", "source": "no kernel image under /boot (a container, or a host booted from elsewhere): "
                                        "every installed kernel is checked", "candidates": list(kernels)}
    entry, source = grub_default(root)
    if not entry:
        kernel = newest(images)
        return {"kernel": kernel, "source": f"the newest installed kernel image ({source})", "candidates": [kernel]}
    named = _named_kernel(entry, images)
    if named:
        return {"kernel": named, "source": f"{source}: {entry!r}", "candidates": [named]}
    return {"kernel": "", "source": f"{source} {entry!r} names no installed kernel image: every installed image is "
                                    "checked", "candidates": images}


def reboot_decision(host: str, kernels: Mapping[str, Mapping], boot: Mapping, branch: str = "") -> dict:
    """Whether a reboot may be done: every kernel it may come up in has a built module of the branch. Refused: the
    reason names the host, the kernel and the fix."""
    candidates = [k for k in boot.get("candidates") or [] if k in kernels]
    result = {"allowed": True, "kernel": boot.get("kernel") or "", "source": boot.get("source") or "",
              "candidates": candidates, "refused_kernels": [], "reason": ""}
    if not kernels:
        result["reason"] = "no installed kernel found (nothing to check)"
        return result
    if not any(k["module_files"] or k["dkms"] for k in kernels.values()):
        result["reason"] = "no NVIDIA kernel module of any kernel (no host-installed driver to check)"
        return result
    bad = [k for k in candidates if not kernels[k]["ok"]]
    what = f"branch {branch}" if branch else "the driver"
    if not bad:
        result["reason"] = (f"the kernel it boots, {result['kernel']} ({result['source']}), has the NVIDIA module of "
                            f"{what}" if result["kernel"] else
                            f"every kernel it may boot ({', '.join(candidates)}) has the NVIDIA module of {what}")
        return result
    fixes = "; ".join(f"{k}: {kernels[k]['detail']} - {kernels[k]['fix']}" for k in bad)
    which = (f"the kernel it would boot, {bad[0]} ({result['source']}), has" if result["kernel"] else
             f"kernel(s) it may boot ({result['source']}) have")
    result.update(allowed=False, refused_kernels=bad, reason=(
        f"{host}: reboot refused: {which} no built NVIDIA module of {what}, so the host would come up without its "
        f"GPUs. {fixes}. Then run again (the driver role installs the headers and builds the module for every "
        "installed kernel), or make GRUB boot a kernel that has the module."))
    return result


def stale_initramfs(root: Any, kernels: Iterable[str], configs: Iterable[str]) -> list[str]:
    """The kernels whose initramfs (/boot/initrd.img-<release>) is older than the newest of ``configs`` (files the
    initramfs holds, e.g. the nouveau blacklist): a run stopped between writing one and its initramfs rebuild left
    them so, and the host would boot the old settings. Kernels without an initramfs and absent configs count not."""
    root = Path(root)
    newest_config = 0.0
    for config in configs:
        try:
            newest_config = max(newest_config, _under(root, config).stat().st_mtime)
        except OSError:
            continue
    stale = []
    for release in kernels:
        try:
            if _under(root, f"/boot/initrd.img-{release}").stat().st_mtime < newest_config:
                stale.append(release)
        except OSError:
            continue
    return stale


def read_kernels(root: Any = "/", running: str = "", branch: str = "", host: str = "",
                 dkms_status: str | None = None) -> dict:
    """Everything above for one tree: ``kernels`` (kernel_status), ``branch`` (given, else inferred), ``boot``
    (boot_kernel) and ``reboot`` (reboot_decision). ``dkms_status``: ``dkms status``'s output where it was run, else
    DKMS's tree is read."""
    root = Path(root)
    dkms = parse_dkms_status(dkms_status) if dkms_status is not None else dkms_tree(root)
    branch = str(branch or "")
    branch = (branch_of(branch) if "." in branch else branch) or infer_branch(dkms, running)
    kernels = kernel_status(root, dkms, branch, running)
    boot = boot_kernel(root, kernels)
    return {"kernels": kernels, "branch": branch, "running_kernel": running, "boot": boot,
            "reboot": reboot_decision(host, kernels, boot, branch)}


def read_boot_time_from(btime: int, pid1_stat: str, clock_ticks: int, name: str = "1/stat") -> float:
    """The kernel's btime plus PID 1's start time (field 22 of its stat, clock ticks after the boot)."""
    # The command name (field 2) is in parentheses and may hold spaces and parentheses: fields after its last ')'.
    fields = pid1_stat[pid1_stat.rindex(")") + 2:].split()
    if len(fields) < 20:
        raise ValueError(f"{name} has {len(fields) + 2} fields, not the 22 or more of Linux's proc(5)")
    return btime + int(fields[19]) / clock_ticks


def read_boot_time(proc_root: Path, clock_ticks: int) -> float:
    """When PID 1 started, from <proc_root>/stat and <proc_root>/1/stat; ValueError names the file it cannot read."""
    stat = proc_root / "stat"
    btime = next((line.split()[1] for line in stat.read_text().splitlines() if line.startswith("btime ")), None)
    if btime is None:
        raise ValueError(f"{stat} has no btime line")
    pid1 = proc_root / "1" / "stat"
    return read_boot_time_from(int(btime), pid1.read_text(), clock_ticks, str(pid1))


def newest_module(modules_root: Path) -> tuple[str | None, float | None, list[str]]:
    """The newest nvidia*.ko* by ctime under <modules_root>/<kernel>/, its ctime, and the kernels that have one."""
    newest: tuple[str | None, float | None] = (None, None)
    kernels = set()
    if not modules_root.is_dir():
        return None, None, []
    for kernel in sorted(p for p in modules_root.iterdir() if p.is_dir() and not p.is_symlink()):
        # The driver's modules only: the kernel's own nvidia*.ko (kernel/drivers/...) do not count.
        for path in driver_module_paths(kernel):
            ctime = os.lstat(path).st_ctime
            kernels.add(kernel.name)
            if newest[1] is None or ctime > newest[1]:
                newest = (path, ctime)
    return newest[0], newest[1], sorted(kernels)


def describe(module_file: str | None, kernels: list[str], running: str, since_boot: bool) -> str:
    """The report's text: a module to load by booting, none, or why booting again would not load it."""
    if module_file is None:
        return "no NVIDIA kernel module file under the modules root"
    if since_boot:
        return f"the kernel module {module_file} was installed after the boot: a reboot loads it"
    if running not in kernels:
        why = f"the running kernel {running} has no NVIDIA module (built for {', '.join(kernels)})"
    else:
        why = f"the running kernel {running} has one; if no driver is loaded, see dmesg (Secure Boot signature, nouveau)"
    return f"booted since the kernel module was installed ({module_file}): {why}"


def boot_reading(proc_root: Path, modules_root: Path) -> dict:
    """driver_reboot_check's result: when PID 1 started against the newest NVIDIA module file's change time.
    ValueError names what procfs lacks."""
    try:
        boot_time = read_boot_time(proc_root, os.sysconf("SC_CLK_TCK"))
        running = (proc_root / "sys/kernel/osrelease").read_text().strip()
    except (OSError, ValueError, IndexError) as exc:
        raise ValueError(f"cannot read the boot time from {proc_root}: {exc}. Is procfs mounted there (proc_root)?")
    module_file, module_time, kernels = newest_module(modules_root)
    since_boot = module_time is not None and module_time > boot_time
    return {"boot_time": round(boot_time, 2), "module_time": None if module_time is None else round(module_time, 2),
            "module_file": module_file, "module_kernels": kernels, "running_kernel": running,
            "installed_since_boot": since_boot, "detail": describe(module_file, kernels, running, since_boot)}
