// The streaming model's microbenchmarks on a GPU (the device pack builds this with the machine's
// nvcc and runs it first): how fast the memory streams as a function of the bytes each SM keeps in
// flight, through plain loads and through a bulk-copy ring; how the time of one launch grows with
// its bytes (the ramp); loaded latency; and what a launch costs alone, in a chain of dependent
// launches, with programmatic dependent launch and inside a CUDA graph. The kernels are
// kernels/cuda/probes/memory_probes.cuh, proven on the emulator; every timed run is checked
// (its checksum against the host's, a chain's counter), and a failed check marks its row.
//
// Usage: memory_probes CSV [BUDGET_S]. Writes one row per measurement to CSV as it goes:
//   probe,config,bytes,inflight_per_sm,us,gbps,check
// bytes: what one timed launch (or chain) reads; inflight_per_sm: the bytes its loads or ring keep
// in flight per SM by construction (resident warps x loads per thread x 16 B, or blocks x depth x
// stage); us: the median of the timed repetitions; gbps: bytes / us / 1000.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "probes/memory_probes.cuh"

#define CHECK(call)                                                                                        \
    do {                                                                                                   \
        const cudaError_t status_ = (call);                                                                \
        if (status_ != cudaSuccess) {                                                                      \
            std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(status_)); \
            std::exit(2);                                                                                  \
        }                                                                                                  \
    } while (0)

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
#define PROBE_SM90 1
#else
#define PROBE_SM90 0
#endif

// ---- Kernels ----------------------------------------------------------------------------------

// Word i of the buffer: a hash of i, so that any skipped or repeated vector changes the XOR.
__host__ __device__ inline gemv_u32 pattern(gemv_u64 i) {
    gemv_u32 h = (gemv_u32)i * 0x9E3779B1u ^ (gemv_u32)(i >> 32);
    h ^= h >> 15;
    h *= 0x2C1B3C6Du;
    return h ^ (h >> 13);
}

__global__ void fill_kernel(gemv_u32* words, gemv_u64 count) {
    for (gemv_u64 i = blockIdx.x * (gemv_u64)blockDim.x + threadIdx.x; i < count; i += (gemv_u64)gridDim.x * blockDim.x)
        words[i] = pattern(i);
}

__device__ __forceinline__ void store_fold(gemv_u32* sink, gemv_u32 fold) {
    if (threadIdx.x % 32 == 0) sink[(blockIdx.x * blockDim.x + threadIdx.x) / 32] = fold;
}

template <int LOADS, bool HINTED>
__global__ void stream_kernel(const uint4* data, gemv_u64 vectors, gemv_u32* sink) {
    store_fold(sink, gemv_probe::warp_xor(gemv_probe::stream_fold<LOADS, HINTED>(data, vectors)));
}

template <int STAGE, int DEPTH, int CONSUMERS>
__global__ void ring_kernel(const gemv_u8* data, gemv_u64 stages, gemv_u32* sink) {
#if PROBE_SM90
    store_fold(sink, gemv_probe::warp_xor(gemv_probe::ring_fold<STAGE, DEPTH, CONSUMERS>(data, stages)));
#else
    __trap();
#endif
}

__global__ void chain_kernel(const uint4* weights, gemv_u64 vectors, const gemv_u32* in, gemv_u32* out,
                             gemv_u32* sink) {
#if PROBE_SM90
    store_fold(sink, gemv_probe::chain_fold<4>(weights, vectors, in, out));
#else
    __trap();
#endif
}

__global__ void chase_kernel(const gemv_u32* next, int hops, gemv_u32* out) {
    out[0] = gemv_probe::chase(next, hops);
}

// Node i of a chase (at word i * spacing) links to the LCG's next node (full period over a power
// of two: c odd, a = 1 mod 4), a stride that changes at every hop.
__host__ __device__ inline gemv_u32 next_node(gemv_u32 i, gemv_u32 nodes) {
    return (i * 1664525u + 1013904223u) & (nodes - 1u);
}
__global__ void link_kernel(gemv_u32* words, gemv_u32 nodes, gemv_u32 spacing) {
    for (gemv_u32 i = blockIdx.x * blockDim.x + threadIdx.x; i < nodes; i += gridDim.x * blockDim.x)
        words[(gemv_u64)i * spacing] = next_node(i, nodes) * spacing;
}

__global__ void empty_kernel() {}

// ---- Host -------------------------------------------------------------------------------------

namespace {

constexpr gemv_u64 kBuffer = 1ull << 30;  // read whole by each stream run: far past any L2
constexpr int kRepeats = 5;

struct Context {
    FILE* csv = nullptr;
    int sms = 0;
    int major = 0;
    std::chrono::steady_clock::time_point started;
    double budget_s = 120;
    gemv_u8* buffer = nullptr;
    gemv_u32* sink = nullptr;
    size_t sink_words = 0;
    std::vector<gemv_u32> prefix;  // prefix[i]: XOR of words [0, i)
    cudaStream_t stream = nullptr;
    cudaEvent_t start = nullptr, stop = nullptr;
    int failures = 0;

    bool time_left() const {
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count() < budget_s;
    }
    gemv_u32 expected_xor(gemv_u64 first_word, gemv_u64 words) const {
        return prefix[first_word + words] ^ prefix[first_word];
    }
    gemv_u32 sink_xor(size_t words) const {
        std::vector<gemv_u32> host(words);
        CHECK(cudaMemcpy(host.data(), sink, words * 4, cudaMemcpyDeviceToHost));
        gemv_u32 x = 0;
        for (gemv_u32 w : host) x ^= w;
        return x;
    }
    void row(const char* probe, const std::string& config, double bytes, double inflight, double us, bool ok) {
        if (!ok) ++failures;
        std::fprintf(csv, "%s,%s,%.0f,%.0f,%.3f,%.1f,%s\n", probe, config.c_str(), bytes, inflight, us,
                     us > 0 ? bytes / us / 1e3 : 0.0, ok ? "ok" : "FAIL");
        std::fflush(csv);
        std::printf("%-7s %-60s %10.1f us %8.1f GB/s %s\n", probe, config.c_str(), us, us > 0 ? bytes / us / 1e3 : 0.0,
                    ok ? "" : "CHECK FAILED");
        std::fflush(stdout);
    }
};

// The median time of `repeats` runs of `launch` (device events), in microseconds.
template <class Launch>
double median_us(Context& c, Launch launch, int repeats = kRepeats) {
    std::vector<float> times;
    launch();  // warm-up: module load, first-touch
    CHECK(cudaStreamSynchronize(c.stream));
    for (int r = 0; r < repeats; ++r) {
        CHECK(cudaEventRecord(c.start, c.stream));
        launch();
        CHECK(cudaEventRecord(c.stop, c.stream));
        CHECK(cudaEventSynchronize(c.stop));
        float ms = 0;
        CHECK(cudaEventElapsedTime(&ms, c.start, c.stop));
        times.push_back(ms * 1000.0f);
    }
    CHECK(cudaGetLastError());
    std::sort(times.begin(), times.end());
    return times[times.size() / 2];
}

std::string config(const char* format, ...) __attribute__((format(printf, 1, 2)));
std::string config(const char* format, ...) {
    char text[256];
    va_list args;
    va_start(args, format);
    std::vsnprintf(text, sizeof text, format, args);
    va_end(args);
    return text;
}

// Plain loads: every (block size, blocks per SM) x loads per thread x hint, over the whole buffer.
template <int LOADS, bool HINTED>
void stream_sweep(Context& c) {
    const int shapes[][2] = {{128, 1}, {256, 1}, {256, 2}, {256, 4}, {256, 6}, {256, 8}, {512, 4}, {1024, 2}};
    for (const auto& shape : shapes) {
        if (!c.time_left()) return;
        const int threads = shape[0], per_sm = shape[1];
        int resident = 0;
        CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&resident, stream_kernel<LOADS, HINTED>, threads, 0));
        if (resident < per_sm) continue;  // would not be one wave
        const int blocks = c.sms * per_sm;
        const gemv_u64 vectors = kBuffer / 16;
        const double us = median_us(c, [&] {
            stream_kernel<LOADS, HINTED><<<blocks, threads, 0, c.stream>>>(reinterpret_cast<const uint4*>(c.buffer),
                                                                           vectors, c.sink);
        });
        const bool ok = c.sink_xor((size_t)blocks * threads / 32) == c.expected_xor(0, kBuffer / 4);
        const int warps = per_sm * threads / 32;
        c.row("stream",
              config("threads=%d blocks_per_sm=%d warps_per_sm=%d loads=%d hint=%s", threads, per_sm, warps, LOADS,
                     HINTED ? "no_allocate" : "ldg"),
              (double)kBuffer, (double)warps * 32 * 16 * LOADS, us, ok);
    }
}

// One launch's time against its bytes (each launch from a new offset, so its bytes are cold).
void ramp_sweep(Context& c) {
    const double megabytes[] = {0.25, 0.5, 1, 2, 4, 8, 14.7, 16, 32, 64, 128, 256};
    gemv_u64 offset = 0;
    for (double mb : megabytes) {
        if (!c.time_left()) return;
        const gemv_u64 bytes = ((gemv_u64)(mb * (1 << 20)) + 4095) / 4096 * 4096;
        const int threads = 256, per_sm = 2;
        const int blocks = c.sms * per_sm;
        gemv_u64 first = 0;
        const double us = median_us(c, [&] {
            if (offset + bytes > kBuffer) offset = 0;
            first = offset;
            stream_kernel<8, true><<<blocks, threads, 0, c.stream>>>(reinterpret_cast<const uint4*>(c.buffer + offset),
                                                                     bytes / 16, c.sink);
            offset += bytes;
        });
        const bool ok = c.sink_xor((size_t)blocks * threads / 32) == c.expected_xor(first / 4, bytes / 4);
        c.row("ramp", config("threads=%d blocks_per_sm=%d loads=8 hint=no_allocate", threads, per_sm), (double)bytes,
              (double)per_sm * threads * 16 * 8, us, ok);
    }
}

template <int STAGE, int DEPTH, int CONSUMERS>
void ring_sweep(Context& c) {
    const int threads = (CONSUMERS + 1) * 32;
    int resident = 0;
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&resident, ring_kernel<STAGE, DEPTH, CONSUMERS>, threads, 0));
    for (int per_sm : {1, 2, 3, 4, 6}) {
        if (!c.time_left() || per_sm > resident) return;
        const int blocks = c.sms * per_sm;
        const gemv_u64 stages = kBuffer / STAGE;
        const double us = median_us(c, [&] {
            ring_kernel<STAGE, DEPTH, CONSUMERS><<<blocks, threads, 0, c.stream>>>(c.buffer, stages, c.sink);
        });
        const bool ok = c.sink_xor((size_t)blocks * threads / 32) == c.expected_xor(0, kBuffer / 4);
        c.row("ring",
              config("stage=%d depth=%d consumer_warps=%d blocks_per_sm=%d", STAGE, DEPTH, CONSUMERS, per_sm),
              (double)kBuffer, (double)per_sm * DEPTH * STAGE, us, ok);
    }
}

// Launch costs: an empty kernel back to back; chains of 8 dependent steps, each reading a cold
// qkv-sized slice of weights (or none), launched plainly or with programmatic dependent launch,
// directly or from a CUDA graph.
void launch_sweep(Context& c) {
    constexpr int kEmpty = 2000;
    {
        const double us = median_us(c, [&] {
            for (int i = 0; i < kEmpty; ++i) empty_kernel<<<1, 32, 0, c.stream>>>();
        });
        c.row("launch", config("empty_kernel back_to_back=%d", kEmpty), 0, 0, us / kEmpty, true);
    }
    if (c.major < 9) {
        std::printf("chain: programmatic dependent launch needs sm_90; skipped\n");
        return;
    }
    constexpr int kSteps = 8;
    const gemv_u64 slice = 14u << 20;  // about the qkv projection's NVFP4 bytes (5120 x 5120)
    gemv_u32* counters = nullptr;      // counters[0..kSteps]: step s reads s, writes s + 1
    CHECK(cudaMalloc(&counters, 4 * (kSteps + 1)));
    const int threads = 256, blocks = c.sms * 2;
    for (const bool weights : {false, true}) {
        for (const bool pdl : {false, true}) {
            for (const bool graph : {false, true}) {
                if (!c.time_left()) break;
                gemv_u64 offset = 0;
                // The chain's launches; the first launch error, if any.
                auto chain = [&]() -> cudaError_t {
                    for (int s = 0; s < kSteps; ++s) {
                        if (offset + slice > kBuffer) offset = 0;
                        const uint4* w = reinterpret_cast<const uint4*>(c.buffer + offset);
                        offset += slice;
                        cudaLaunchConfig_t launch = {};
                        launch.gridDim = dim3(blocks);
                        launch.blockDim = dim3(threads);
                        launch.stream = c.stream;
                        cudaLaunchAttribute attribute[1];
                        attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
                        attribute[0].val.programmaticStreamSerializationAllowed = 1;
                        launch.attrs = attribute;
                        launch.numAttrs = pdl ? 1 : 0;
                        const cudaError_t status =
                            cudaLaunchKernelEx(&launch, chain_kernel, w, weights ? slice / 16 : (gemv_u64)0,
                                               (const gemv_u32*)(counters + s), counters + s + 1, c.sink);
                        if (status != cudaSuccess) return status;
                    }
                    return cudaSuccess;
                };
                cudaGraphExec_t exec = nullptr;
                if (graph) {
                    // A driver that cannot capture this chain (PDL edges in graphs are recent) gives
                    // a row saying so, not the end of the run.
                    cudaGraph_t captured = nullptr;
                    CHECK(cudaStreamBeginCapture(c.stream, cudaStreamCaptureModeGlobal));
                    cudaError_t status = chain();
                    const cudaError_t ended = cudaStreamEndCapture(c.stream, &captured);
                    if (status == cudaSuccess) status = ended;
                    if (status == cudaSuccess) status = cudaGraphInstantiate(&exec, captured, 0);
                    if (captured) CHECK(cudaGraphDestroy(captured));
                    if (status != cudaSuccess) {
                        (void)cudaGetLastError();
                        c.row("chain",
                              config("steps=%d weights=%s pdl=%s graph=yes capture_failed=%s", kSteps,
                                     weights ? "14MiB" : "none", pdl ? "yes" : "no", cudaGetErrorName(status)),
                              0, 0, 0, false);
                        continue;
                    }
                }
                CHECK(cudaMemsetAsync(counters, 0, 4 * (kSteps + 1), c.stream));
                const double us = median_us(c, [&] {
                    if (graph) {
                        CHECK(cudaGraphLaunch(exec, c.stream));
                    } else {
                        CHECK(chain());
                    }
                });
                gemv_u32 last = 0;
                CHECK(cudaMemcpy(&last, counters + kSteps, 4, cudaMemcpyDeviceToHost));
                if (exec) CHECK(cudaGraphExecDestroy(exec));
                c.row("chain",
                      config("steps=%d weights=%s pdl=%s graph=%s per_step_us=%.2f", kSteps,
                             weights ? "14MiB" : "none", pdl ? "yes" : "no", graph ? "yes" : "no", us / kSteps),
                      weights ? (double)slice * kSteps : 0.0, 0, us, last == kSteps);
            }
        }
    }
    CHECK(cudaFree(counters));
}

// Latency of one dependent load at a time: from DRAM (nodes 256 B apart over the whole buffer)
// and from L2 (over 4 MiB, after a walk that brings it in).
void chase_sweep(Context& c) {
    struct Span {
        const char* level;
        gemv_u32 nodes;
    };
    const gemv_u32 spacing = 64;  // words: 256 B between nodes
    for (const Span& span : {Span{"dram", (gemv_u32)(kBuffer / 256)}, Span{"l2", (gemv_u32)((4u << 20) / 256)}}) {
        if (!c.time_left()) return;
        link_kernel<<<c.sms * 4, 256, 0, c.stream>>>(reinterpret_cast<gemv_u32*>(c.buffer), span.nodes, spacing);
        const int hops = 20000;
        const double us = median_us(c, [&] {
            chase_kernel<<<1, 1, 0, c.stream>>>(reinterpret_cast<const gemv_u32*>(c.buffer), hops, c.sink);
        }, 3);
        gemv_u32 end = 0, walked = 0;
        CHECK(cudaMemcpy(&end, c.sink, 4, cudaMemcpyDeviceToHost));
        for (int h = 0; h < hops; ++h) walked = next_node(walked, span.nodes);
        c.row("chase", config("level=%s hops=%d ns_per_hop=%.1f", span.level, hops, us * 1e3 / hops), 0, 0, us,
              end == walked * spacing);
    }
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: %s CSV [BUDGET_S]\n", argv[0]);
        return 2;
    }
    Context c;
    c.started = std::chrono::steady_clock::now();
    if (argc > 2) c.budget_s = std::atof(argv[2]);
    c.csv = std::fopen(argv[1], "w");
    if (!c.csv) {
        std::perror(argv[1]);
        return 2;
    }
    cudaDeviceProp prop{};
    CHECK(cudaGetDeviceProperties(&prop, 0));
    c.sms = prop.multiProcessorCount;
    c.major = prop.major;
    std::printf("memory_probes: %s, sm_%d%d, %d SMs, L2 %d MiB, budget %.0f s\n", prop.name, prop.major, prop.minor,
                c.sms, prop.l2CacheSize >> 20, c.budget_s);
    std::fprintf(c.csv, "# %s sm_%d%d sms=%d\nprobe,config,bytes,inflight_per_sm,us,gbps,check\n", prop.name,
                 prop.major, prop.minor, c.sms);
    CHECK(cudaStreamCreateWithFlags(&c.stream, cudaStreamNonBlocking));
    CHECK(cudaEventCreate(&c.start));
    CHECK(cudaEventCreate(&c.stop));
    CHECK(cudaMalloc(&c.buffer, kBuffer));
    c.sink_words = (size_t)c.sms * 64;  // one word per warp: 2048 threads per SM at most
    CHECK(cudaMalloc(&c.sink, c.sink_words * 4));
    fill_kernel<<<c.sms * 4, 256, 0, c.stream>>>(reinterpret_cast<gemv_u32*>(c.buffer), kBuffer / 4);
    c.prefix.resize(kBuffer / 4 + 1);
    c.prefix[0] = 0;
    for (gemv_u64 i = 0; i < kBuffer / 4; ++i) c.prefix[i + 1] = c.prefix[i] ^ pattern(i);
    CHECK(cudaStreamSynchronize(c.stream));

    // The device copy, for reference (read + write bytes).
    {
        const gemv_u64 half = kBuffer / 2;
        const double us = median_us(c, [&] {
            CHECK(cudaMemcpyAsync(c.buffer + half, c.buffer, half, cudaMemcpyDeviceToDevice, c.stream));
        });
        c.row("copy", config("cudaMemcpyAsync bytes_each_way=%llu", (unsigned long long)half), 2.0 * half, 0, us, true);
        fill_kernel<<<c.sms * 4, 256, 0, c.stream>>>(reinterpret_cast<gemv_u32*>(c.buffer), kBuffer / 4);
        CHECK(cudaStreamSynchronize(c.stream));
    }
    stream_sweep<1, false>(c);
    stream_sweep<2, false>(c);
    stream_sweep<4, false>(c);
    stream_sweep<8, false>(c);
    stream_sweep<16, false>(c);
    stream_sweep<4, true>(c);
    stream_sweep<8, true>(c);
    stream_sweep<16, true>(c);
    if (c.major >= 9) {
        ring_sweep<4096, 2, 4>(c);
        ring_sweep<4096, 4, 4>(c);
        ring_sweep<4096, 8, 4>(c);
        ring_sweep<8192, 2, 4>(c);
        ring_sweep<8192, 4, 4>(c);
        ring_sweep<16384, 2, 4>(c);
        ring_sweep<8192, 4, 8>(c);
        ring_sweep<16384, 2, 8>(c);
    } else {
        std::printf("ring: bulk copies need sm_90; skipped\n");
    }
    ramp_sweep(c);
    launch_sweep(c);
    chase_sweep(c);
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - c.started).count();
    std::printf("memory_probes: %.1f s, %d failed checks%s\n", elapsed, c.failures,
                c.time_left() ? "" : " (the budget ran out: later sweeps skipped)");
    std::fclose(c.csv);
    return c.failures == 0 ? 0 : 1;
}
