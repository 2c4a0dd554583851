#!/usr/bin/env bash
set -u
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-$here/../device-check}
mkdir -p "$out"
# The binaries travel compressed (they embed every kernel's PTX); unpacked next to the scripts.
if [ -f "$here/binaries.tar.gz" ]; then
  tar -xzf "$here/binaries.tar.gz" -C "$here" || { echo "cannot unpack $here/binaries.tar.gz"; exit 1; }
fi
