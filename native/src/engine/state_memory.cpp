#include "engine/state_memory.h"

#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <thread>
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

// A spare (StateMemory::want_spare) is half again as large as the state it is made after,
// so that it also serves a snapshot of the same conversation, its KV cells included.
size_t spare_size(size_t size) {
    return rounded(size + size / 2);
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
        std::lock_guard<std::mutex> lock(mutex_);
        const char * pageable = std::getenv("LUCERNA_PAGEABLE_STATES");
        const bool lock_pages = device != nullptr && (pageable == nullptr || std::string(pageable) != "1");
        const char * spares = std::getenv("LUCERNA_STATE_SPARES");
        spares_ = spares == nullptr || std::string(spares) != "0";
        ggml_backend_buffer_type_t type = lock_pages ? ggml_backend_dev_host_buffer_type(device) : nullptr;
        if (type == type_) {
            return;
        }
        // Kept blocks are of the old kind: freed, so that every kept block is of type_.
        for (auto & [size, block] : kept_) {
            free_block(block);
        }
        kept_.clear();
        stats_.kept_bytes = 0;
        type_ = type;
    }

    void * allocate(size_t bytes) {
        const size_t size = rounded(bytes == 0 ? 1 : bytes);
        std::lock_guard<std::mutex> lock(mutex_);
        Block block;
        const auto kept = fitting(size);
        if (kept != kept_.end()) {
            block = kept->second;
            kept_.erase(kept);
            stats_.kept_bytes -= block.size;
            ++stats_.reused;
        } else {
            block = allocated(size, lock_type(size), /*touch=*/false);
            if (block.data == nullptr) {
                throw std::bad_alloc();
            }
            count(block);
        }
        live_[block.data] = block;
        // The next state of this size should find a block ready (make_spares).
        if (fitting(size) == kept_.end()) {
            want_spare(spare_size(size));
        }
        return block.data;
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
        if (block.type == type_ && stats_.kept_bytes + block.size <= kKeptBytes) {
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
    // The smallest kept block that holds `size`, if it is not too large for it; end() if
    // none.
    std::multimap<size_t, Block>::iterator fitting(size_t size) {
        const auto kept = kept_.lower_bound(size);
        return kept != kept_.end() && kept->first / kFitSlack <= size ? kept : kept_.end();
    }

    // The buffer type a new block of `size` takes: type_ within kLockedBytes, else none.
    ggml_backend_buffer_type_t lock_type(size_t size) const {
        return type_ != nullptr && locked_bytes_ + size <= kLockedBytes ? type_ : nullptr;
    }

    // A new block of `type` (nullptr: plain memory), not yet counted; data nullptr if
    // none could be had. `touch`: fault in a plain block's pages now (a spare's, off the
    // state's path). Needs no lock.
    static Block allocated(size_t size, ggml_backend_buffer_type_t type, bool touch) {
        Block block;
        block.size = size;
        if (type != nullptr) {
            block.buffer = ggml_backend_buft_alloc_buffer(type, size);
            if (block.buffer == nullptr) {
                return block;
            }
            block.type = type;
            block.data = ggml_backend_buffer_get_base(block.buffer);
            // The engine falls back to plain memory when the driver refuses to lock more.
            block.locked = ggml_backend_buffer_get_type(block.buffer) == type ? size : 0;
        } else {
            block.data = std::malloc(size);
            if (block.data != nullptr && touch) {
                std::memset(block.data, 0, size);
            }
        }
        return block;
    }

    // A new block from allocated(), into the locked bytes and stats.
    void count(const Block & block) {
        locked_bytes_ += block.locked;
        stats_.page_locked += block.locked != 0 ? 1 : 0;
    }

    // Making a new block costs its page faults or its page-locking (40-90 ms for the 27B's
    // 150 MB state on the H200, docs/benchmarks.md), which a state pays on its request's
    // path whenever no freed block fits it: every checkpoint while a --parallel daemon's
    // sequences fill their lanes, a conversation's second checkpoint, a snapshot of a
    // conversation still held. So after a state finds no block left for the next of its
    // size, a thread makes one (a spare, a little larger: spare_size) and keeps it, at
    // most one at a time, within the kept bytes.
    void want_spare(size_t size) {
        if (!spares_ || stats_.kept_bytes + size > kKeptBytes) {
            return;
        }
        spare_wanted_ = size;
        if (!spare_thread_) {
            spare_thread_ = true;
            std::thread([this] { make_spares(); }).detach();  // lives as long as the process
        }
        spare_ready_.notify_one();
    }

    void make_spares() {
        std::unique_lock<std::mutex> lock(mutex_);
        while (true) {
            spare_ready_.wait(lock, [this] { return spare_wanted_ != 0; });
            const size_t size = spare_wanted_;
            spare_wanted_ = 0;
            if (fitting(size - size / 3) != kept_.end() || stats_.kept_bytes + size > kKeptBytes) {
                continue;  // a block was freed meanwhile that serves it
            }
            ggml_backend_buffer_type_t type = lock_type(size);
            ggml_backend_buffer_type_t was = type_;
            // Allocated outside the lock: states come and go meanwhile. Its locked bytes
            // are counted from the start, so that nothing else takes them.
            const size_t reserved = type != nullptr ? size : 0;
            locked_bytes_ += reserved;
            lock.unlock();
            const Block block = allocated(size, type, /*touch=*/true);
            lock.lock();
            locked_bytes_ -= reserved;
            if (block.data == nullptr) {
                continue;
            }
            count(block);
            ++stats_.spares;
            if (type_ != was || stats_.kept_bytes + size > kKeptBytes) {
                free_block(block);  // use() changed the kind meanwhile, or frees filled the room
                continue;
            }
            kept_.emplace(size, block);
            stats_.kept_bytes += size;
        }
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
    std::condition_variable spare_ready_;
    size_t spare_wanted_ = 0;  // a spare's size still to make; 0: none
    bool spare_thread_ = false;
    bool spares_ = true;  // LUCERNA_STATE_SPARES=0: none, to measure what they buy
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

StateMemoryStats state_memory_stats() {
    return state_memory().stats();
}

}  // namespace lucerna
