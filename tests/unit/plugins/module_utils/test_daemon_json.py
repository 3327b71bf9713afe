"""_daemon_json: which runtime entries of daemon.json already run what is wanted (issue 10, defect 1).

Programs are real files in tmp_path, found by resolve_program as dockerd finds them: a bare name on a search path,
an absolute path as it is, symbolic links followed.
"""
from __future__ import annotations

import pytest

from ansible_collections.k8sgpu.nvidia.plugins.module_utils._daemon_json import (
    DaemonJsonError,
    plan_config,
    resolve_program,
    runtime_update,
)

# What the container_toolkit role asks for (roles/container_toolkit/tasks/runtimes.yml).
ROLE_WANTS = {"nvidia": {"path": "nvidia-container-runtime"}}


@pytest.fixture
def host(tmp_path):
    """A search path usr/local/bin:usr/bin with nvidia-container-runtime in usr/bin; returns (resolve, usr/bin)."""
    local, usr = tmp_path / "usr/local/bin", tmp_path / "usr/bin"
    local.mkdir(parents=True)
    usr.mkdir(parents=True)
    program = usr / "nvidia-container-runtime"
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    search = f"{local}:{usr}"
    return (lambda name: resolve_program(name, search)), usr


def plan(current_entry, wanted=None, resolve=None, **kw):
    wanted = ROLE_WANTS if wanted is None else wanted
    args = {"resolve": resolve} if resolve else {}
    return plan_config({"runtimes": {"nvidia": current_entry}}, runtimes=wanted, **args, **kw)


class TestSameRuntimeIsUnchanged:
    def test_guides_entry_with_runtime_args(self, host):
        resolve = host[0]
        p = plan({"path": "nvidia-container-runtime", "runtimeArgs": []}, resolve=resolve)
        assert not p.changed and p.runtimes_updated == [] and p.warnings == []

    def test_guides_entry_with_the_absolute_path(self, host):
        resolve, usr = host
        p = plan({"path": f"{usr}/nvidia-container-runtime", "runtimeArgs": []}, resolve=resolve)
        assert not p.changed, p.config

    def test_absolute_path_through_a_symbolic_link(self, host, tmp_path):
        resolve, usr = host
        link = tmp_path / "opt/nvidia-container-runtime"
        link.parent.mkdir()
        link.symlink_to(usr / "nvidia-container-runtime")
        assert not plan({"path": str(link)}, resolve=resolve).changed

    def test_arguments_a_user_set_are_kept(self, host):
        resolve = host[0]
        entry = {"path": "nvidia-container-runtime", "runtimeArgs": ["--debug"]}
        p = plan(entry, resolve=resolve)
        assert not p.changed and p.config["runtimes"]["nvidia"] == entry

    def test_entry_in_nvidia_ctks_format_is_unchanged_and_never_rewritten(self, host):
        # What nvidia-ctk and earlier versions of this collection wrote: dockerd ignores "args".
        resolve = host[0]
        p = plan({"path": "nvidia-container-runtime", "args": []}, resolve=resolve)
        assert not p.changed and p.warnings == []

    def test_runc_shim_entry_running_the_same_program(self, host):
        resolve, usr = host
        entry = {"runtimeType": "io.containerd.runc.v2", "options": {"BinaryName": f"{usr}/nvidia-container-runtime"}}
        assert not plan(entry, resolve=resolve).changed


class TestOtherRuntimeIsUpdated:
    def test_another_program_of_the_same_name(self, host, tmp_path):
        resolve = host[0]
        other = tmp_path / "opt/nvidia-container-runtime"
        other.parent.mkdir()
        other.write_text("#!/bin/sh\n")
        other.chmod(0o755)
        p = plan({"path": str(other), "runtimeArgs": ["--debug"]}, resolve=resolve)
        assert p.changed and p.runtimes_updated == ["nvidia"]
        # The program changes; the user's arguments stay.
        assert p.config["runtimes"]["nvidia"] == {"path": "nvidia-container-runtime", "runtimeArgs": ["--debug"]}

    def test_a_missing_program_is_not_the_wanted_one(self, host):
        resolve = host[0]
        p = plan({"path": "/nonexistent/nvidia-container-runtime"}, resolve=resolve)
        assert p.runtimes_updated == ["nvidia"]
        assert p.config["runtimes"]["nvidia"] == {"path": "nvidia-container-runtime"}

    def test_explicit_runtime_args_are_compared_and_set(self, host):
        resolve, usr = host
        entry = {"path": f"{usr}/nvidia-container-runtime", "runtimeArgs": ["--debug"]}
        p = plan(entry, {"nvidia": {"path": "nvidia-container-runtime", "runtimeArgs": []}}, resolve=resolve)
        assert p.runtimes_updated == ["nvidia"]
        # The path the user wrote stays (same program); the arguments asked for replace theirs.
        assert p.config["runtimes"]["nvidia"] == {"path": f"{usr}/nvidia-container-runtime", "runtimeArgs": []}

    def test_shim_entry_of_another_program_is_replaced(self, host):
        resolve = host[0]
        entry = {"runtimeType": "io.containerd.runsc.v1"}
        p = plan(entry, resolve=resolve)
        assert p.config["runtimes"]["nvidia"] == {"path": "nvidia-container-runtime"}

    def test_args_a_user_wrote_are_reported_not_dropped(self, host, tmp_path):
        resolve = host[0]
        p = plan({"path": "/nonexistent/nvidia-container-runtime", "args": ["--debug"]}, resolve=resolve)
        assert p.config["runtimes"]["nvidia"] == {"path": "nvidia-container-runtime", "args": ["--debug"]}
        assert len(p.warnings) == 1 and "dockerd does not read" in p.warnings[0] and "runtimeArgs" in p.warnings[0]


class TestWritesDockersOwnKeys:
    def test_new_entry_is_written_as_given(self, host):
        resolve = host[0]
        p = plan_config({}, runtimes=ROLE_WANTS, default_runtime="nvidia", resolve=resolve)
        assert p.config == {"runtimes": {"nvidia": {"path": "nvidia-container-runtime"}}, "default-runtime": "nvidia"}

    def test_args_is_refused(self):
        with pytest.raises(DaemonJsonError, match=r"runtimes.nvidia.args is not read by dockerd.*runtimeArgs"):
            plan_config({}, runtimes={"nvidia": {"path": "nvidia-container-runtime", "args": []}})

    @pytest.mark.parametrize(("spec", "message"), [
        ({"path": "x", "runtimeType": "io.containerd.runc.v2"}, "either path or runtimeType"),
        ({"path": "x", "runtimeargs": []}, "keys dockerd does not read .runtimeargs."),
        ({"path": "x", "runtimeArgs": "--debug"}, "must be a list"),
    ])
    def test_entries_dockerd_cannot_use_are_refused(self, spec, message):
        with pytest.raises(DaemonJsonError, match=message):
            plan_config({}, runtimes={"nvidia": spec})


class TestResolveProgram:
    def test_bare_name_on_the_search_path_first_match(self, tmp_path):
        first, second = tmp_path / "a", tmp_path / "b"
        for d in (first, second):
            d.mkdir()
            (d / "rt").write_text("")
            (d / "rt").chmod(0o755)
        assert resolve_program("rt", f"{first}:{second}") == str(first / "rt")

    def test_not_executable_or_missing(self, tmp_path):
        (tmp_path / "rt").write_text("")
        assert resolve_program("rt", str(tmp_path)) is None
        assert resolve_program(str(tmp_path / "missing")) is None
        assert resolve_program("") is None


def test_runtime_update_merges_into_a_non_dict():
    assert runtime_update("garbage", {"path": "p"}) == {"path": "p"}
