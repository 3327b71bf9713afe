# shellcheck shell=bash disable=SC2034 # variables are used by the scripts that source this file
# Shared helpers for the lab scripts. Sourced, never executed.

set -euo pipefail

LAB_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# Heavy artefacts (Go module cache, built binaries, node image tarballs) live
# outside the repository, keyed by version, so a fresh clone reuses them.
K8SGPU_CACHE="${K8SGPU_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/k8sgpu-lab}"
# Per-checkout runtime state (kubeconfig, logs); removed by `lab.sh down`.
LAB_STATE="${K8SGPU_LAB_STATE:-$LAB_ROOT/.lab}"

# Pinned versions. Change here only; every cache path is keyed by these.
K8S_VERSION="${K8S_VERSION:-v1.37.2}"
ETCD_VERSION="${ETCD_VERSION:-v3.6.16}"
KWOK_VERSION="${KWOK_VERSION:-v0.8.0}"
# Monitoring and autoscaling parts (issue 11) and Karpenter's kwok provider
# (issue 14). Prometheus's Go module v0.316.0 is Prometheus 3.16.0.
PROMETHEUS_VERSION="${PROMETHEUS_VERSION:-v0.316.0}"
PROMETHEUS_ADAPTER_VERSION="${PROMETHEUS_ADAPTER_VERSION:-v0.12.0}"
KARPENTER_VERSION="${KARPENTER_VERSION:-v1.14.1}"
# NVIDIA container toolkit built into the lab's local apt repository.
NVIDIA_CTK_VERSION="${NVIDIA_CTK_VERSION:-v1.20.1}"
# Bump when lab/build-toolkit-repo.sh packages differently.
TOOLKIT_RECIPE=1
# The NVIDIA-like driver repository of lab/build-nvidia-driver-repo.sh: its packages stand on Debian 12's driver of
# this version (bookworm's nvidia-driver). Bump the recipe when that script packages differently.
NVIDIA_LAB_DRIVER_VERSION="${NVIDIA_LAB_DRIVER_VERSION:-535.261.03}"
NVIDIA_DRIVER_REPO_RECIPE=2

LAB_NAME="${K8SGPU_LAB_NAME:-k8sgpu-lab}"

log() { printf '[lab %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf '[lab] ERROR: %s\n' "$*" >&2; exit 1; }

# Run a build step, keep its log, and on failure show the compiler's error.
run_build() {
  local what="$1" logf="$2"; shift 2
  mkdir -p "$(dirname "$logf")"
  if ! "$@" >"$logf" 2>&1; then
    echo "----- last 40 lines of $logf -----" >&2
    tail -n 40 "$logf" >&2
    die "building $what failed (full log: $logf)"
  fi
}

need_cmd() {
  command -v "$1" >/dev/null 2>&1 || die "$1 not found on PATH; $2"
}

# Fail early when the disk holding $1 has less than $2 MiB free.
need_space() {
  local dir="$1" mib="$2" avail
  mkdir -p "$dir"
  avail=$(df -Pm "$dir" | awk 'NR==2 {print $4}')
  if [ "${avail:-0}" -lt "$mib" ]; then
    die "only ${avail} MiB free under $dir; the lab needs about ${mib} MiB there. Free some space or set K8SGPU_CACHE to a larger disk."
  fi
}

k8s_bin_dir() { echo "$K8SGPU_CACHE/bin/kubernetes-$K8S_VERSION"; }
etcd_bin_dir() { echo "$K8SGPU_CACHE/bin/etcd-$ETCD_VERSION"; }
toolkit_repo_dir() { echo "$K8SGPU_CACHE/mirror/toolkit-$NVIDIA_CTK_VERSION-$TOOLKIT_RECIPE"; }
nvidia_driver_repo_dir() { echo "$K8SGPU_CACHE/mirror/nvidia-driver-$NVIDIA_LAB_DRIVER_VERSION-$NVIDIA_DRIVER_REPO_RECIPE"; }
kwok_bin_dir() { echo "$K8SGPU_CACHE/bin/kwok-$KWOK_VERSION"; }
prometheus_bin_dir() { echo "$K8SGPU_CACHE/bin/prometheus-$PROMETHEUS_VERSION"; }
adapter_bin_dir() { echo "$K8SGPU_CACHE/bin/prometheus-adapter-$PROMETHEUS_ADAPTER_VERSION"; }
karpenter_bin_dir() { echo "$K8SGPU_CACHE/bin/karpenter-kwok-$KARPENTER_VERSION"; }

export GOMODCACHE="${GOMODCACHE_LAB:-$K8SGPU_CACHE/go/mod}"
export GOCACHE="${GOCACHE_LAB:-$K8SGPU_CACHE/go/build}"
export GOFLAGS="${GOFLAGS:--mod=mod}"
export CGO_ENABLED=0

# A flat apt repository in DIR (its *.deb): Packages, Packages.gz, a Release with their sums, signed by the lab's
# repository key (InRelease, Release.gpg), the key's public part written to KEY_OUT. Used by build-toolkit-repo.sh
# and build-nvidia-driver-repo.sh.
index_flat_repo() {
  local d="$1" label="$2" key_out="$3" sum f
  (cd "$d" && dpkg-scanpackages --multiversion . /dev/null 2>/dev/null >Packages && gzip -9nk Packages)
  {
    echo "Origin: k8sgpu.nvidia lab"
    echo "Label: $label"
    echo "Architectures: amd64"
    echo "Date: $(LC_ALL=C date -u -R)"
    for sum in MD5Sum:md5sum SHA256:sha256sum; do
      echo "${sum%%:*}:"
      for f in Packages Packages.gz; do
        printf ' %s %s %s\n' "$(${sum#*:} "$d/$f" | cut -d' ' -f1)" "$(stat -c %s "$d/$f")" "$f"
      done
    done
  } >"$d/Release"
  gpg --batch --yes --local-user lab@k8sgpu.invalid --clearsign -o "$d/InRelease" "$d/Release"
  gpg --batch --yes --local-user lab@k8sgpu.invalid -abs -o "$d/Release.gpg" "$d/Release"
  gpg --batch --armor --export lab@k8sgpu.invalid >"$key_out"
}
