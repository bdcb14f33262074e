// Host memory for sequence states: checkpoints and snapshots (engine/sequence.h,
// engine/snapshots.h), the bytes llama_state_seq_get_data* copies out of the context.
//
// A prompt's end copies the sequence's uncuttable state into a checkpoint, on the path
// to its first token, and the front end's cache takes snapshots on it too. On the 27B
// shape that state is about 150 MB of recurrent state. Into freshly allocated pageable
// memory, a GPU's copy goes through the driver's staging buffer and faults in every page
// of the destination: the H200 trace of a 32-token prefill showed 70-87 ms of host gaps
// beside 51-58 ms of kernels (git show 7a0c96e:docs/benchmarks.md, "A small-batch
// K-quant kernel").
// So blocks freed are kept, up to 512 MiB, for the next state that fits (rounded up to
// 64 KiB; a model's checkpoints all have one size, and a block serves a snapshot down to
// half its size, as conversations differ in length), and the memory is page-locked
// where the model runs on a GPU (the device's host buffer type: cudaMallocHost for CUDA;
// at most 4 GiB of it, plain memory beyond). Locking a new block costs about what the
// page faults did (measured on the H200: git show 7a0c96e:docs/benchmarks.md, "States
// copied into page-locked..."); a kept block is where it is meant to pay: its copy runs
// at the bus's speed into pages already locked, which no same-run figure shows yet.
#pragma once

#include <cstddef>
#include <cstdint>
#include <new>
#include <utility>
#include <vector>

#include "ggml-backend.h"

namespace lucerna {

// States allocated from now on are page-locked host memory of `device`'s host buffer
// type; nullptr, or a device without one: plain memory. Set when a model loads.
// LUCERNA_PAGEABLE_STATES=1 in the environment keeps them pageable (kept blocks are still
// reused), to measure what page-locking buys.
void use_state_memory_of(ggml_backend_dev_t device);

// Makes blocks that hold a state of `bytes` now, until `count` were made since the last
// drop_kept_state_blocks, and keeps them for the states to come beyond the usual limit
// on kept memory: see reserve_checkpoint_memory (engine/prefix_reuse.h). Throws
// std::bad_alloc.
void reserve_state_blocks(size_t bytes, int count);

// Whether state memory is made ahead of the states that take it: the checkpoint blocks
// at startup (reserve_checkpoint_memory) and a spare block while idle
// (make_spare_state_block). Where states are page-locked, unless LUCERNA_STATE_RESERVE=0
// (to measure them); LUCERNA_STATE_RESERVE=1 makes them on plain memory too, so that the
// CPU's tests exercise them. Plain memory made ahead saves nothing: its pages fault in at
// the first copy all the same.
bool state_memory_made_ahead();

// After a state took a new block (none kept would serve it), makes one more of about its
// size (a quarter larger: a conversation's next snapshot is a few turns longer) and keeps
// it, so that the next such state finds memory ready. For pauses in the daemon's work: on
// the H200 a displaced conversation's snapshot (160 MB) locked a new block on its
// request's way to the first token, 50-130 ms (git show 7a0c96e:docs/benchmarks.md,
// "Admissions and the prefix cache on the H200"); the front end's cache holds its
// snapshots, so none come back to be reused. Makes nothing unless state_memory_made_ahead(), when a kept block
// already serves that size, or past the limit on kept memory. Whether it made one.
bool make_spare_state_block();

// Frees every kept block, reserved ones too (a parked model holds no memory for states
// it will not take).
void drop_kept_state_blocks();

// Whether states allocated now are page-locked (use_state_memory_of a GPU).
bool states_page_locked();

// Raw blocks for StateAllocator. state_allocate throws std::bad_alloc.
void * state_allocate(size_t bytes);
void state_release(void * block) noexcept;

// For `stats` (PROTOCOL.md 5.3).
struct StateMemoryStats {
    uint64_t kept_bytes = 0;   // freed blocks kept for reuse, now
    uint64_t reused = 0;       // allocations served from kept blocks, since start
    uint64_t page_locked = 0;  // allocations of new page-locked blocks, since start
};
StateMemoryStats state_memory_stats();

// Leaves new elements uninitialized (a buffer the engine is about to fill with a state,
// a gigabyte for a 27B model at 12K tokens, needs no zeroing) and takes its blocks from
// state_allocate.
template <typename T>
struct StateAllocator {
    using value_type = T;
    StateAllocator() = default;
    template <typename U>
    StateAllocator(const StateAllocator<U> &) noexcept {}

    T * allocate(size_t n) { return static_cast<T *>(state_allocate(n * sizeof(T))); }
    void deallocate(T * p, size_t) noexcept { state_release(p); }

    template <typename U>
    void construct(U * p) noexcept {
        ::new (static_cast<void *>(p)) U;
    }
    template <typename U, typename... Args>
    void construct(U * p, Args &&... args) {
        ::new (static_cast<void *>(p)) U(std::forward<Args>(args)...);
    }
    friend bool operator==(const StateAllocator &, const StateAllocator &) noexcept { return true; }
    friend bool operator!=(const StateAllocator &, const StateAllocator &) noexcept { return false; }
};

// An engine sequence state: bytes filled by llama_state_seq_get_data*.
using StateBytes = std::vector<uint8_t, StateAllocator<uint8_t>>;

}  // namespace lucerna
