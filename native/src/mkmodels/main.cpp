// lucerna-mkmodels: writes the small random-weight test GGUFs the test suite runs on.
//
//   lucerna-mkmodels --out DIR [--seed N] [--only name,name] [--verify] [--verbose]
//   lucerna-mkmodels --shape qwen36-27b|dflash-27b|qwen3-0.6b --out DIR [--layers N] [--ftype T]
//                    [--threads N] [--seed N] [--piece-pool N]
//   lucerna-mkmodels --probe FILE [--tokens N] [--threads N]
//   lucerna-mkmodels --kernel-check TYPE [--threads N]
//   lucerna-mkmodels --candidate-check WIDTH [--threads N]
//   lucerna-mkmodels --gpu-matmul-check TYPE[,TYPE...] [--threads N]
//   lucerna-mkmodels --list | --version
//
// --shape writes one full-size benchmark model (mkmodels/bench_shapes.h) instead of the
// test models, quantized as it is written. --piece-pool N: the pieces of one kind share
// N random ones, encoded once (a timing-only file in seconds instead of minutes); the
// 27B target's embedding and LM head keep distinct rows (bench_shapes.cpp).
//
// --probe prefills N tokens of FILE on the CPU and prints, per watched activation and
// layer, the largest |x| and the count of non-finite values (mkmodels/activation_probe.h):
//   probe <name> layer=<il> max_abs=<x> nonfinite=<n> count=<n>
//
// --kernel-check multiplies random TYPE weights by batches of activation rows on the
// CPU, batched and one row at a time (mkmodels/kernel_check.h), one line per batch size:
//   kernel_check type=<t> rows=<n> max_abs_diff=<x> max_abs=<x>
//
// --candidate-check runs the tree verify's device candidates (engine/candidate_sampler.h)
// on seeded logits on the best backend and compares them with the host's
// (mkmodels/candidate_check.h):
//   candidate_check backend=<name> width=<w> rows=<n> rows_equal=<n> max_logprob_diff=<x>
//
// --gpu-matmul-check multiplies TYPE weights by 1..8 and 16 activation columns on the
// first GPU, against the CPU backend, and times the 27B target's shapes
// (mkmodels/gpu_matmul_check.h):
//   gpu_matmul backend=<name> type=<t> k=<k> n=<n> cols=<c> nmse=<x> invariant=<0|1>
//   gpu_matmul_time backend=<name> type=<t> k=<k> n=<n> cols=<c> us=<x> gbps=<x>
//
// Progress and engine logs go to stderr. With --verify, each written file is loaded
// back from disk and (for generating models) greedily decoded in a real llama_context;
// one line per model goes to stdout:
//   verify <name> arch=<arch> n_vocab=<n> loaded=1 generated=1 prompt=1,2 tokens=3,4,...
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <sstream>
#include <string>
#include <vector>

#include "llama.h"
#include "mkmodels/activation_probe.h"
#include "mkmodels/bench_shapes.h"
#include "mkmodels/candidate_check.h"
#include "mkmodels/gpu_matmul_check.h"
#include "mkmodels/kernel_check.h"
#include "mkmodels/model_specs.h"
#include "mkmodels/model_writer.h"

#ifndef LUCERNA_ENGINE_SRC_DIR
#define LUCERNA_ENGINE_SRC_DIR ""
#endif

namespace {

using lucerna::mkmodels::ModelSpec;

struct Options {
    std::string out_dir;
    std::string vocab_dir = std::string(LUCERNA_ENGINE_SRC_DIR) + "/models";
    uint64_t seed = 42;
    std::vector<std::string> only;
    bool verify = false;
    bool verbose = false;
    lucerna::mkmodels::ShapeOptions shape;  // shape.shape non-empty: --shape mode
    std::string probe;                      // non-empty: --probe mode
    std::string kernel_check;               // non-empty: --kernel-check mode
    int32_t candidate_check = 0;            // > 0: --candidate-check mode, this width
    std::vector<std::string> gpu_matmul;    // non-empty: --gpu-matmul-check mode, these types
    int32_t probe_tokens = 1024;
};

void usage(FILE * to) {
    std::fprintf(to,
                 "usage: lucerna-mkmodels --out DIR [--seed N] [--only name,name] [--verify] [--verbose]\n"
                 "                        [--vocab-dir DIR]\n"
                 "       lucerna-mkmodels --shape qwen36-27b|dflash-27b|qwen3-0.6b --out DIR [--layers N] [--ftype T]\n"
                 "                        [--threads N] [--seed N] [--piece-pool N]\n"
                 "       lucerna-mkmodels --probe FILE [--tokens N] [--threads N]\n"
                 "       lucerna-mkmodels --kernel-check TYPE [--threads N]\n"
                 "       lucerna-mkmodels --candidate-check WIDTH [--threads N]\n"
                 "       lucerna-mkmodels --gpu-matmul-check TYPE[,TYPE...] [--threads N]\n"
                 "       lucerna-mkmodels --list | --version\n");
}

std::vector<std::string> split_commas(const std::string & text) {
    std::vector<std::string> out;
    std::stringstream stream(text);
    std::string item;
    while (std::getline(stream, item, ',')) {
        if (!item.empty()) {
            out.push_back(item);
        }
    }
    return out;
}

std::string join_ids(const std::vector<int32_t> & ids) {
    std::string out;
    for (size_t i = 0; i < ids.size(); ++i) {
        out += (i ? "," : "") + std::to_string(ids[i]);
    }
    return out;
}

bool g_verbose = false;

void log_to_stderr(ggml_log_level level, const char * text, void *) {
    if (g_verbose || level >= GGML_LOG_LEVEL_WARN) {
        std::fputs(text, stderr);
    }
}

// Accepts --name=value and --name value.
bool parse_args(int argc, char ** argv, Options & opts, int & exit_code) {
    for (int i = 1; i < argc; ++i) {
        std::string arg = argv[i];
        std::string value;
        bool has_value = false;
        const size_t eq = arg.find('=');
        if (arg.rfind("--", 0) == 0 && eq != std::string::npos) {
            value = arg.substr(eq + 1);
            arg = arg.substr(0, eq);
            has_value = true;
        }
        auto need_value = [&]() -> bool {
            if (has_value) {
                return true;
            }
            if (i + 1 >= argc) {
                std::fprintf(stderr, "lucerna-mkmodels: %s needs a value\n", arg.c_str());
                return false;
            }
            value = argv[++i];
            return true;
        };
        if (arg == "--out") {
            if (!need_value()) return exit_code = 2, false;
            opts.out_dir = value;
        } else if (arg == "--vocab-dir") {
            if (!need_value()) return exit_code = 2, false;
            opts.vocab_dir = value;
        } else if (arg == "--seed") {
            if (!need_value()) return exit_code = 2, false;
            char * end = nullptr;
            opts.seed = std::strtoull(value.c_str(), &end, 10);
            if (value.empty() || *end != '\0') {
                std::fprintf(stderr, "lucerna-mkmodels: --seed wants an unsigned integer, not '%s'\n", value.c_str());
                return exit_code = 2, false;
            }
        } else if (arg == "--only") {
            if (!need_value()) return exit_code = 2, false;
            opts.only = split_commas(value);
        } else if (arg == "--shape") {
            if (!need_value()) return exit_code = 2, false;
            opts.shape.shape = value;
        } else if (arg == "--probe") {
            if (!need_value()) return exit_code = 2, false;
            opts.probe = value;
        } else if (arg == "--kernel-check") {
            if (!need_value()) return exit_code = 2, false;
            opts.kernel_check = value;
        } else if (arg == "--gpu-matmul-check") {
            if (!need_value()) return exit_code = 2, false;
            opts.gpu_matmul = split_commas(value);
        } else if (arg == "--candidate-check") {
            if (!need_value()) return exit_code = 2, false;
            char * end = nullptr;
            const long parsed = std::strtol(value.c_str(), &end, 10);
            if (value.empty() || *end != '\0' || parsed < 1 || parsed > 64) {
                std::fprintf(stderr, "lucerna-mkmodels: --candidate-check wants a width of 1..64, not '%s'\n",
                             value.c_str());
                return exit_code = 2, false;
            }
            opts.candidate_check = static_cast<int32_t>(parsed);
        } else if (arg == "--ftype") {
            if (!need_value()) return exit_code = 2, false;
            opts.shape.ftype = value;
        } else if (arg == "--tokens") {
            if (!need_value()) return exit_code = 2, false;
            char * end = nullptr;
            const long parsed = std::strtol(value.c_str(), &end, 10);
            if (value.empty() || *end != '\0' || parsed < 1 || parsed > 262144) {
                std::fprintf(stderr, "lucerna-mkmodels: --tokens wants 1..262144, not '%s'\n", value.c_str());
                return exit_code = 2, false;
            }
            opts.probe_tokens = static_cast<int32_t>(parsed);
        } else if (arg == "--layers" || arg == "--threads" || arg == "--piece-pool") {
            if (!need_value()) return exit_code = 2, false;
            char * end = nullptr;
            const long parsed = std::strtol(value.c_str(), &end, 10);
            if (value.empty() || *end != '\0' || parsed < 1 || parsed > 4096) {
                std::fprintf(stderr, "lucerna-mkmodels: %s wants a positive integer, not '%s'\n", arg.c_str(),
                             value.c_str());
                return exit_code = 2, false;
            }
            (arg == "--layers" ? opts.shape.target_layers
                               : (arg == "--threads" ? opts.shape.threads : opts.shape.piece_pool)) =
                static_cast<int32_t>(parsed);
        } else if (arg == "--verify") {
            opts.verify = true;
        } else if (arg == "--verbose") {
            opts.verbose = true;
        } else if (arg == "--list") {
            for (const auto & spec : lucerna::mkmodels::model_specs()) {
                std::printf("%s\t%s\n", spec.name.c_str(), spec.description.c_str());
            }
            for (const auto & [name, description] : lucerna::mkmodels::bench_shapes()) {
                std::printf("--shape %s\t%s\n", name.c_str(), description.c_str());
            }
            return exit_code = 0, false;
        } else if (arg == "--version") {
            std::printf("lucerna-mkmodels generator=%d\n", lucerna::mkmodels::kGeneratorVersion);
            return exit_code = 0, false;
        } else if (arg == "--help" || arg == "-h") {
            usage(stdout);
            return exit_code = 0, false;
        } else {
            std::fprintf(stderr, "lucerna-mkmodels: unknown argument '%s'\n", argv[i]);
            usage(stderr);
            return exit_code = 2, false;
        }
    }
    if (opts.out_dir.empty() && opts.probe.empty() && opts.kernel_check.empty() && opts.candidate_check == 0 &&
        opts.gpu_matmul.empty()) {
        std::fprintf(stderr, "lucerna-mkmodels: --out DIR is required\n");
        usage(stderr);
        return exit_code = 2, false;
    }
    return true;
}

}  // namespace

int main(int argc, char ** argv) {
    Options opts;
    int exit_code = 0;
    if (!parse_args(argc, argv, opts, exit_code)) {
        return exit_code;
    }
    g_verbose = opts.verbose;
    llama_log_set(log_to_stderr, nullptr);
    llama_backend_init();

    if (!opts.probe.empty()) {
        int status = 0;
        try {
            const int32_t threads = opts.shape.threads > 0 ? opts.shape.threads : 2;
            const auto stats = lucerna::mkmodels::probe_activations(opts.probe, opts.probe_tokens, 512, threads);
            for (const auto & stat : stats) {
                std::printf("probe %s layer=%d max_abs=%.6g nonfinite=%llu count=%llu\n", stat.name.c_str(), stat.layer,
                            stat.max_abs, static_cast<unsigned long long>(stat.nonfinite),
                            static_cast<unsigned long long>(stat.count));
            }
        } catch (const std::exception & err) {
            std::fprintf(stderr, "mkmodels: --probe %s failed: %s\n", opts.probe.c_str(), err.what());
            status = 1;
        }
        llama_backend_free();
        return status;
    }

    if (!opts.kernel_check.empty()) {
        int status = 0;
        try {
            const int32_t threads = opts.shape.threads > 0 ? opts.shape.threads : 2;
            for (const auto & check : lucerna::mkmodels::check_kernel(opts.kernel_check, threads)) {
                std::printf("kernel_check type=%s rows=%lld max_abs_diff=%.9g max_abs=%.9g\n",
                            opts.kernel_check.c_str(), static_cast<long long>(check.rows), check.max_abs_diff,
                            check.max_abs);
            }
        } catch (const std::exception & err) {
            std::fprintf(stderr, "mkmodels: --kernel-check %s failed: %s\n", opts.kernel_check.c_str(), err.what());
            status = 1;
        }
        llama_backend_free();
        return status;
    }

    if (opts.candidate_check > 0) {
        int status = 0;
        try {
            const int32_t threads = opts.shape.threads > 0 ? opts.shape.threads : 2;
            const auto check = lucerna::mkmodels::check_candidates(opts.candidate_check, threads);
            std::printf("candidate_check backend=%s width=%d rows=%d rows_equal=%d max_logprob_diff=%.9g\n",
                        check.backend.c_str(), opts.candidate_check, check.rows, check.rows_equal,
                        check.max_logprob_diff);
        } catch (const std::exception & err) {
            std::fprintf(stderr, "mkmodels: --candidate-check failed: %s\n", err.what());
            status = 1;
        }
        llama_backend_free();
        return status;
    }

    if (!opts.gpu_matmul.empty()) {
        int status = 0;
        try {
            const int32_t threads = opts.shape.threads > 0 ? opts.shape.threads : 2;
            const auto check = lucerna::mkmodels::check_gpu_matmul(opts.gpu_matmul, threads);
            for (const auto & a : check.accuracy) {
                std::printf("gpu_matmul backend=%s type=%s k=%lld n=%lld cols=%lld nmse=%.3g invariant=%d\n",
                            check.backend.c_str(), a.type.c_str(), static_cast<long long>(a.k),
                            static_cast<long long>(a.n), static_cast<long long>(a.cols), a.nmse, a.invariant ? 1 : 0);
            }
            for (const auto & t : check.timing) {
                std::printf("gpu_matmul_time backend=%s type=%s k=%lld n=%lld cols=%lld us=%.2f gbps=%.1f\n",
                            check.backend.c_str(), t.type.c_str(), static_cast<long long>(t.k),
                            static_cast<long long>(t.n), static_cast<long long>(t.cols), t.us, t.gbps);
            }
        } catch (const std::exception & err) {
            std::fprintf(stderr, "mkmodels: --gpu-matmul-check failed: %s\n", err.what());
            status = 1;
        }
        llama_backend_free();
        return status;
    }

    if (!opts.shape.shape.empty()) {
        opts.shape.out_dir = opts.out_dir;
        opts.shape.vocab_dir = opts.vocab_dir;
        opts.shape.seed = opts.seed;
        int status = 0;
        try {
            lucerna::mkmodels::write_bench_shape(opts.shape);
        } catch (const std::exception & err) {
            std::fprintf(stderr, "mkmodels: --shape %s failed: %s\n", opts.shape.shape.c_str(), err.what());
            status = 1;
        }
        llama_backend_free();
        return status;
    }

    std::vector<ModelSpec> selected;
    for (const auto & spec : lucerna::mkmodels::model_specs()) {
        bool wanted = opts.only.empty() && !spec.on_request;
        for (const auto & name : opts.only) {
            wanted = wanted || name == spec.name;
        }
        if (wanted) {
            selected.push_back(spec);
        }
    }
    for (const auto & name : opts.only) {
        bool known = false;
        for (const auto & spec : lucerna::mkmodels::model_specs()) {
            known = known || spec.name == name;
        }
        if (!known) {
            std::fprintf(stderr, "lucerna-mkmodels: unknown model '%s' (see --list)\n", name.c_str());
            return 2;
        }
    }

    int failures = 0;
    for (const auto & spec : selected) {
        const auto t0 = std::chrono::steady_clock::now();
        try {
            const auto written = lucerna::mkmodels::write_model(spec, opts.vocab_dir, opts.out_dir, opts.seed);
            const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            std::fprintf(stderr, "mkmodels: %-9s -> %s (%.1f MB, %zu tensors, %.1f s)\n", spec.name.c_str(),
                         written.path.c_str(), static_cast<double>(written.bytes) / 1e6, written.n_tensors, secs);
            if (opts.verify) {
                const auto check = lucerna::mkmodels::verify_model(spec, written.path, 8);
                std::printf("verify %s arch=%s n_vocab=%d loaded=%d generated=%d prompt=%s tokens=%s%s%s\n",
                            spec.name.c_str(), check.arch.c_str(), check.n_vocab, check.loaded ? 1 : 0,
                            check.generated ? 1 : 0, join_ids(check.prompt).c_str(), join_ids(check.tokens).c_str(),
                            check.note.empty() ? "" : " note=", check.note.c_str());
                std::fflush(stdout);
                const bool ok = check.loaded && check.generated;
                if (!ok) {
                    std::fprintf(stderr, "mkmodels: %s failed verification: %s\n", spec.name.c_str(),
                                 check.note.c_str());
                    ++failures;
                }
            }
        } catch (const std::exception & err) {
            std::fprintf(stderr, "mkmodels: %s failed: %s\n", spec.name.c_str(), err.what());
            ++failures;
        }
    }
    llama_backend_free();
    return failures == 0 ? 0 : 1;
}
