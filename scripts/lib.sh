# SPDX-License-Identifier: GPL-2.0
# Shared shell helpers for the erdma-rs scripts.  Source it, do not run it.
#
# Everything that is downloaded or built lives in $ERDMA_CACHE, outside the
# checkout, so that fresh clones (CI) and later sessions reuse it.  Every
# cached artifact is stored under a name or next to a stamp that encodes
# what it was made from, so a stale artifact is never used.

set -eu

TOP=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$TOP/scripts/versions.sh"

# CI and cron-like environments may lack HOME, or rustup's bin directory on PATH.
: "${HOME:=$(getent passwd "$(id -u)" | cut -d: -f6)}"
export HOME
if ! command -v cargo >/dev/null && [ -x "$HOME/.cargo/bin/cargo" ]; then
	export PATH="$HOME/.cargo/bin:$PATH"
fi

ERDMA_CACHE=${ERDMA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/erdma-rs}
mkdir -p "$ERDMA_CACHE"
export ERDMA_CACHE

# Locations derived from the pins.
RUSTC_VERSION=$(rustc --version 2>/dev/null | awk '{print $2}')
RUST_SRC_DIR=$ERDMA_CACHE/rust-src-$RUSTC_VERSION
RUST_LIB_SRC=$RUST_SRC_DIR/usr/src/rustc-$RUSTC_VERSION/library
BINDGEN_ROOT=$ERDMA_CACHE/bindgen-cli-$BINDGEN_VERSION
LIBCLANG_PATH=/usr/lib/llvm-$LLVM_MAJOR/lib
KERNEL_DIR=$ERDMA_CACHE/linux-$KERNEL_PKG_VERSION
KSRC=$KERNEL_DIR/src
APT_DIR=$ERDMA_CACHE/apt-trixie
QEMU_PREFIX_BASE=$ERDMA_CACHE/qemu
export RUST_LIB_SRC LIBCLANG_PATH

_step_name=${_step_name:-erdma-rs}

say() { printf '==> [%s] %s\n' "$_step_name" "$*" >&2; }
warn() { printf '==> [%s] WARNING: %s\n' "$_step_name" "$*" >&2; }
die() {
	printf '==> [%s] FAILED: %s\n' "$_step_name" "$*" >&2
	exit 1
}

# A short, stable hash of strings and/or file contents.
#   key_of STRING... (arguments that name existing files are hashed by content)
key_of() {
	local a
	for a in "$@"; do
		if [ -f "$a" ]; then
			sha256sum "$a" | cut -c1-64
		else
			printf '%s\n' "$a"
		fi
	done | sha256sum | cut -c1-16
}

# test_signing_key: the path of a module signing key for tests (the
# rehearsal signs the module package with it), made once with openssl into
# the cache: one PEM file with the private key (RSA 3072) and its
# self-signed certificate, CN "erdma-rs test signing key", for code signing
# only, as the kernel's own certs/x509.genkey makes a module signing key.
test_signing_key() {
	local d=$ERDMA_CACHE/test-signing-key
	if [ ! -s "$d/key.pem" ]; then
		mkdir -p "$d"
		cat >"$d/x509.genkey" <<'EOF'
[ req ]
distinguished_name = dn
prompt = no
x509_extensions = ext
[ dn ]
O = erdma-rs
CN = erdma-rs test signing key
[ ext ]
basicConstraints = critical,CA:FALSE
keyUsage = digitalSignature
extendedKeyUsage = codeSigning
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
EOF
		openssl req -new -x509 -newkey rsa:3072 -nodes -utf8 -sha256 -days 36500 -batch \
			-config "$d/x509.genkey" -outform PEM -out "$d/key.pem.tmp" -keyout "$d/key.pem.tmp" \
			>"$d/openssl.log" 2>&1 || die "openssl could not make the test signing key; read $d/openssl.log"
		mv "$d/key.pem.tmp" "$d/key.pem"
	fi
	echo "$d/key.pem"
}

# stamp_ok FILE KEY: true when FILE exists and holds KEY.
stamp_ok() { [ -f "$1" ] && [ "$(cat "$1")" = "$2" ]; }

# The first Debian mirror in the system's apt sources (not the security one).
debian_mirror() {
	if [ -n "${DEBIAN_MIRROR:-}" ]; then
		echo "$DEBIAN_MIRROR"
		return
	fi
	local m
	m=$(cat /etc/apt/sources.list.d/*.sources 2>/dev/null |
		sed -n 's/^URIs:[[:space:]]*//p' | tr ' ' '\n' |
		grep -v security | grep -m1 '/debian/\?$' || true)
	if [ -z "$m" ]; then
		m=$(grep -hE '^deb[[:space:]]' /etc/apt/sources.list 2>/dev/null |
			awk '{for(i=2;i<=NF;i++) if ($i ~ /^[a-z]+:\/\//) {print $i; exit}}' |
			grep -v security | head -1 || true)
	fi
	[ -n "$m" ] || die "no Debian mirror found in /etc/apt; set DEBIAN_MIRROR"
	echo "$m"
}

# apt-get against a private trixie + trixie-backports state with an EMPTY
# dpkg status: it resolves and downloads, it never installs into the host.
apt_trixie() {
	apt-get -q \
		-o Dir::Etc::SourceList="$APT_DIR/etc/sources.list" \
		-o Dir::Etc::SourceParts="$APT_DIR/etc/sources.list.d" \
		-o Dir::Etc::Preferences="$APT_DIR/etc/preferences" \
		-o Dir::Etc::PreferencesParts="$APT_DIR/etc/preferences.d" \
		-o Dir::State::Lists="$APT_DIR/lists" \
		-o Dir::State::status="$APT_DIR/status" \
		-o Dir::State::extended_states="$APT_DIR/extended_states" \
		-o Dir::Cache="$APT_DIR" \
		-o Dir::Cache::archives="$APT_DIR/archives" \
		-o Dir::Cache::pkgcache="" -o Dir::Cache::srcpkgcache="" \
		-o APT::Architecture=amd64 -o APT::Architectures=amd64 \
		-o APT::Install-Recommends=false -o APT::Install-Suggests=false \
		-o Acquire::Languages=none \
		-o Debug::NoLocking=true \
		"$@"
}

apt_cache_trixie() {
	apt-cache \
		-o Dir::Etc::SourceList="$APT_DIR/etc/sources.list" \
		-o Dir::Etc::SourceParts="$APT_DIR/etc/sources.list.d" \
		-o Dir::State::Lists="$APT_DIR/lists" \
		-o Dir::State::status="$APT_DIR/status" \
		-o Dir::Cache="$APT_DIR" \
		-o Dir::Cache::pkgcache="" -o Dir::Cache::srcpkgcache="" \
		-o APT::Architecture=amd64 -o APT::Architectures=amd64 \
		"$@"
}

# trixie_versions PKG: the versions of PKG in the private trixie index, newest first.
trixie_versions() {
	apt_cache_trixie madison "$1" | awk -F'|' '{ gsub(/ /, "", $2); print $2 }'
}

# trixie_version PKG PREFIX: the newest version of PKG that starts with PREFIX.
trixie_version() {
	trixie_versions "$1" | awk -v p="$2" 'index($0, p) == 1 { print; exit }'
}

# Prepare (once an hour at most) the private trixie apt state.
apt_trixie_update() {
	local keyring=/usr/share/keyrings/debian-archive-keyring.gpg mirror
	mirror=$(debian_mirror)
	mkdir -p "$APT_DIR/lists/partial" "$APT_DIR/archives/partial" \
		"$APT_DIR/etc/sources.list.d" "$APT_DIR/etc/preferences.d"
	[ -f "$APT_DIR/status" ] || : >"$APT_DIR/status"
	cat >"$APT_DIR/etc/sources.list.new" <<-EOF
		deb [signed-by=$keyring] $mirror trixie main
		deb [signed-by=$keyring] $mirror trixie-backports main
		deb-src [signed-by=$keyring] $mirror trixie main
	EOF
	if cmp -s "$APT_DIR/etc/sources.list.new" "$APT_DIR/etc/sources.list" &&
		[ -n "$(find "$APT_DIR/lists" -maxdepth 1 -name '*Packages*' -mmin -60 2>/dev/null | head -1)" ]; then
		rm -f "$APT_DIR/etc/sources.list.new"
		return 0
	fi
	mv "$APT_DIR/etc/sources.list.new" "$APT_DIR/etc/sources.list"
	say "updating the private trixie package lists ($mirror)"
	apt_trixie update >"$APT_DIR/update.log" 2>&1 ||
		die "apt-get update for trixie failed; see $APT_DIR/update.log"
}

# Download one exact package version from trixie(-backports) into DIR and
# unpack it there (dpkg-deb -x: nothing is installed on the host).
fetch_deb_into() {
	local spec=$1 dir=$2 deb
	rm -rf "$APT_DIR/one" && mkdir -p "$APT_DIR/one"
	(cd "$APT_DIR/one" && apt_trixie download "$spec" >"$APT_DIR/download.log" 2>&1) ||
		die "could not download $spec; see $APT_DIR/download.log"
	deb=$(ls "$APT_DIR"/one/*.deb)
	mkdir -p "$dir"
	dpkg-deb -x "$deb" "$dir"
	rm -rf "$APT_DIR/one"
}

# Run a long command with its output in LOG, printing a progress line every
# INTERVAL seconds: the elapsed time and the last line the command printed.
run_logged() {
	local what=$1 log=$2
	shift 2
	local interval=${PROGRESS_INTERVAL:-30} start next pid rc last
	start=$(date +%s)
	next=$((start + interval))
	"$@" >"$log" 2>&1 &
	pid=$!
	while kill -0 "$pid" 2>/dev/null; do
		sleep 1
		if [ "$(date +%s)" -ge "$next" ]; then
			next=$((next + interval))
			last=$(tail -n 1 "$log" 2>/dev/null | cut -c1-100)
			say "$what: $(($(date +%s) - start))s elapsed, $(wc -l <"$log") lines of log; last: $last"
		fi
	done
	rc=0
	wait "$pid" || rc=$?
	if [ "$rc" -ne 0 ]; then
		tail -n 40 "$log" >&2 || true
		die "$what failed (exit $rc); full log: $log"
	fi
	say "$what: done in $(($(date +%s) - start))s"
}

# in_buildroot ROOT COMMAND...: COMMAND in the chroot ROOT (issue 32's
# Debian build root) with /proc, /sys and /dev (objtool and the kernel's
# build read them) and a clean environment: the host's build variables
# (RUST_LIB_SRC, LIBCLANG_PATH above, the host's PATH) name the host's
# toolchain, which the build root must not see.
in_buildroot() {
	local r=$1 m rc=0 mounted=()
	shift
	for m in proc sys dev; do
		mountpoint -q "$r/$m" || { mount --bind "/$m" "$r/$m" && mounted+=("$r/$m"); }
	done
	chroot "$r" env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
		LANG=C.UTF-8 TERM=dumb "$@" || rc=$?
	for m in "${mounted[@]}"; do
		umount -l "$m"
	done
	return $rc
}
