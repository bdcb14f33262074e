// A kernel tracer for any CUDA process, loaded with LD_PRELOAD (issue 14: profile first).
//
//   LD_PRELOAD=libkernel_trace.so LUCERNA_KERNEL_TRACE=trace.tsv lucerna-qwen35 ...
//
// It records every kernel, memcpy and memset the process runs on the GPU (kernels
// launched from CUDA graphs included) through CUPTI's activity API and writes one
// tab-separated line per activity:
//
//   kind  start_ns  end_ns  stream  graph  bytes  name
//
// kind is `kernel`, `memcpy` or `memset`; graph is the CUDA graph id (0: launched
// directly); bytes is 0 for kernels; name is the demangled kernel name or the copy's
// direction. bin/gpu-kernel-profile splits the trace into steps and summarises it.
//
// Why our own and not Nsight Systems: nsys is not on the H200 machines we borrow, and
// the one that ships with Nsight Compute writes a .qdstrm it cannot turn into a report
// there (/work/.library/device/KINDS.md). ncu replays every kernel, which at ~2,000
// kernels a token is minutes per step and serialises them, hiding the gaps we want to
// see. CUPTI's activity records cost a few hundred nanoseconds a kernel and keep the
// real timeline.
//
// The activity record structs are versioned (CUpti_ActivityKernelN); the build passes
// the newest ones its CUPTI headers declare as LUCERNA_KERNEL_RECORD and
// LUCERNA_MEMCPY_RECORD.

#include <cupti.h>

#include <cxxabi.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>

#ifndef LUCERNA_KERNEL_RECORD
#error "build with -DLUCERNA_KERNEL_RECORD=CUpti_ActivityKernelN (the newest N in cupti_activity.h)"
#endif
#ifndef LUCERNA_MEMCPY_RECORD
#error "build with -DLUCERNA_MEMCPY_RECORD=CUpti_ActivityMemcpyN"
#endif

namespace {

constexpr size_t kBufferBytes = 16u << 20;

std::FILE *g_out = nullptr;
std::mutex g_out_mutex;
std::atomic<bool> g_running{false};
std::thread g_flusher;

void check(CUptiResult result, const char *what) {
    if (result == CUPTI_SUCCESS) {
        return;
    }
    const char *message = nullptr;
    cuptiGetResultString(result, &message);
    std::fprintf(stderr, "kernel_trace: %s failed: %s\n", what, message ? message : "?");
}

std::string demangled(const char *name) {
    if (name == nullptr) {
        return "?";
    }
    int status = 0;
    char *plain = abi::__cxa_demangle(name, nullptr, nullptr, &status);
    std::string result = (status == 0 && plain != nullptr) ? plain : name;
    std::free(plain);
    for (char &c : result) {  // one record, one line
        if (c == '\t' || c == '\n') {
            c = ' ';
        }
    }
    return result;
}

const char *copy_direction(uint8_t kind) {
    switch (kind) {
        case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD: return "HtoD";
        case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH: return "DtoH";
        case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD: return "DtoD";
        case CUPTI_ACTIVITY_MEMCPY_KIND_HTOH: return "HtoH";
        case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP: return "PtoP";
        default: return "other";
    }
}

void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
    *buffer = static_cast<uint8_t *>(std::aligned_alloc(8, kBufferBytes));
    *size = *buffer ? kBufferBytes : 0;
    *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t *buffer, size_t, size_t valid) {
    std::lock_guard<std::mutex> lock(g_out_mutex);
    CUpti_Activity *record = nullptr;
    while (g_out != nullptr && cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
        switch (record->kind) {
            case CUPTI_ACTIVITY_KIND_KERNEL:
            case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
                auto *k = reinterpret_cast<LUCERNA_KERNEL_RECORD *>(record);
                std::fprintf(g_out, "kernel\t%llu\t%llu\t%u\t%u\t0\t%s\n",
                             static_cast<unsigned long long>(k->start),
                             static_cast<unsigned long long>(k->end), k->streamId, k->graphId,
                             demangled(k->name).c_str());
                break;
            }
            case CUPTI_ACTIVITY_KIND_MEMCPY: {
                auto *m = reinterpret_cast<LUCERNA_MEMCPY_RECORD *>(record);
                std::fprintf(g_out, "memcpy\t%llu\t%llu\t%u\t%u\t%llu\t%s\n",
                             static_cast<unsigned long long>(m->start),
                             static_cast<unsigned long long>(m->end), m->streamId, m->graphId,
                             static_cast<unsigned long long>(m->bytes),
                             copy_direction(m->copyKind));
                break;
            }
            case CUPTI_ACTIVITY_KIND_MEMSET: {
                auto *m = reinterpret_cast<CUpti_ActivityMemset4 *>(record);
                std::fprintf(g_out, "memset\t%llu\t%llu\t%u\t%u\t%llu\tmemset\n",
                             static_cast<unsigned long long>(m->start),
                             static_cast<unsigned long long>(m->end), m->streamId, m->graphId,
                             static_cast<unsigned long long>(m->bytes));
                break;
            }
            default:
                break;
        }
    }
    std::free(buffer);
}

void stop_tracing() {
    if (!g_running.exchange(false)) {
        return;
    }
    if (g_flusher.joinable()) {
        g_flusher.join();
    }
    cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    std::lock_guard<std::mutex> lock(g_out_mutex);
    if (g_out != nullptr) {
        std::fclose(g_out);
        g_out = nullptr;
    }
}

__attribute__((constructor)) void start_tracing() {
    const char *path = std::getenv("LUCERNA_KERNEL_TRACE");
    if (path == nullptr || *path == '\0') {
        return;  // preloaded but not asked for: stay out of the way
    }
    g_out = std::fopen(path, "w");
    if (g_out == nullptr) {
        std::fprintf(stderr, "kernel_trace: cannot write %s: %s\n", path, std::strerror(errno));
        return;
    }
    check(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed), "register");
    check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "enable kernels");
    check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY), "enable memcpy");
    check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET), "enable memset");
    g_running = true;
    // Completed buffers only reach us when flushed; a daemon killed by its parent never
    // runs destructors, so flush as we go and lose at most the last quarter second.
    g_flusher = std::thread([] {
        while (g_running) {
            std::this_thread::sleep_for(std::chrono::milliseconds(250));
            cuptiActivityFlushAll(0);
            std::lock_guard<std::mutex> lock(g_out_mutex);
            if (g_out != nullptr) {
                std::fflush(g_out);
            }
        }
    });
    std::atexit(stop_tracing);
}

}  // namespace
