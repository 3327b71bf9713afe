#!/usr/bin/env bash
# make release: release galaxy.yml's version from this checkout, as one commit and an annotated tag.
#   1. refuses before changing anything: not the top of a git checkout; the version already tagged or in
#      changelogs/changelog.yaml; no fragment to release; make lint's release check failing (a breaking fragment in a
#      minor release, ...); uncommitted or untracked changes in what the release commits (changelogs/, CHANGELOG.rst,
#      docs/porting_guide_2.rst, galaxy.yml, execution-environment.yml, and the files whose version_added it sets);
#      galaxy-importer warnings still accepted as pending (tests/release/importer-expected-warnings.txt);
#   2. sets each version_added that names a version never released (1.2.0 before it became 2.0.0) to this version;
#   3. antsibull-changelog release (changelogs/changelog.yaml and CHANGELOG.rst; the fragments are deleted);
#   4. docs/porting_guide_2.rst written again from changelogs/ (tests/release/porting_guide.py);
#   5. antsibull-changelog lint and tests/release/release_check.py --release (the version released in changelog.yaml
#      and CHANGELOG.rst, no fragment left, the porting guide in step);
#   6. commits exactly those paths ("Release <version>") and tags the commit: git tag -a <version>.
# Other files' uncommitted changes are left as they are, out of the release commit.
#   tests/release/release.sh [--date YYYY-MM-DD] [--no-tag]
# Needs the development venv on PATH (antsibull-changelog, ansible-doc) and the checkout's ansible.cfg
# (ANSIBLE_CONFIG; make release sets both). Pushing is left to the caller: git push origin HEAD <version>.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
cd "$repo"
date_args=() tag=1
while [ $# -gt 0 ]; do
  case $1 in
    --date) date_args=(--date "$2"); shift 2 ;;
    --no-tag) tag=0; shift ;;
    *) echo "release: unknown argument $1 (tests/release/release.sh [--date YYYY-MM-DD] [--no-tag])" >&2; exit 2 ;;
  esac
done
die() { echo "release: $*" >&2; exit 1; }

export ANSIBLE_CONFIG=$repo/ansible.cfg   # the changelog tool runs ansible-doc on this checkout
[ "$(git rev-parse --show-toplevel 2>/dev/null)" = "$repo" ] || die "$repo is not the top of a git checkout"
version=$(sed -n 's/^version: *//p' galaxy.yml)
[[ $version =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || die "galaxy.yml's version '$version' is not major.minor.patch"
git rev-parse -q --verify "refs/tags/$version" >/dev/null && die "the tag $version exists: $version is released; set galaxy.yml's version to the next release"
grep -qE "^  ${version//./[.]}:" changelogs/changelog.yaml && die "changelogs/changelog.yaml already releases $version; set galaxy.yml's version to the next release"
fragments=$(find changelogs/fragments -maxdepth 1 -type f \( -name '*.yml' -o -name '*.yaml' \) ! -name '.*' | sort)
[ -n "$fragments" ] || die "no changelog fragment in changelogs/fragments: nothing to release"

# What the release writes, and so commits. Anyone's uncommitted work there would be released unseen (a fragment not
# committed yet) or lost: refuse.
paths=(changelogs CHANGELOG.rst docs/porting_guide_2.rst galaxy.yml execution-environment.yml)
mapfile -t stale < <(python3 - "$version" <<'PY'
import re, sys, yaml
sys.path.insert(0, "tests/release")
import release_check
version = sys.argv[1]
released = {str(v) for v in release_check.load_releases(release_check.Path("."))} | {version}
for path in release_check.content_files(release_check.Path(".")):
    text = path.read_text(encoding="utf-8", errors="replace")
    if any(m.group(1) not in released for m in release_check.VERSION_ADDED.finditer(text)):
        print(path)
PY
)
dirty=$(git status --porcelain --untracked-files=all -- "${paths[@]}" ${stale[@]+"${stale[@]}"})
[ -z "$dirty" ] || die "uncommitted or untracked changes in what the release commits; commit them (or remove them) first:
$dirty"
python3 tests/release/release_check.py >/dev/null 2>"$repo/.release-check.log" \
  || { cat "$repo/.release-check.log" >&2; rm -f "$repo/.release-check.log"; die "make lint's release check fails (above): fix that first"; }
rm -f "$repo/.release-check.log"
# What --release refuses at the end and no step here fixes: galaxy-importer warnings accepted as pending.
pending=$(python3 -c 'import sys; sys.path.insert(0, "tests/release"); import release_check as r
print("\n".join(r.check_importer_expected(r.Path("."), True)[0]))')
[ -z "$pending" ] || die "$pending"

command -v antsibull-changelog >/dev/null || die "antsibull-changelog is not on PATH: run make release (the venv), or put .venv/bin first on PATH"
echo "release: $version: $(wc -l <<<"$fragments") fragment(s)"
if [ ${#stale[@]} -gt 0 ]; then
  python3 - "$version" "${stale[@]}" <<'PY'
import sys
sys.path.insert(0, "tests/release")
import release_check
version, files = sys.argv[1], sys.argv[2:]
released = {str(v) for v in release_check.load_releases(release_check.Path("."))} | {version}
for name in files:
    path = release_check.Path(name)
    text = path.read_text(encoding="utf-8")
    new = release_check.VERSION_ADDED.sub(
        lambda m: m.group(0) if m.group(1) in released else
        m.group(0)[:m.start(1) - m.start(0)] + version + m.group(0)[m.end(1) - m.start(0):], text)
    path.write_text(new, encoding="utf-8")
print(f"release: version_added set to {version} in {len(files)} file(s) (it named a version never released)")
PY
fi
antsibull-changelog release --version "$version" ${date_args[@]+"${date_args[@]}"}
python3 tests/release/porting_guide.py write
antsibull-changelog lint
python3 tests/release/release_check.py --release
git add -- "${paths[@]}" ${stale[@]+"${stale[@]}"}
git commit -q -m "Release $version" -- "${paths[@]}" ${stale[@]+"${stale[@]}"}
echo "release: committed $(git rev-parse --short HEAD) \"Release $version\""
if [ "$tag" = 1 ]; then
  git tag -a "$version" -m "k8sgpu.nvidia $version"
  echo "release: tagged $version (annotated); push with: git push origin HEAD $version"
fi
echo "release: the tarball: ansible-galaxy collection build (k8sgpu-nvidia-$version.tar.gz); make lint checks it"
