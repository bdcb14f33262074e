#include "engine/state_memory.h"

#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>

namespace lucerna {
namespace {

constexpr size_t kGranule = size_t(64) << 10;
constexpr uint64_t kKeptBytes = uint64_t(512) << 20;
// A kept block serves a state up to this many times smaller: a snapshot holds the
// recurrent state (the same size for every sequence) and the conversation's KV cells
// (64 KiB a token on the 27B shape), so two conversations' snapshots differ in size and
// an exact fit would leave every snapshot to a fresh block.
constexpr size_t kFitSlack = 2;  // a block of `size` serves states of size/2 .. size
// Page-locked memory cannot be swapped out: past this much in use, states take plain
// memory (a 27B's 16 checkpoints on each of 8 sequences would otherwise lock 19 GB).
constexpr uint64_t kLockedBytes = uint64_t(4) << 30;

size_t rounded(size_t bytes) {
    return (bytes + kGranule - 1) / kGranule * kGranule;
}

struct Block {
    void * data = nullptr;
    size_t size = 0;                            // bytes, a multiple of kGranule
    ggml_backend_buffer_t buffer = nullptr;     // null: malloc'd
    ggml_backend_buffer_type_t type = nullptr;  // what it came from (null: malloc)
    size_t locked = 0;                          // bytes of it page-locked
};

class StateMemory {
public:
    void use(ggml_backend_dev_t device) {
        const char * pageable = std::getenv("LUCERNA_PAGEABLE_STATES");
        const bool lock_pages = device != nullptr && (pageable == nullptr || std::string(pageable) != "1");
        ggml_backend_buffer_type_t type = lock_pages ? ggml_backend_dev_host_buffer_type(device) : nullptr;
        std::lock_guard<std::mutex> lock(mutex_);
        if (type == type_) {
            return;
        }
        // Kept blocks are of the old kind: freed, so that every kept block is of type_.
        free_kept();
        type_ = type;
    }

    void * allocate(size_t bytes) {
        const size_t size = rounded(bytes == 0 ? 1 : bytes);
        std::lock_guard<std::mutex> lock(mutex_);
        // The smallest kept block that holds `size`, if it is not too large for it.
        const auto kept = kept_.lower_bound(size);
        if (serves(kept, size)) {
            const Block block = kept->second;
            kept_.erase(kept);
            stats_.kept_bytes -= block.size;
            ++stats_.reused;
            live_[block.data] = block;
            return block.data;
        }
        const Block block = new_block(size);
        live_[block.data] = block;
        spare_for_ = size;
        return block.data;
    }

    bool make_spare() {
        std::lock_guard<std::mutex> lock(mutex_);
        const size_t wanted = spare_for_;
        spare_for_ = 0;
        if (wanted == 0 || serves(kept_.lower_bound(wanted), wanted)) {
            return false;
        }
        const size_t size = rounded(wanted + wanted / 4);
        if (stats_.kept_bytes + size > keep_limit_) {
            return false;
        }
        try {
            const Block block = new_block(size);
            kept_.emplace(block.size, block);
            stats_.kept_bytes += block.size;
        } catch (const std::bad_alloc &) {
            return false;  // states take memory as they come, as without the spare
        }
        return true;
    }

    void reserve(size_t bytes, int count) {
        const size_t size = rounded(bytes == 0 ? 1 : bytes);
        std::lock_guard<std::mutex> lock(mutex_);
        for (; reserved_ < count; ++reserved_) {
            const Block block = new_block(size);
            kept_.emplace(block.size, block);
            stats_.kept_bytes += block.size;
            keep_limit_ += block.size;  // kept for good: freed states return to them
        }
    }

    void drop_kept() {
        std::lock_guard<std::mutex> lock(mutex_);
        free_kept();
    }

    bool page_locked() {
        std::lock_guard<std::mutex> lock(mutex_);
        return type_ != nullptr;
    }

    void release(void * data) noexcept {
        if (data == nullptr) {
            return;
        }
        std::lock_guard<std::mutex> lock(mutex_);
        const auto live = live_.find(data);
        if (live == live_.end()) {
            return;  // not ours: cannot happen through StateAllocator
        }
        const Block block = live->second;
        live_.erase(live);
        // A block of another kind than type_ (allocated before use() changed it) is freed.
        if (block.type == type_ && stats_.kept_bytes + block.size <= keep_limit_) {
            kept_.emplace(block.size, block);
            stats_.kept_bytes += block.size;
            return;
        }
        free_block(block);
    }

    StateMemoryStats stats() {
        std::lock_guard<std::mutex> lock(mutex_);
        return stats_;
    }

private:
    // Whether `kept` (the smallest kept block of `size` bytes or more) may hold a state of
    // `size` bytes.
    bool serves(std::multimap<size_t, Block>::const_iterator kept, size_t size) const {
        return kept != kept_.end() && kept->first / kFitSlack <= size;
    }

    Block new_block(size_t size) {
        Block block;
        block.size = size;
        if (type_ != nullptr && locked_bytes_ + size <= kLockedBytes) {
            block.type = type_;
            block.buffer = ggml_backend_buft_alloc_buffer(type_, size);
            if (block.buffer == nullptr) {
                throw std::bad_alloc();
            }
            block.data = ggml_backend_buffer_get_base(block.buffer);
            // The engine falls back to plain memory when the driver refuses to lock more.
            if (ggml_backend_buffer_get_type(block.buffer) == type_) {
                block.locked = size;
                locked_bytes_ += size;
                ++stats_.page_locked;
            }
        } else {
            block.data = std::malloc(size);
            if (block.data == nullptr) {
                throw std::bad_alloc();
            }
        }
        return block;
    }

    void free_kept() {
        for (auto & [size, block] : kept_) {
            free_block(block);
        }
        kept_.clear();
        stats_.kept_bytes = 0;
        keep_limit_ = kKeptBytes;
        reserved_ = 0;
        spare_for_ = 0;  // a parked model takes no states: nothing to make ahead for
    }

    void free_block(const Block & block) {
        locked_bytes_ -= block.locked;
        if (block.buffer != nullptr) {
            ggml_backend_buffer_free(block.buffer);
        } else {
            std::free(block.data);
        }
    }

    std::mutex mutex_;
    ggml_backend_buffer_type_t type_ = nullptr;
    std::multimap<size_t, Block> kept_;
    std::unordered_map<void *, Block> live_;
    StateMemoryStats stats_;
    uint64_t locked_bytes_ = 0;  // of blocks live or kept
    uint64_t keep_limit_ = kKeptBytes;  // plus what reserve() made
    int reserved_ = 0;                  // blocks reserve() made since drop_kept()
    size_t spare_for_ = 0;              // the last state that took a new block; 0: none since
};

// Never destroyed: states still held when the process exits (a snapshot in a slot) must
// not be freed after the GPU runtime has shut down.
StateMemory & state_memory() {
    static auto * memory = new StateMemory;
    return *memory;
}

}  // namespace

void use_state_memory_of(ggml_backend_dev_t device) {
    state_memory().use(device);
}

void * state_allocate(size_t bytes) {
    return state_memory().allocate(bytes);
}

void state_release(void * block) noexcept {
    state_memory().release(block);
}

void reserve_state_blocks(size_t bytes, int count) {
    state_memory().reserve(bytes, count);
}

void drop_kept_state_blocks() {
    state_memory().drop_kept();
}

bool states_page_locked() {
    return state_memory().page_locked();
}

bool state_memory_made_ahead() {
    const char * env = std::getenv("LUCERNA_STATE_RESERVE");
    const std::string setting = env != nullptr ? env : "";
    return setting == "1" || (setting != "0" && states_page_locked());
}

bool make_spare_state_block() {
    return state_memory_made_ahead() && state_memory().make_spare();
}

StateMemoryStats state_memory_stats() {
    return state_memory().stats();
}

}  // namespace lucerna
