# Shared by the packaging scripts: messages, the repository root, the cached Debian 12 root.
# Sourced, not run. Callers set `name` (the prefix of their messages) first.

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
target=${CARGO_TARGET_DIR:-$repo/target}
# The binary packaged: the release build unless MEMKV_BIN names another (scripts/test passes
# the test build it already has, so the suite does not compile the server twice).
memkv_bin=${MEMKV_BIN:-$target/release/memkv}
pkg_cache=${MEMKV_PKG_CACHE:-/var/cache/memkv-pkg}
mirror=${MEMKV_DEBIAN_MIRROR:-http://deb.debian.org/debian}

say() { printf '%s: %s\n' "$name" "$*" >&2; }
die() { printf '%s: error: %s\n' "$name" "$*" >&2; exit 1; }
step() { printf '%s: == %s\n' "$name" "$*" >&2; }

need_root() { [ "$(id -u)" = 0 ] || die "run as root (chroot, mounts and package installs need it)"; }

# apt_need CMD PACKAGE...: installs PACKAGE... when CMD is missing.
apt_need() {
    local cmd=$1; shift
    command -v "$cmd" >/dev/null && return 0
    need_root
    say "installing $* (for $cmd)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@" >&2 || die "apt-get install $* failed"
}

# The .deb this checkout builds: its version is the binary's own (`memkv --version`).
deb_path() {
    local version
    version=$("$memkv_bin" --version | awk '{print $2}') || die "$memkv_bin --version failed"
    printf '%s/debian/memkv_%s_amd64.deb\n' "$target" "$version"
}

# A pristine minimal Debian 12 root (minbase plus adduser, which the package depends on), as
# a tarball debootstrapped once and cached: the deb check installs into a copy of it and the
# OCI image is built from it. Prints the tarball's path.
base_root_tarball() {
    local tarball=$pkg_cache/bookworm-minbase-adduser.tar tmp
    if [ ! -s "$tarball" ]; then
        need_root
        apt_need debootstrap debootstrap
        mkdir -p "$pkg_cache"
        tmp=$(mktemp -d "$pkg_cache/root.XXXXXX")
        say "debootstrapping a minimal bookworm root into $tmp (once; cached as $tarball)"
        if ! nice -n 10 debootstrap --variant=minbase --include=adduser bookworm "$tmp" "$mirror" \
            >"$pkg_cache/debootstrap.log" 2>&1; then
            rm -rf "$tmp"
            die "debootstrap failed; see $pkg_cache/debootstrap.log"
        fi
        # Package lists and the downloaded .debs are not part of a minimal root.
        rm -rf "$tmp"/var/cache/apt/archives/*.deb "$tmp"/var/lib/apt/lists/*
        chmod 0755 "$tmp" # the root's / (mktemp made it 0700)
        tar -C "$tmp" --numeric-owner -cf "$tarball.part" . || die "tar of the root failed"
        mv "$tarball.part" "$tarball"
        rm -rf "$tmp"
    fi
    printf '%s\n' "$tarball"
}

# free_port: a TCP port on 127.0.0.1 nobody listens on, whose port + 1 is free too.
free_port() {
    python3 - <<'PY'
import socket
while True:
    a = socket.socket(); a.bind(("127.0.0.1", 0)); port = a.getsockname()[1]
    b = socket.socket()
    try:
        b.bind(("127.0.0.1", port + 1))
    except OSError:
        continue
    finally:
        b.close(); a.close()
    print(port); break
PY
}
