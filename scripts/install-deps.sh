#!/usr/bin/env bash
# Install what tarn needs on a fresh Debian machine of this project's kind: the packages below
# (fio and btrfs-progs for benchmark baselines, `tarn bench sync` running btrfs on a loop
# device; fuse3 for the file system, which mounts through FUSE; git, rsync, sqlite3 and the
# rest for the tests that run real tools on a mount, crates/cli/tests/suite/tools.rs; attr and acl
# for the xattr functional tests and scripts/posix-conformance.sh;
# librsvg2-bin for PNG charts of `tarn bench run`, converted from SVG by rsvg-convert;
# python3 for scripts/check-cycles.py and scripts/posix-conformance.sh)
# and the Rust toolchain pinned in rust-toolchain.toml. Safe to run again.
set -euo pipefail
packages=(fio librsvg2-bin btrfs-progs fuse3 libfuse3-dev pkg-config git rsync sqlite3 tar diffutils coreutils attr acl python3)
missing=()
for package in "${packages[@]}"; do
  dpkg -s "$package" >/dev/null 2>&1 || missing+=("$package")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  echo "installing: ${missing[*]}"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}" >/dev/null
fi
if ! command -v cargo >/dev/null 2>&1; then
  echo "cargo not found: install Rust with rustup (the toolchain is pinned in rust-toolchain.toml)" >&2
  exit 1
fi
# rustup reads rust-toolchain.toml and installs the pinned toolchain and components if needed.
(cd "$(dirname "$0")/.." && rustup show active-toolchain >/dev/null)
