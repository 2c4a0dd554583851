#!/bin/sh
# A stand-in for nvcc that lets `cargo clippy` of gemv-candle's `cuda` feature finish in seconds: candle's
# build scripts compile about 35 CUDA files with nvcc (about 20 minutes on a 2-core VM)
# only to embed PTX and link a static library, and neither affects type-checking Rust code.
# Questions about the toolkit (--version, --list-gpu-code, ...) go to the real, pinned nvcc named
# by GEMV_REAL_NVCC; a compilation writes an empty output where nvcc would have written one:
#   --ptx ... --output-directory DIR ... FILE.cu   ->  DIR/FILE.ptx
#   -c -o OBJ ...                                 ->  OBJ
#   --lib -o LIB ...                              ->  an empty archive LIB
# Used by `cargo xtask candle` (part of `cargo xtask test`); `cargo xtask candle --full` uses the
# real nvcc instead.
set -eu
mode=""
output=""
directory=""
source=""
previous=""
for argument in "$@"; do
    case "$previous" in
        -o) output="$argument" ;;
        --output-directory) directory="$argument" ;;
    esac
    case "$argument" in
        --ptx) mode="ptx" ;;
        -c) mode="object" ;;
        --lib) mode="library" ;;
        *.cu) source="$argument" ;;
    esac
    previous="$argument"
done
case "$mode" in
    ptx)
        name=$(basename "$source" .cu)
        printf '// type-check stand-in for %s\n' "$source" > "${directory:-.}/$name.ptx"
        ;;
    object)
        : > "$output"
        ;;
    library)
        printf '!<arch>\n' > "$output"
        ;;
    *)
        exec "$GEMV_REAL_NVCC" "$@"
        ;;
esac
