# shellcheck shell=bash
# Debian roots built with debootstrap, for containers that may take only this
# host's network set-up (not its software). Sourced by scripts/fresh-machine
# and scripts/container-run; both run as root on a Debian host.
#
#   debian_host_mirror SUITE
#       the host's Debian mirror for SUITE: the first URI of a deb822 stanza
#       or a sources.list line naming it; deb.debian.org if none.
#   debian_root_build SUITE DEST INCLUDE LOG STAMP
#       `debootstrap --variant=minbase [--include=INCLUDE] SUITE` into DEST
#       (built in DEST.new, then moved), its output in LOG; then the host's
#       Debian apt sources, apt network settings and locally added CA
#       certificates are copied in (trusted at once if the root has
#       ca-certificates, else once it is installed); apt's cache is cleaned
#       and the build time is written to DEST/STAMP.
#
# Messages go through the caller's `say` if it has one.

debian_say() {
  if declare -F say >/dev/null; then say "$@"; else echo "debian-root: $*"; fi
}

debian_host_mirror() {
  local suite="$1" f uri=""
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    uri="$(awk -v suite="$suite" '
      /^[[:space:]]*$/ { if (ok && u != "") { print u; exit } ok = 0; u = ""; next }
      /^URIs:/ { u = $2 }
      /^Suites:/ { for (i = 2; i <= NF; i++) if ($i == suite) ok = 1 }
      END { if (ok && u != "") print u }' "$f" | head -n1)"
    [ -n "$uri" ] && break
  done
  if [ -z "$uri" ]; then
    uri="$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null \
      | awk -v suite="$suite" '$1 == "deb" { for (i = 2; i < NF; i++) if ($i !~ /^\[/ && $(i+1) == suite) { print $i; exit } }')"
  fi
  echo "${uri:-http://deb.debian.org/debian}"
}

debian_root_build() {
  local suite="$1" dest="$2" include="$3" log="$4" stamp="$5"
  local mirror proxy tmp="$dest.new" f
  mirror="$(debian_host_mirror "$suite")"
  proxy="$(apt-config dump 2>/dev/null | sed -n 's/^Acquire::http::Proxy "\(.*\)";$/\1/p' | head -n1)"
  rm -rf "$tmp"
  debian_say "debootstrap --variant=minbase${include:+ --include=$include} $suite from $mirror${proxy:+ through $proxy}"
  http_proxy="${proxy:-${http_proxy:-}}" debootstrap --variant=minbase \
    ${include:+"--include=$include"} "$suite" "$tmp" "$mirror" >"$log" 2>&1 || {
    tail -n 20 "$log"; return 1; }
  # The host's Debian sources (those naming its mirror) replace debootstrap's
  # one-line sources.list: the same suites (updates, security) as the host.
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list; do
    if [ -f "$f" ] && grep -q "$mirror" "$f"; then
      rm -f "$tmp/etc/apt/sources.list"
      break
    fi
  done
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list; do
    if [ -f "$f" ] && grep -q "$mirror" "$f"; then
      cp "$f" "$tmp$f" || return 1; debian_say "root: apt sources $f"
    fi
  done
  # The host's apt network settings (proxy, TLS, release-date checks).
  for f in /etc/apt/apt.conf /etc/apt/apt.conf.d/*; do
    if [ -f "$f" ] && grep -v '^[[:space:]]*//' "$f" \
      | grep -Eq 'Acquire::(https?|ftp)::|Acquire::(Check-Valid-Until|Check-Date)|^[[:space:]]*Acquire[[:space:]]*\{'; then
      cp "$f" "$tmp$f" || return 1; debian_say "root: apt setting $f"
    fi
  done
  # The host's locally added CAs, so that HTTPS verifies in the root as it
  # does on the host (e.g. behind an egress proxy that re-signs TLS).
  if [ -d /usr/local/share/ca-certificates ] && [ -n "$(ls -A /usr/local/share/ca-certificates)" ]; then
    mkdir -p "$tmp/usr/local/share/ca-certificates"
    cp -r /usr/local/share/ca-certificates/. "$tmp/usr/local/share/ca-certificates/" || return 1
    if [ -x "$tmp/usr/sbin/update-ca-certificates" ]; then
      chroot "$tmp" update-ca-certificates >/dev/null || return 1
    fi
    debian_say "root: local CA certificates $(cd /usr/local/share/ca-certificates && echo *)"
  fi
  chroot "$tmp" apt-get clean
  date -u +%Y-%m-%dT%H:%M:%SZ >"$tmp/$stamp"
  rm -rf "$dest" && mv "$tmp" "$dest"
}
