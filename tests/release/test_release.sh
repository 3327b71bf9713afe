#!/usr/bin/env bash
# The collection as a user gets it: build the tarball, check it holds nothing development-only, install it
# (--offline beside the dependency collections, into a temporary collections path) and run every playbook by FQCN
# from the installed copy:
# --syntax-check of k8sgpu.nvidia.site and of every playbooks/*.yml, --list-tasks of site, each against the
# example inventory that ships with it. The dependency collections, only those galaxy.yml declares, come from
# DEPS_COLLECTIONS_PATH (a directory holding ansible_collections/, by default the site-packages of .venv's
# `ansible` package), nothing from Galaxy;
# the checkout itself is not on the collections path (checked: the playbook ansible-playbook names must be the
# installed one).
#   tests/release/test_release.sh [output dir]   (the tarball stays there; default: a temporary directory)
# Uses ansible-galaxy/ansible-playbook from PATH (make lint: .venv's ansible-core, 2.21; make compat: 2.19 and 2.21).
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:-}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
[ -n "$out" ] || out=$work/dist
mkdir -p "$out"
deps=${DEPS_COLLECTIONS_PATH:-$("$repo/.venv/bin/python" -c \
  'import ansible_collections, os; print(os.path.dirname(list(ansible_collections.__path__)[0]))')}
[ -d "$deps/ansible_collections/kubernetes/core" ] || { echo "no kubernetes.core under $deps" >&2; exit 1; }

# No ansible.cfg of the checkout (its collections_path holds the checkout): an empty one, from an empty directory.
: >"$work/ansible.cfg"
export ANSIBLE_CONFIG=$work/ansible.cfg ANSIBLE_COLLECTIONS_SCAN_SYS_PATH=false ANSIBLE_LOCAL_TEMP=$work/tmp \
  ANSIBLE_HOME=$work/home ANSIBLE_NOCOLOR=1
version=$(sed -n 's/^version: *//p' "$repo/galaxy.yml")
tarball=$out/k8sgpu-nvidia-$version.tar.gz

t0=$(date +%s%N)
ansible-galaxy collection build --force --output-path "$out" "$repo" >/dev/null
listing=$(tar tzf "$tarball")
files=$(grep -vc '/$' <<<"$listing")
echo "tarball: $tarball, $(stat -c %s "$tarball") bytes, $files files"

# Nothing a user does not run: tests, lab, development files, logs and archives, caches.
bad=$(grep -E '^(tests|molecule|lab|bench|collections|\.[^/]+|inventories/lab|changelogs/fragments|context)(/|$)|(^|/)(__pycache__|Makefile|ansible\.cfg|pytest\.ini|requirements-(dev|importer|compat)\.txt)$|^execution-environment\.yml$|\.(pyc|log|jsonl|tar\.xz|tar\.gz|orig|rej)$|^changelogs/\.plugin-cache\.yaml$|^site\.yml$' <<<"$listing" || true)
if [ -n "$bad" ]; then echo "development-only files in the tarball (galaxy.yml build_ignore):" >&2; echo "$bad" >&2; exit 1; fi
# docs/: only the documents written for users (the threat model, the porting guide, what a run stopped part-way leaves);
# the rest of docs/ (hardware evidence, benchmarks, the development guide) stays in the repository.
user_docs='docs/security.md docs/porting_guide_2.rst docs/reliability.md'
other_docs=$(grep -E '^docs/.*[^/]$' <<<"$listing" | grep -vxF -f <(tr ' ' '\n' <<<"$user_docs") || true)
if [ -n "$other_docs" ]; then
  echo "files of docs/ in the tarball that are not user documents ($user_docs): add them to galaxy.yml's" \
    "build_ignore, or to user_docs in $0 if users need them:" >&2
  echo "$other_docs" >&2; exit 1
fi
# Nothing large: the tarball is what a user runs and reads.
size=$(stat -c %s "$tarball"); max=${RELEASE_MAX_TARBALL_BYTES:-1500000}
if [ "$size" -gt "$max" ]; then
  echo "the tarball is $size bytes, over $max: its largest files:" >&2
  tar tvzf "$tarball" | sort -k3 -n -r | head -10 >&2; exit 1
fi
for need in MANIFEST.json FILES.json README.md LICENSE requirements.txt requirements-gke.txt requirements-eks.txt \
  requirements-cert.txt requirements-ee.txt requirements-eda.txt extensions/eda/rulebooks/gpu_health.yml meta/runtime.yml meta/execution-environment.yml \
  changelogs/changelog.yaml CHANGELOG.rst $user_docs playbooks/site.yml inventories/example/hosts.yml; do
  grep -qx "$need" <<<"$listing" || { echo "missing from the tarball: $need" >&2; exit 1; }
done

# The shipped CHANGELOG.rst has the section of the version built, once that version is released (changelog.yaml); a
# build between releases is no release (tests/release/release_check.py says so; --release refuses it).
if grep -qE "^  ${version//./[.]}:" "$repo/changelogs/changelog.yaml"; then
  tar xzf "$tarball" -O CHANGELOG.rst | grep -A1 -x "v$version" | grep -qE '^=+$' \
    || { echo "the tarball's CHANGELOG.rst has no section v$version (released in changelogs/changelog.yaml)" >&2; exit 1; }
  echo "the tarball's CHANGELOG.rst has v$version"
else
  echo "note: $version is not released yet (changelogs/changelog.yaml): this tarball is a development build"
fi

# RELEASE_INSTALL_CHECK=0 (make test's release-check: make compat installs the tarball and checks every playbook at
# both ends of the dependency ranges): the tarball and its contents only.
if [ "${RELEASE_INSTALL_CHECK:-1}" = 0 ]; then
  echo "tarball contents checked; the install and playbook checks are left to make compat (RELEASE_INSTALL_CHECK=0)"
  exit 0
fi

# As the README's offline install: the dependencies are the ones under test ($deps), which ansible-galaxy checks
# against galaxy.yml's ranges (amazon.aws <11.0.0 failed here beside PyPI's ansible 14's 11.4.0).
ANSIBLE_COLLECTIONS_PATH="$work/installed:$deps" ansible-galaxy collection install --offline --force \
  -p "$work/installed" "$tarball" >"$work/install.log" 2>&1 || { cat "$work/install.log" >&2; exit 1; }
if [ -e "$work/installed/ansible_collections/kubernetes" ] || [ -e "$work/installed/ansible_collections/amazon" ]; then
  echo "the offline install installed a dependency instead of using $deps:" >&2; cat "$work/install.log" >&2; exit 1
fi
root=$work/installed/ansible_collections/k8sgpu/nvidia
# Only the collections the tarball declares (MANIFEST.json's dependencies), taken from $deps: a playbook or role
# that calls an undeclared collection fails its syntax check (unresolved module) instead of finding it there.
declared=$(python3 -c 'import json, sys; print(" ".join(json.load(open(sys.argv[1]))["collection_info"]["dependencies"]))' \
  "$root/MANIFEST.json")
for c in $declared; do
  ns=${c%%.*}; name=${c#*.}
  [ -d "$deps/ansible_collections/$ns/$name" ] || { echo "declared dependency $c not under $deps" >&2; exit 1; }
  mkdir -p "$work/deps/ansible_collections/$ns"; ln -s "$deps/ansible_collections/$ns/$name" "$work/deps/ansible_collections/$ns/$name"
done
export ANSIBLE_COLLECTIONS_PATH=$work/installed:$work/deps
cd "$work"
inventory_for() {  # the example inventory of a playbook: inventories/example/<name>/ when there is one
  if [ -f "$root/inventories/example/$1/hosts.yml" ]; then echo "$root/inventories/example/$1/hosts.yml"
  else echo "$root/inventories/example/hosts.yml"; fi
}
n=0
for p in "$root"/playbooks/*.yml; do
  name=$(basename "$p" .yml)
  res=$(ansible-playbook "k8sgpu.nvidia.$name" --syntax-check -i "$(inventory_for "$name")" 2>&1) \
    || { echo "k8sgpu.nvidia.$name: syntax check failed:" >&2; echo "$res" >&2; exit 1; }
  grep -qx "playbook: $p" <<<"$res" || { echo "k8sgpu.nvidia.$name did not run the installed $p:" >&2; echo "$res" >&2; exit 1; }
  n=$((n + 1))
done
tasks=$(ansible-playbook k8sgpu.nvidia.site --list-tasks -i "$(inventory_for site)" 2>&1) \
  || { echo "k8sgpu.nvidia.site --list-tasks failed:" >&2; echo "$tasks" >&2; exit 1; }
grep -q "playbook: $root/playbooks/site.yml" <<<"$tasks" || { echo "$tasks" >&2; exit 1; }
echo "installed collection ($(ansible --version | sed -n 1p); dependencies: $declared): $n playbooks pass --syntax-check by FQCN," \
  "k8sgpu.nvidia.site lists $(grep -c 'TAGS:' <<<"$tasks") tasks; $(( ($(date +%s%N) - t0) / 1000000 )) ms"
