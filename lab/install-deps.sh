#!/usr/bin/env bash
# Install what a fresh Debian 12 machine lacks for the lab, the main job and
# the tests: Debian packages (as root, through apt), and check Go, which Debian
# 12 packages too old (1.19) and which the lab's builds need at 1.26 or newer
# (kwok v0.8.0's go.mod; the Kubernetes and toolkit builds). Installs nothing
# that is already there. Used by `make lab` (so by `make site` and
# `make test`) and by .ci/run.
# It also finds the Python of the development venvs: 3.12 or 3.13 (ansible-core
# 2.21, the one the collection is developed and tested on, needs 3.12 or newer;
# Debian 12's python3 is 3.11), with venv and ensurepip: $PYTHON when set (and
# only it), else python3.12, python3.13 and python3 on PATH, then pyenv's and /usr/local's.
# A candidate counts only if it runs (a pyenv shim of a version not selected
# does not). Missing, it fails saying what to install.
#   lab/install-deps.sh            the Debian packages, Go, the Python check
#   lab/install-deps.sh --python   only print that Python's path (the Makefile's venv rules), or fail
set -euo pipefail

find_python() {
  local c candidates=(python3.12 python3.13 python3)
  if [ -n "${PYTHON:-}" ]; then  # the caller's choice, or nothing
    candidates=("$PYTHON")
  fi
  [ -n "${PYTHON:-}" ] || for c in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12*/bin/python3.12 \
    "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.13*/bin/python3.13 /usr/local/bin/python3.12 /usr/local/bin/python3.13 \
    /usr/bin/python3.12 /usr/bin/python3.13; do
    candidates+=("$c")
  done
  for c in "${candidates[@]}"; do
    command -v "$c" >/dev/null 2>&1 || [ -x "$c" ] || continue
    "$c" -c 'import sys, venv, ensurepip, ssl; sys.exit(sys.version_info[:2] not in ((3, 12), (3, 13)))' \
      >/dev/null 2>&1 || continue
    "$c" -c 'import sys; print(sys.executable)'
    return 0
  done
  echo "install-deps: no Python 3.12 or 3.13 with venv and ensurepip found${PYTHON:+ (PYTHON=$PYTHON is not one)}:" \
    "the development venv runs ansible-core 2.21, which needs Python 3.12 or newer (Debian 12's python3 is 3.11)." \
    "Install one (pyenv install 3.12; Debian 13's python3 is 3.13) and put python3.12 on PATH, or set PYTHON=/path/to/python3.12." >&2
  return 1
}

if [ "${1:-}" = --python ]; then
  find_python
  exit
fi

GO_MIN_MINOR=26   # Go 1.26 or newer

# command (or absolute path) : Debian package
need=(
  dockerd:docker.io
  debootstrap:debootstrap
  /usr/sbin/apt-cacher-ng:apt-cacher-ng
  ss:iproute2
  shellcheck:shellcheck
  gcc:gcc
  dpkg-scanpackages:dpkg-dev
  gpg:gnupg
  ssh:openssh-client
  ssh-keygen:openssh-client
  python3:python3
)
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || need+=(/nonexistent:python3-venv)

missing=()
for cmd_pkg in "${need[@]}"; do
  cmd=${cmd_pkg%%:*} pkg=${cmd_pkg##*:}
  command -v "$cmd" >/dev/null 2>&1 || [ -x "$cmd" ] || missing+=("$pkg")
done
if [ "${#missing[@]}" -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "install-deps: missing Debian packages: ${missing[*]}; run as root or: sudo apt-get install ${missing[*]}" >&2
    exit 1
  fi
  echo "install-deps: installing ${missing[*]}" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

if ! command -v go >/dev/null 2>&1; then
  echo "install-deps: Go 1.${GO_MIN_MINOR} or newer is required on PATH (https://go.dev/dl; Debian 12's golang is 1.19)." >&2
  exit 1
fi
go_version=$(go env GOVERSION)          # e.g. go1.26.8
minor=${go_version#go1.}; minor=${minor%%.*}; minor=${minor%%[!0-9]*}
if [ -z "$minor" ] || [ "$minor" -lt "$GO_MIN_MINOR" ]; then
  echo "install-deps: $(command -v go) is $go_version; the lab's builds need Go 1.${GO_MIN_MINOR} or newer (https://go.dev/dl)." >&2
  exit 1
fi

# The venvs' Python (Makefile: PYTHON): after the packages, so that the error above comes first on a bare machine.
python=$(find_python)
echo "install-deps: the venvs' Python: $python ($("$python" -c 'import platform; print(platform.python_version())'))" >&2
