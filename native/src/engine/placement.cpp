#include "engine/placement.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <regex>
#include <set>

#include "engine/log.h"
#include "ggml-backend.h"
#include "ggml-cpp.h"
#include "gguf.h"
#include "wire/errors.h"
// llama-ext.h (the engine's staging API) is the only way to read back which buffer
// type holds how many bytes of weights; engine/engine.cpp uses it for devices.
#include "llama-ext.h"

namespace lucerna {
namespace {

constexpr int kConnectTimeoutMs = 5000;

// The engine's RPC client aborts the process when a server does not answer
// (GGML_ABORT in its dispatcher), so we knock first and turn a dead endpoint into an
// ordinary startup error.
bool endpoint_answers(const std::string & endpoint) {
    std::string host;
    int port = 0;
    if (!split_endpoint(endpoint, host, port)) {
        return false;
    }
    addrinfo hints{};
    hints.ai_family = AF_INET;  // the engine's RPC transport speaks IPv4 only
    hints.ai_socktype = SOCK_STREAM;
    addrinfo * found = nullptr;
    if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0 || found == nullptr) {
        return false;
    }
    bool ok = false;
    for (addrinfo * ai = found; ai != nullptr && !ok; ai = ai->ai_next) {
        const int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0) {
            continue;
        }
        if (::connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
            ok = true;
        } else if (errno == EINPROGRESS) {
            pollfd pfd{fd, POLLOUT, 0};
            int error = 0;
            socklen_t len = sizeof(error);
            ok = ::poll(&pfd, 1, kConnectTimeoutMs) == 1 && ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len) == 0 &&
                 error == 0;
        }
        ::close(fd);
    }
    ::freeaddrinfo(found);
    return ok;
}

using AddServerFn = ggml_backend_reg_t (*)(const char * endpoint);

// Through the registry, as llama.cpp's --rpc does, so the core library needs no link
// to libggml-rpc and an engine built without RPC gives a clear error.
AddServerFn rpc_add_server_fn() {
    ggml_backend_reg_t reg = ggml_backend_reg_by_name("RPC");
    if (reg == nullptr) {
        return nullptr;
    }
    return reinterpret_cast<AddServerFn>(ggml_backend_reg_get_proc_address(reg, "ggml_backend_rpc_add_server"));
}

bool is_rpc_device(ggml_backend_dev_t dev) {
    return std::strcmp(ggml_backend_reg_name(ggml_backend_dev_backend_reg(dev)), "RPC") == 0;
}

// The engine's own default choice of local accelerators: discrete GPUs, or the
// integrated ones when there is none. The CPU is never listed; it is always there.
std::vector<ggml_backend_dev_t> local_gpus() {
    std::vector<ggml_backend_dev_t> gpus;
    std::vector<ggml_backend_dev_t> igpus;
    for (size_t i = 0; i < ggml_backend_dev_count(); ++i) {
        ggml_backend_dev_t dev = ggml_backend_dev_get(i);
        if (is_rpc_device(dev)) {
            continue;
        }
        switch (ggml_backend_dev_type(dev)) {
            case GGML_BACKEND_DEVICE_TYPE_GPU: gpus.push_back(dev); break;
            case GGML_BACKEND_DEVICE_TYPE_IGPU: igpus.push_back(dev); break;
            default: break;
        }
    }
    return gpus.empty() ? igpus : gpus;
}

std::vector<ggml_backend_dev_t> register_rpc_servers(const std::vector<std::string> & servers) {
    std::vector<ggml_backend_dev_t> devices;
    if (servers.empty()) {
        return devices;
    }
    const AddServerFn add_server = rpc_add_server_fn();
    if (add_server == nullptr) {
        throw ProtocolError(ErrorCode::kBadFlag, "--rpc: this engine build has no RPC backend (GGML_RPC=OFF)");
    }
    std::set<std::string> seen;
    for (const auto & endpoint : servers) {
        // One client connection per endpoint at a time is all a ggml RPC server serves;
        // a second one to the same server would wait forever.
        if (!seen.insert(endpoint).second) {
            throw ProtocolError(ErrorCode::kBadFlag, "--rpc lists " + endpoint + " twice");
        }
        if (!endpoint_answers(endpoint)) {
            throw ProtocolError(ErrorCode::kRpcFailed,
                                "RPC server " + endpoint + " does not accept connections (is the shard running?)");
        }
        ggml_backend_reg_t reg = add_server(endpoint.c_str());
        if (reg == nullptr || ggml_backend_reg_dev_count(reg) == 0) {
            throw ProtocolError(ErrorCode::kLoadFailed, "RPC server " + endpoint + " offers no device");
        }
        for (size_t i = 0; i < ggml_backend_reg_dev_count(reg); ++i) {
            ggml_backend_dev_t dev = ggml_backend_reg_dev_get(reg, i);
            log_line("--rpc %s: device %s", endpoint.c_str(), ggml_backend_dev_name(dev));
            devices.push_back(dev);
        }
    }
    return devices;
}

// --override-tensor's DEVICE: a device name (CPU, CUDA0, RPC0), or, as llama.cpp's -ot
// takes, a buffer type name (CUDA0, CUDA_Host, RPC0[host:port]).
ggml_backend_buffer_type_t resolve_device(const std::string & name, const std::vector<ggml_backend_dev_t> & rpc) {
    std::vector<ggml_backend_dev_t> all;
    for (size_t i = 0; i < ggml_backend_dev_count(); ++i) {
        all.push_back(ggml_backend_dev_get(i));
    }
    all.insert(all.end(), rpc.begin(), rpc.end());
    std::string known;
    for (ggml_backend_dev_t dev : all) {
        ggml_backend_buffer_type_t buft = ggml_backend_dev_buffer_type(dev);
        ggml_backend_buffer_type_t host = ggml_backend_dev_host_buffer_type(dev);
        if (name == ggml_backend_dev_name(dev) || (buft != nullptr && name == ggml_backend_buft_name(buft))) {
            return buft;
        }
        if (host != nullptr && name == ggml_backend_buft_name(host)) {
            return host;
        }
        known += (known.empty() ? "" : ", ") + std::string(ggml_backend_dev_name(dev));
    }
    throw ProtocolError(ErrorCode::kBadFlag, "--override-tensor: no device named " + name + "; devices are " + known);
}

// Layer indices that hold routed experts, from the GGUF's tensor names, so the count
// is right for any MoE architecture (leading dense layers, interleaved MoE, ...).
std::vector<int> moe_layers(const std::string & model_path) {
    gguf_init_params params = {/*no_alloc =*/true, /*ctx =*/nullptr};
    const gguf_context_ptr ctx(gguf_init_from_file(model_path.c_str(), params));
    if (!ctx) {
        throw ProtocolError(ErrorCode::kLoadFailed, model_path + " is not a readable GGUF file");
    }
    static const std::regex kExperts(R"(^blk\.(\d+)\.ffn_(up|down|gate|gate_up)_(ch|)exps\.)");
    std::set<int> layers;
    for (int64_t i = 0; i < gguf_get_n_tensors(ctx.get()); ++i) {
        std::cmatch match;
        if (std::regex_search(gguf_get_tensor_name(ctx.get(), i), match, kExperts)) {
            layers.insert(std::stoi(match[1].str()));
        }
    }
    return {layers.begin(), layers.end()};
}

}  // namespace

std::string stats_key(const std::string & buft_name) {
    std::string key = "buft_";
    bool gap = false;
    for (const char c : buft_name) {
        const char lower = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        if ((lower >= 'a' && lower <= 'z') || (lower >= '0' && lower <= '9')) {
            if (gap && key.back() != '_') {
                key += '_';
            }
            key += lower;
            gap = false;
        } else {
            gap = true;
        }
    }
    return key + "_bytes";
}

std::unique_ptr<Placement> Placement::plan(const PlacementOptions & opts, const std::string & model_path,
                                           int32_t n_gpu_layers) {
    std::unique_ptr<Placement> owned(new Placement());
    Placement & placement = *owned;
    const std::vector<ggml_backend_dev_t> rpc = register_rpc_servers(opts.rpc_servers);
    if (!rpc.empty()) {
        const std::vector<ggml_backend_dev_t> local = local_gpus();
        placement.devices_ = local;
        placement.devices_.insert(placement.devices_.end(), rpc.begin(), rpc.end());
        placement.devices_.push_back(nullptr);
        if (!local.empty()) {
            // Weighted like the engine's default (free memory), with nothing for RPC devices.
            placement.tensor_split_.assign(std::max<size_t>(llama_max_devices(), placement.devices_.size()), 0.0f);
            for (size_t i = 0; i < local.size(); ++i) {
                size_t free = 0;
                size_t total = 0;
                ggml_backend_dev_memory(local[i], &free, &total);
                placement.tensor_split_[i] = std::max(1.0f, static_cast<float>(free));
            }
        }
    }

    auto add_override = [&placement](std::string pattern, ggml_backend_buffer_type_t buft) {
        placement.patterns_.push_back(std::move(pattern));
        placement.overrides_.push_back({placement.patterns_.back().c_str(), buft});
    };
    if (opts.experts_in_host) {
        const std::vector<int> layers = moe_layers(model_path);
        const auto n_host =
            static_cast<size_t>(std::lround(*opts.experts_in_host * static_cast<double>(layers.size())));
        ggml_backend_dev_t cpu = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
        for (size_t i = 0; i < n_host && cpu != nullptr; ++i) {
            add_override("^blk\\." + std::to_string(layers[i]) + "\\.ffn_(up|down|gate|gate_up)_(ch|)exps",
                         ggml_backend_dev_buffer_type(cpu));
        }
        log_line("--experts-in-host=%g: experts of %zu of %zu MoE layers stay in host memory", *opts.experts_in_host,
                 n_host, layers.size());
        if (n_gpu_layers == 0 && rpc.empty()) {
            log_line("--experts-in-host has no effect with --n-gpu-layers=0: every weight is in host memory");
        }
    }
    for (const auto & ov : opts.overrides) {
        add_override(ov.pattern, resolve_device(ov.device, rpc));
    }
    if (!placement.overrides_.empty()) {
        placement.overrides_.push_back({nullptr, nullptr});
    }
    return owned;
}

void Placement::apply(llama_model_params & params) const {
    if (!devices_.empty()) {
        params.devices = const_cast<ggml_backend_dev_t *>(devices_.data());
    }
    if (!tensor_split_.empty()) {
        params.tensor_split = tensor_split_.data();
    }
    if (!overrides_.empty()) {
        params.tensor_buft_overrides = overrides_.data();
    }
    if (!devices_.empty() || !overrides_.empty()) {
        // A mapped file is one host buffer spanning every tensor between the first and
        // the last one kept in host memory, those sent elsewhere included, so host
        // memory would count (and keep mapped) the experts we moved away; the engine
        // also advises against mmap with overrides. Read host tensors into their own
        // buffers instead.
        params.load_mode = LLAMA_LOAD_MODE_NONE;
    }
}

std::string Placement::describe() const {
    if (devices_.empty() && patterns_.empty()) {
        return {};
    }
    std::string devices;
    for (ggml_backend_dev_t dev : devices_) {
        if (dev != nullptr) {
            devices += (devices.empty() ? "" : ",") + std::string(ggml_backend_dev_name(dev));
        }
    }
    return "devices=" + (devices.empty() ? std::string("default") : devices) +
           " overrides=" + std::to_string(patterns_.size());
}

WeightPlacement weight_placement(const llama_context * ctx) {
    WeightPlacement out;
    if (ctx == nullptr) {
        return out;
    }
    for (const auto & [buft, mb] : llama_get_memory_breakdown(ctx)) {
        if (mb.model == 0) {
            continue;
        }
        out.by_buffer_type.emplace_back(ggml_backend_buft_name(buft), mb.model);
        (ggml_backend_buft_is_host(buft) ? out.host_bytes : out.device_bytes) += mb.model;
    }
    std::sort(out.by_buffer_type.begin(), out.by_buffer_type.end());
    return out;
}

std::vector<std::pair<std::string, uint64_t>> weight_stats_fields(const llama_context * ctx) {
    if (ctx == nullptr) {
        return {};  // the ds4 shard: what it holds is its clients' (RpcServer::held_stats_fields)
    }
    const WeightPlacement placement = weight_placement(ctx);
    std::vector<std::pair<std::string, uint64_t>> fields = {{"bytes_host", placement.host_bytes},
                                                            {"bytes_device", placement.device_bytes}};
    for (const auto & [name, bytes] : placement.by_buffer_type) {
        fields.emplace_back(stats_key(name), bytes);
    }
    return fields;
}

}  // namespace lucerna
