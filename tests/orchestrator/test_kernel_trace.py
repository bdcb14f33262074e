"""orchestrator/bench/kernel_trace.py: forward steps and their summaries from a trace in
native/profiler/kernel_trace.cpp's format (the GPU run itself is bin/gpu-kernel-profile
on the H200; this checks the arithmetic on a trace whose answers are known)."""

from __future__ import annotations

from orchestrator.bench.kernel_trace import kernel_class, parse_trace, split_steps, summarise

N_VOCAB = 32_000
ROW = 4 * N_VOCAB


def trace_line(kind: str, start: int, end: int, name: str, *, graph: int = 0,
               size: int = 0) -> str:
    return f"{kind}\t{start}\t{end}\t7\t{graph}\t{size}\t{name}"


def decode_step(t0: int, graph: int) -> list[str]:
    """Three kernels of 10 us with a 2 us gap, then a one-row logits copy of 5 us."""
    return [
        trace_line("kernel", t0, t0 + 10_000, "void mul_mat_vec_q<(ggml_type)12, 1>(int)",
                   graph=graph),
        trace_line("kernel", t0 + 12_000, t0 + 22_000, "void rms_norm_f32<1024>(float const*)",
                   graph=graph),
        trace_line("kernel", t0 + 24_000, t0 + 34_000, "void mul_mat_vec_q<(ggml_type)2, 1>(int)",
                   graph=graph),
        trace_line("memcpy", t0 + 34_000, t0 + 39_000, "DtoH", size=ROW, graph=graph),
    ]


def test_steps_end_at_each_logits_copy_and_group_by_shape() -> None:
    prefill = [
        trace_line("memcpy", 0, 1_000, "HtoD", size=128),
        trace_line("kernel", 1_000, 50_000, "void mul_mat_q<(ggml_type)12, 64, false>(int)"),
        trace_line("memcpy", 50_000, 55_000, "DtoH", size=ROW),
    ]
    lines = prefill + decode_step(100_000, 1) + decode_step(300_000, 1) + decode_step(500_000, 1)
    lines.append("kernel\t600000\t6")  # the tracer was killed while writing: skipped
    steps = split_steps(parse_trace(lines), N_VOCAB)

    assert [len(step.kernels) for step in steps] == [1, 3, 3, 3]
    assert all(step.logits_rows == 1 for step in steps)
    assert steps[0].host_gap_ns is None
    assert steps[1].host_gap_ns == 100_000 - 55_000
    assert steps[1].span_ns == 39_000
    assert steps[1].busy_ns == 39_000 - 4_000  # two 2 us gaps between the kernels

    decode, prefill_summary = summarise(steps)
    assert (decode["kernels_per_step"], decode["steps"]) == (3, 3)
    assert decode["gaps_ms"] == 0.004 and decode["kernel_ms"] == 0.03
    assert decode["host_before_ms"] == 0.161  # median of 45, 161 and 161 us
    assert decode["in_cuda_graph"] == 1.0
    assert decode["classes"][0] == {"name": "mul_mat_vec_q", "ms": 0.02, "kernels": 2.0}
    assert decode["classes"][1] == {"name": "rms_norm_f32", "ms": 0.01, "kernels": 1.0}
    assert (prefill_summary["kernels_per_step"], prefill_summary["steps"]) == (1, 1)


def test_verify_steps_are_told_apart_by_their_logits_rows() -> None:
    verify = [trace_line("kernel", 0, 80_000, "void mul_mat_q<(ggml_type)12, 16, false>(int)"),
              trace_line("memcpy", 80_000, 90_000, "DtoH", size=16 * ROW)]
    small_copy = [trace_line("memcpy", 95_000, 96_000, "DtoH", size=4096)]  # not logits
    steps = split_steps(parse_trace(verify + small_copy + decode_step(200_000, 0)), N_VOCAB)
    assert [step.logits_rows for step in steps] == [16, 1]
    assert len(steps[1].activities) == 5  # the small copy belongs to the next step
    assert {s["logits_rows"] for s in summarise(steps)} == {1, 16}


def test_kernel_class_drops_template_arguments_and_parameters() -> None:
    assert kernel_class("void k_get_rows<float, float>(void const*, int)") == "k_get_rows"
    assert kernel_class("void flash_attn_ext_f16<256, 256, 8>(char const*)") == "flash_attn_ext_f16"
    assert kernel_class("gated_delta_net_kernel") == "gated_delta_net_kernel"
