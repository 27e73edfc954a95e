"""Compiling CUDA sources of coop's CuPy kernels with NVRTC: no device needed, so a CPU-only
run still catches a kernel that would not compile (skipped where libnvrtc is absent)."""
import pytest


def nvrtc_or_skip():
    try:
        from cupy.cuda import nvrtc
        nvrtc.getVersion()
    except Exception as err:   # CuPy absent, or no libnvrtc (pip install nvidia-cuda-nvrtc-cu12)
        pytest.skip(f"NVRTC is not available: {type(err).__name__}")
    return nvrtc


def compile_elementwise(preamble, body, params, ctype):
    """PTX (text) of an elementwise body wrapped as CuPy's ElementwiseKernel wraps it: one
    thread per output element i, `out` a reference to it, T the output's C type. Raises on an
    error, with NVRTC's log and the source."""
    nvrtc = nvrtc_or_skip()
    source = (f"typedef {ctype} T;\n{preamble}\nextern \"C\" __global__ void k({params}, T* outs, "
              f"long long n) {{\n  const long long i = (long long)blockIdx.x * blockDim.x + "
              f"threadIdx.x;\n  if (i >= n) return;\n  T& out = outs[i];\n{body}}}\n")
    program = nvrtc.createProgram(source, "k.cu", [], [])
    try:
        nvrtc.compileProgram(program, ["-arch=compute_80"])
    except nvrtc.NVRTCError as err:
        raise AssertionError(f"{err}\n{nvrtc.getProgramLog(program)}\n{source}") from None
    ptx = nvrtc.getPTX(program)
    return ptx.decode() if isinstance(ptx, bytes) else ptx
