# Shared by scripts/test.sh and scripts/bench.sh; source it, do not run it.

log() { printf '==> %s\n' "$*" >&2; }

# ensure_packages PKG...: installs the Debian packages given (those the
# caller found missing) when running as root with apt-get; otherwise says
# how to get them and exits 1. No arguments: nothing to do.
ensure_packages() {
	(($#)) || return 0
	if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
		log "installing $*"
		apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
	else
		log "missing $*: install them (Debian: sudo apt-get install $*) and run again"
		exit 1
	fi
}
