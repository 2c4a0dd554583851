"""Compiles one CUDA source to PTX with NVRTC (the runtime compiler library, from PyPI).

Usage: nvrtc_ptx.py LIBNVRTC SOURCE OUTPUT [NVRTC OPTIONS...]

Run by `cargo xtask kernels` and `cargo xtask sass` with a pinned NVRTC 12.2, whose PTX
(ISA 8.2) every driver from the 535 branch on can load; nvcc 13 would write ISA 9.0, which only
drivers from 580 load. The compile log goes to stderr; a failed compile exits non-zero.
"""
import ctypes
import sys


def main(library, source_path, output_path, options):
    nvrtc = ctypes.CDLL(library)
    source = open(source_path, "rb").read()
    program = ctypes.c_void_p()

    def check(result, what):
        if result != 0:
            sys.exit(f"nvrtc: {what} failed with code {result}")

    check(nvrtc.nvrtcCreateProgram(ctypes.byref(program), source, source_path.encode(), 0, None, None), "create")
    encoded = [option.encode() for option in options]
    result = nvrtc.nvrtcCompileProgram(program, len(encoded), (ctypes.c_char_p * len(encoded))(*encoded))
    size = ctypes.c_size_t()
    check(nvrtc.nvrtcGetProgramLogSize(program, ctypes.byref(size)), "log size")
    log = ctypes.create_string_buffer(size.value)
    check(nvrtc.nvrtcGetProgramLog(program, log), "log")
    if log.value.strip():
        sys.stderr.write(log.value.decode(errors="replace") + "\n")
    check(result, f"compiling {source_path}")
    check(nvrtc.nvrtcGetPTXSize(program, ctypes.byref(size)), "PTX size")
    ptx = ctypes.create_string_buffer(size.value)
    check(nvrtc.nvrtcGetPTX(program, ptx), "PTX")
    with open(output_path, "wb") as out:
        out.write(ptx.value)
    nvrtc.nvrtcDestroyProgram(ctypes.byref(program))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:])
