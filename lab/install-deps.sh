#!/usr/bin/env bash
# Install what a fresh Debian 12 machine lacks for the lab, the main job and
# the tests: Debian packages (as root, through apt), and check Go, which Debian
# 12 packages too old (1.19) and which the lab's builds need at 1.26 or newer
# (kwok v0.8.0's go.mod; the Kubernetes and toolkit builds). Installs nothing
# that is already there. Used by `make lab` (so by `make site` and
# `make test`) and by .ci/run.
set -euo pipefail

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
