#!/usr/bin/env bash
set -u
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-$here/../device-check}
mkdir -p "$out"
