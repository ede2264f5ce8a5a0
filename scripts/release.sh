#!/usr/bin/env bash
# Releases every library module of the repository at one version.
#
#   scripts/release.sh v0.2.0          rewrite, commit "Release v0.2.0", tag
#   scripts/release.sh --set v0.2.0    rewrite only (nothing committed)
#
# The released modules are the directories holding a go.mod, except
#   - those under bench/, examples/ and tools/ (programs no one imports),
#     never released;
#   - those with an `internal` path element (internal/faulttest,
#     store/internal/redisscript, metrics/internal/redistest, ...),
#     released only when a released module requires them: the Redis
#     plugin's store/internal/redisscript and its scripttest are, while
#     test harnesses and the modules holding a library's tests against
#     real servers (so that the library's go.mod need not require the
#     servers' clients) are not.
# The script
#   1. requires each repository module from every go.mod at the version
#      (the `replace` lines stay: they serve development and CI inside the
#      repository and are ignored where a module is a dependency);
#   2. sets job.Version (node.go) to the version;
#   3. commits, then tags each released module as Go expects of a module
#      in a subdirectory: v0.2.0 for the root, store/redisstore/v0.2.0 for
#      store/redisstore, and so on.
# It refuses a dirty tree, a version that is not semantic, a tag that
# exists, and a released module that requires an unreleased one. Pushing
# is left to the person releasing: it prints the command.
# internal/releasetest runs this script in a clone and builds programs
# from the tagged modules through a file-based module proxy.
set -euo pipefail
cd "$(dirname "$0")/.."

set_only=false
if [[ ${1:-} == --set ]]; then
	set_only=true
	shift
fi
version=${1:-}
if [[ ! $version =~ ^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$ ]]; then
	echo "usage: scripts/release.sh [--set] vMAJOR.MINOR.PATCH[-PRERELEASE] (got '${version}')" >&2
	exit 2
fi
if [[ ! $version =~ ^v[01]\. ]]; then
	echo "release.sh: $version needs a /vN module path suffix in every go.mod first (Go's rule from v2 on)" >&2
	exit 2
fi
if ! $set_only && [[ -n $(git status --porcelain) ]]; then
	echo "release.sh: the working tree has changes; commit or stash them first" >&2
	exit 1
fi

mapfile -t modules < <(find . -name go.mod -not -path './.git/*' -printf '%h\n' | sed 's#^\./##; s#^\.$#.#' | sort)

# module_path DIR: the module path its go.mod declares.
module_path() { awk '$1 == "module" { print $2; exit }' "$1/go.mod"; }
# jobkit_requires DIR: the repository modules its go.mod requires (lines
# "<path> <version>" in a require block or a one-line require).
jobkit_requires() {
	awk '/^require \($/ { r = 1; next } r && /^\)/ { r = 0 }
		r && $1 ~ /^github\.com\/jobkit\/job(\/|$)/ && $2 ~ /^v/ { print $1 }
		$1 == "require" && $2 ~ /^github\.com\/jobkit\/job(\/|$)/ && $3 ~ /^v/ { print $2 }' "$1/go.mod"
}
declare -A path_of dir_of
for m in "${modules[@]}"; do
	p=$(module_path "$m")
	path_of[$m]=$p
	dir_of[$p]=$m
done
# deps_of[DIR]: the repository modules DIR requires, by directory.
declare -A deps_of
for m in "${modules[@]}"; do
	deps=()
	while IFS= read -r p; do
		if [[ -n ${dir_of[$p]:-} ]]; then deps+=("${dir_of[$p]}"); fi
	done < <(jobkit_requires "$m")
	deps_of[$m]=${deps[*]-}
done

never() { case $1 in bench | bench/* | examples/* | tools | tools/*) return 0 ;; esac; return 1; }
has_internal() { [[ /$1/ == */internal/* ]]; }
declare -A is_rel
for m in "${modules[@]}"; do
	if ! never "$m" && ! has_internal "$m"; then is_rel[$m]=1; fi
done
# A module with an internal path element joins when a released module
# requires it, until no more join (a joined one may require another).
grew=true
while $grew; do
	grew=false
	for m in "${modules[@]}"; do
		if [[ -z ${is_rel[$m]:-} ]]; then continue; fi
		for d in ${deps_of[$m]}; do
			if [[ -z ${is_rel[$d]:-} ]] && has_internal "$d" && ! never "$d"; then
				is_rel[$d]=1
				grew=true
			fi
		done
	done
done
released=()
for m in "${modules[@]}"; do
	if [[ -n ${is_rel[$m]:-} ]]; then released+=("$m"); fi
done
is_released() { [[ -n ${is_rel[$1]:-} ]]; }

tag_of() { if [[ $1 == . ]]; then echo "$version"; else echo "$1/$version"; fi; }
if ! $set_only; then
	for m in "${released[@]}"; do
		if git rev-parse -q --verify "refs/tags/$(tag_of "$m")" >/dev/null; then
			echo "release.sh: tag $(tag_of "$m") exists" >&2
			exit 1
		fi
	done
fi

for m in "${modules[@]}"; do
	mapfile -t reqs < <(jobkit_requires "$m")
	for p in "${reqs[@]}"; do
		d=${dir_of[$p]:-}
		if [[ -z $d ]]; then
			echo "release.sh: $m/go.mod requires $p, which is no module of this repository" >&2
			exit 1
		fi
		if is_released "$m" && ! is_released "$d"; then
			echo "release.sh: released module $m requires $d, which is not released (move it out of bench/, examples/ or tools/)" >&2
			exit 1
		fi
	done
	# Only requirement lines ("<path> <version>"): replace lines have "=>".
	sed -i -E "s#^((require)?[[:space:]]*github\.com/jobkit/job(/[^[:space:]]+)?)[[:space:]]+v[^[:space:]]+([[:space:]]|\$)#\1 $version\4#" "$m/go.mod"
done
sed -i "s/^const Version = \".*\"$/const Version = \"$version\"/" node.go
grep -q "^const Version = \"$version\"$" node.go || {
	echo "release.sh: could not set job.Version in node.go" >&2
	exit 1
}

if $set_only; then
	echo "release.sh: every repository module now requires the others at $version (nothing committed)"
	exit 0
fi
git add -A -- '*.mod' node.go
git commit -q -m "Release $version"
tags=()
for m in "${released[@]}"; do
	t=$(tag_of "$m")
	git tag -a -m "${path_of[$m]} $version" "$t"
	tags+=("$t")
done
echo "release.sh: tagged ${#tags[@]} modules at $version. To publish:"
echo "  git push origin HEAD ${tags[*]}"
