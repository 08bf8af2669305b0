"""Seeded generator of a large, Kineto-like PyTorch-profiler trace for ingest benchmarks.

Usage::

    python benchmarks/make_trace.py OUT.json [--mb 320] [--events-min 1500000] [--seed 0]
                                    [--gz] [--layout oneline|kineto]

or, from Python, ``make_trace(path, mb=..., events_min=..., seed=..., gz_path=...)``.

What it writes (deterministic for a given seed and options, byte for byte):

* Kineto's top level: ``schemaVersion``, ``deviceProperties`` (8 B200-like GPUs with
  ``numSms``), ``distributedInfo``, a few version keys, ``traceEvents``, then ``traceName``,
  ``displayTimeUnit`` and ``baseTimeNanoseconds`` at the end.
* ``traceEvents`` ordered as libkineto writes them: first the CPU-side records (``cpu_op``,
  ``user_annotation``), then the CUPTI activities in buffer order (per launch: kernel/memcpy/
  memset, its ``ac2g`` flow end ``f``, the ``cuda_runtime``/``cuda_driver`` call, its flow
  start ``s``), then the ``M`` metadata records (process/thread names, sort indices), the
  ``Trace`` span and the two global instant events.
* The workload looks like sglang serving a DeepSeek-style MoE model with DeepEP on one rank of
  8: steps alternate between eager "extend" forwards (every kernel launched by
  ``cudaLaunchKernel`` / ``cuLaunchKernel`` under nested aten/sgl_kernel ops) and CUDA-graph
  "decode" forwards (one ``cudaGraphLaunch``; all its kernels share one correlation id), with
  HtoD/DtoH/PtoP copies, memsets, NCCL and DeepEP kernels on a second stream, GPU user
  annotations and a ``cudaStreamSynchronize`` per step. About 300 distinct, realistically long
  templated kernel names.
* ``ts`` and ``dur`` are microseconds with exactly three decimals (integer nanoseconds inside),
  on a clock relative to ``baseTimeNanoseconds`` as Kineto writes them.

``layout="oneline"`` (default) writes one record per line; ``layout="kineto"`` reproduces
libkineto's own multi-line pretty printing (about 15% more bytes for the same records).

Generation stops at the end of the first step at which the file holds at least ``mb`` MB
(10^6 bytes) of JSON *and* at least ``events_min`` records in ``traceEvents`` (every entry
counts, as in the Chrome trace format: complete "X" events, flow "s"/"f", metadata "M",
instants; about two thirds are "X" events, which tracekit keeps). At the defaults the two
floors meet at roughly 400 MB, about 260 bytes a record, close to real Kineto traces (225-360
bytes a record). Writing it takes a few seconds to a minute, depending on the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

CPU_PID = 2875301
CPU_TID = 2875301
DEVICE = 0
COMPUTE_STREAM = 7
COMM_STREAM = 23
NUM_SMS = 148
START_NS = 4458676388068751  # first ts, 4458676388068.751 µs
BASE_TIME_NS = 1745921336000000000
CHUNK_CHARS = 4 << 20

# cbid values as CUPTI numbers them (runtime API unless noted).
CBID = {
    "cudaLaunchKernel": 211,
    "cudaMemcpyAsync": 41,
    "cudaMemsetAsync": 51,
    "cudaGraphLaunch": 311,
    "cudaStreamSynchronize": 131,
    "cudaEventRecord": 135,
    "cuLaunchKernel": 307,  # driver API
    "cuLaunchKernelEx": 652,  # driver API
}


# --------------------------------------------------------------------------------------------
# kernel catalogue
# --------------------------------------------------------------------------------------------
@dataclass
class Kernel:
    name: str
    group: (
        str  # gemm, gemm_grouped, attn, rope, norm, act, quant, moe_gate, ep_dispatch, ep_combine, nccl, elem, sample
    )
    launcher: str  # cudaLaunchKernel | cuLaunchKernel | cuLaunchKernelEx
    mean_ns: int
    static_args: str  # args after "correlation" (kernel-specific, fixed)
    nccl: tuple[str, int] | None = None  # (collective name, message elements)


def _occupancy(rng: random.Random, grid: tuple[int, int, int], block: tuple[int, int, int]) -> tuple[float, float, int]:
    blocks = grid[0] * grid[1] * grid[2]
    threads = block[0] * block[1] * block[2]
    bps = blocks / NUM_SMS
    wps = bps * threads / 32.0
    occ = int(min(100.0, wps / 64.0 * 100.0 * rng.uniform(0.6, 1.0)))
    return bps, wps, occ


def _kernel_catalogue(rng: random.Random, sep: str) -> list[Kernel]:
    """~300 distinct kernels with fixed launch shapes. ``sep`` separates GPU arg groups."""
    kernels: list[Kernel] = []
    seen: set[str] = set()

    def add(
        name: str,
        group: str,
        launcher: str,
        mean_us: float,
        grid,
        block,
        regs: int,
        smem: int,
        nccl: tuple[str, int] | None = None,
    ) -> None:
        if name in seen:
            return
        seen.add(name)
        bps, wps, occ = _occupancy(rng, grid, block)
        static = (
            f'{sep}"registers per thread": {regs},{sep}"shared memory": {smem},{sep}"blocks per SM": {bps:.6f},'
            f'{sep}"warps per SM": {wps:.6f},{sep}"grid": [{grid[0]}, {grid[1]}, {grid[2]}],'
            f'{sep}"block": [{block[0]}, {block[1]}, {block[2]}],{sep}"est. achieved occupancy %": {occ}'
        )
        if nccl is not None:
            coll, nelems = nccl
            static += (
                f', "Collective name": "{coll}", "In msg nelems": {nelems}, "Out msg nelems": {nelems * 8 if coll == "_allgather_base" else nelems},'
                f' "Group size": 8, "dtype": "BFloat16", "In split size": "[]", "Out split size": "[]",'
                f' "Process Group Name": "0", "Process Group Description": "default_pg",'
                f' "Process Group Ranks": "[0, 1, 2, 3, 4, 5, 6, 7]"'
            )
        kernels.append(Kernel(name, group, launcher, int(mean_us * 1000), static, nccl))

    # DeepGEMM (JIT, launched with cuLaunchKernelEx): normal, grouped-contiguous, grouped-masked.
    for gt, group in ((0, "gemm"), (1, "gemm_grouped"), (2, "gemm_grouped")):
        for n in (576, 1536, 2048, 4096, 4608, 7168, 24576, 32768):
            for k in (512, 1536, 2048, 7168, 16384):
                if rng.random() < 0.45:
                    continue
                bn = rng.choice((112, 128, 160, 192, 224, 256))
                stages = rng.choice((4, 5, 6, 8))
                name = (
                    f"void deep_gemm::sm100_fp8_gemm_1d1d_impl<(cute::UMMA::Major)0, (cute::UMMA::Major)0, 0u, {n}u, {k}u, "
                    f"128u, {bn}u, 128u, 1u, {stages}u, 4u, 1u, 2u, {NUM_SMS}u, (deep_gemm::GemmType){gt}, false, "
                    "cutlass::bfloat16_t>(int*, unsigned int, unsigned int, unsigned int, CUtensorMap_st, CUtensorMap_st, "
                    "CUtensorMap_st, CUtensorMap_st, CUtensorMap_st)"
                )
                add(name, group, "cuLaunchKernelEx", rng.uniform(8, 90), (NUM_SMS, 1, 1), (256, 1, 1), 168, 230400)
    # DeepEP low-latency and normal kernels.
    for fp8 in ("true", "false"):
        for warps in (3, 4, 8):
            add(
                f"void deep_ep::internode_ll::dispatch<{fp8}, false, 7168, {warps}>(void*, float*, int*, long*, void*, int*, void*, int*, "
                "void*, long const*, int*, int*, long*, int, int, int, int, int, int, int, int, int, bool, int)",
                "ep_dispatch",
                "cudaLaunchKernel",
                rng.uniform(40, 120),
                (132, 1, 1),
                (32 * warps * 4, 1, 1),
                128,
                0,
            )
            add(
                f"void deep_ep::internode_ll::combine<{fp8}, 7168, {warps}, 8>(void*, void*, int*, void*, void const*, long const*, int*, "
                "void*, int const*, long const*, int*, int*, int, int, int, int, int, int, int, int, bool, bool, int)",
                "ep_combine",
                "cudaLaunchKernel",
                rng.uniform(40, 140),
                (132, 1, 1),
                (32 * warps * 4, 1, 1),
                128,
                0,
            )
    for ranks in (2, 4, 8):
        add(
            f"void deep_ep::intranode::dispatch<{ranks}, 768, 8192>(int4*, float*, int*, long*, float*, int*, int*, int4 const*, "
            "float const*, long const*, float const*, bool const*, int const*, int, int, int, int, int, int, void**, int, int, int)",
            "ep_dispatch",
            "cudaLaunchKernel",
            rng.uniform(60, 200),
            (48, 1, 1),
            (768, 1, 1),
            64,
            0,
        )
        add(
            f"void deep_ep::intranode::combine<nv_bfloat16, {ranks}, 768, 4096>(nv_bfloat16*, float*, nv_bfloat16 const*, "
            "float const*, int const*, int const*, int const*, int const*, int, int, int, void**, int, int, int)",
            "ep_combine",
            "cudaLaunchKernel",
            rng.uniform(60, 200),
            (48, 1, 1),
            (768, 1, 1),
            64,
            0,
        )
    add(
        "void deep_ep::internode_ll::clean_low_latency_buffer<32>(int*, int, int*, int)",
        "elem",
        "cudaLaunchKernel",
        3.0,
        (1, 1, 1),
        (32, 1, 1),
        16,
        0,
    )
    # NCCL collectives (with the collective args Kineto records).
    for coll, cname in (
        ("AllGather", "_allgather_base"),
        ("AllReduce_Sum_bf16", "allreduce"),
        ("ReduceScatter_Sum_bf16", "_reduce_scatter_base"),
        ("AllReduce_Sum_f32", "allreduce"),
        ("Broadcast", "broadcast"),
    ):
        for algo in ("RING_LL", "RING_LL128", "TREE_LL", "RING_SIMPLE"):
            if coll.startswith("AllGather") and algo.startswith("TREE"):
                continue
            add(
                f"ncclDevKernel_{coll}_{algo}(ncclDevKernelArgsStorage<4096ul>)",
                "nccl",
                "cudaLaunchKernel",
                rng.uniform(15, 120),
                (rng.choice((8, 16, 24, 32)), 1, 1),
                (rng.choice((288, 544, 640)), 1, 1),
                96,
                87568,
                nccl=(cname, rng.choice((7168 * 64, 7168 * 128, 129280 * 32))),
            )
    add(
        "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)",
        "nccl",
        "cudaLaunchKernel",
        30.0,
        (16, 1, 1),
        (640, 1, 1),
        96,
        87568,
        nccl=("send", 7168 * 64),
    )
    # Attention (FlashInfer MLA, CUTLASS SM100 FMHA) and RoPE.
    for page in (1, 16, 64):
        for qtile in (64, 128):
            for dtype in ("cutlass::float_e4m3_t", "cutlass::bfloat16_t"):
                add(
                    "void flashinfer::mla::hopper::BatchMLAPageAttentionHopperKernel<flashinfer::mla::hopper::HopperKernelTraits<"
                    f"true, {qtile}, 2, {page}, 64, 512, 64, {dtype}, {dtype}, cutlass::bfloat16_t, int>, "
                    f"flashinfer::mla::hopper::Params<{dtype}, cutlass::bfloat16_t, int> >"
                    f"(flashinfer::mla::hopper::Params<{dtype}, cutlass::bfloat16_t, int>)",
                    "attn",
                    "cudaLaunchKernel",
                    rng.uniform(15, 70),
                    (NUM_SMS, 1, 1),
                    (384, 1, 1),
                    168,
                    227328,
                )
    for hd in (128, 192):
        for causal in ("true", "false"):
            for tile in (128, 256):
                add(
                    "void cutlass::device_kernel<cutlass::fmha::kernel::Sm100FmhaFwdKernelTmaWarpspecialized<cute::tuple<cute::C<"
                    f"{tile}>, cute::C<128>, cute::C<{hd}> >, cutlass::fmha::collective::Sm100FmhaFwdMainloopTmaWarpspecialized<"
                    f"cutlass::bfloat16_t, float, float, cute::tuple<cute::C<{tile}>, cute::C<128>, cute::C<{hd}> >, "
                    "cute::tuple<int, int, cute::tuple<cute::tuple<int, int>, int> >, cute::tuple<cute::C<1>, cute::C<1>, cute::C<1> >, "
                    f"cutlass::fmha::collective::{'CausalMask<true>' if causal == 'true' else 'NoMask'}, cute::tuple<cute::C<2>, cute::C<1>, "
                    "cute::C<1> > >, cutlass::fmha::collective::Sm100FmhaFwdEpilogueTmaWarpspecialized<cutlass::bfloat16_t, float, "
                    f"cute::tuple<cute::C<{tile}>, cute::C<128>, cute::C<{hd}> >, cute::tuple<int, int, cute::tuple<cute::tuple<int, int>, int> > >, "
                    "cutlass::fmha::kernel::IndividualTileScheduler> >(cutlass::fmha::kernel::Sm100FmhaFwdKernelTmaWarpspecialized<...>::Params)",
                    "attn",
                    "cudaLaunchKernel",
                    rng.uniform(20, 120),
                    (NUM_SMS, 1, 1),
                    (512, 1, 1),
                    168,
                    232448,
                )
    for hd, vec in ((64, 8), (64, 16), (128, 8)):
        for dt in ("__nv_bfloat16", "half"):
            add(
                f"void flashinfer::BatchQKApplyRotaryPosIdsCosSinCacheKernel<true, {hd}u, {vec}u, 16u, {dt}, long>({dt}*, {dt}*, "
                f"{dt}*, {dt}*, float*, long*, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int, "
                "unsigned int, unsigned int, unsigned int, unsigned int)",
                "rope",
                "cudaLaunchKernel",
                rng.uniform(2, 6),
                (rng.choice((1, 2, 4, 8)), 16, 1),
                (8, 16, 1),
                40,
                0,
            )
    # Norms, activations, MoE routing, quantisation.
    for vec in (2, 4, 8, 16):
        for dt in ("__nv_bfloat16", "half", "float"):
            add(
                f"void flashinfer::norm::RMSNormKernel<{vec}u, {dt}>({dt}*, {dt}*, {dt}*, unsigned int, unsigned int, unsigned int, "
                "float, float)",
                "norm",
                "cudaLaunchKernel",
                rng.uniform(2, 6),
                (64, 1, 1),
                (32, 28, 1),
                32,
                256,
            )
            add(
                f"void flashinfer::norm::FusedAddRMSNormKernel<{vec}u, {dt}>({dt}*, {dt}*, {dt}*, unsigned int, unsigned int, "
                "unsigned int, float, float)",
                "norm",
                "cudaLaunchKernel",
                rng.uniform(2, 7),
                (64, 1, 1),
                (32, 28, 1),
                38,
                28800,
            )
    for act in ("silu", "gelu", "gelu_tanh"):
        for dt in ("__nv_bfloat16", "half"):
            add(
                f"void flashinfer::activation::act_and_mul_kernel<{dt}, &({act}(float const&))>({dt}*, {dt} const*, int)",
                "act",
                "cudaLaunchKernel",
                rng.uniform(2, 8),
                (64, 1, 1),
                (1024, 1, 1),
                24,
                0,
            )
    for experts in (256, 288):
        for topk in (8, 9):
            add(
                f"void moe_fused_gate_kernel<float, {experts}, 8, {topk}, 4, 32, 8>(void*, void*, float*, int*, long, long, long, "
                "long, long, bool, double)",
                "moe_gate",
                "cudaLaunchKernel",
                rng.uniform(3, 9),
                (16, 1, 1),
                (32, 8, 1),
                64,
                0,
            )
    for name in (
        "_per_token_group_quant_8bit",
        "_per_token_group_quant_8bit_colmajor",
        "_per_token_group_quant_mla_deep_gemm_masked_fp8",
        "_silu_and_mul_post_quant_kernel",
        "fused_moe_kernel",
        "compute_seg_indptr_triton_kernel",
        "compute_m_range",
        "fill_gateup_input_triton_kernel",
        "deepep_permute_triton_kernel",
        "deepep_post_reorder_triton_kernel",
        "_fwd_kernel_stage1",
        "_fwd_grouped_kernel_stage1",
        "_fwd_kernel_stage2",
        "write_req_to_token_pool_triton",
        "create_flashinfer_kv_indices_triton",
        "_correct_attn_cp_out_kernel",
        "compute_position_kernel",
        "assign_req_to_token_pool",
        "get_last_loc_kernel",
        "_sparse_fwd_kernel",
    ):
        add(
            name,
            "quant" if "quant" in name else "elem",
            "cuLaunchKernel",
            rng.uniform(2, 12),
            (rng.choice((16, 64, 132, 148, 512)), rng.choice((1, 1, 8)), 1),
            (rng.choice((128, 256)), 1, 1),
            32,
            rng.choice((0, 1024, 8192)),
        )
    for i in range(30):
        stem = rng.choice(
            (
                "triton_poi_fused_add_mul_",
                "triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_",
                "triton_per_fused__softmax_",
                "triton_poi_fused_cat_clone_",
                "triton_poi_fused__to_copy_index_select_",
            )
        )
        add(
            f"{stem}{i}",
            "elem",
            "cuLaunchKernel",
            rng.uniform(2, 10),
            (rng.choice((8, 64, 148, 1024)), 1, 1),
            (rng.choice((64, 128, 256, 512)), 1, 1),
            24,
            0,
        )
    # ATen elementwise / reduction / copy kernels.
    aten_types = ("float", "c10::BFloat16", "c10::Half", "int", "long", "bool", "unsigned char")
    for t in aten_types:
        add(
            f"void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<{t}>, std::array<char*, 1ul> >"
            f"(int, at::native::FillFunctor<{t}>, std::array<char*, 1ul>)",
            "elem",
            "cudaLaunchKernel",
            1.8,
            (rng.choice((1, 4, 148)), 1, 1),
            (128, 1, 1),
            16,
            0,
        )
        add(
            f"void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::"
            f"{{lambda()#3}}::operator()() const::{{lambda()#7}}::operator()() const::{{lambda({t})#1}}, std::array<char*, 2ul>, "
            "4, TrivialOffsetCalculator<1, unsigned int>, TrivialOffsetCalculator<1, unsigned int>, at::native::memory::LoadWithCast<1>, "
            "at::native::memory::StoreWithCast<1> >(int, at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::"
            f"operator()() const::{{lambda()#7}}::operator()() const::{{lambda({t})#1}}, std::array<char*, 2ul>, "
            "TrivialOffsetCalculator<1, unsigned int>, TrivialOffsetCalculator<1, unsigned int>, at::native::memory::LoadWithCast<1>, "
            "at::native::memory::StoreWithCast<1>)",
            "elem",
            "cudaLaunchKernel",
            2.4,
            (rng.choice((1, 4, 64)), 1, 1),
            (128, 1, 1),
            20,
            0,
        )
        for op in ("AddFunctor", "MulFunctor", "CUDAFunctor_add"):
            add(
                f"void at::native::vectorized_elementwise_kernel<4, at::native::{op}<{t}>, std::array<char*, 3ul> >"
                f"(int, at::native::{op}<{t}>, std::array<char*, 3ul>)",
                "elem",
                "cudaLaunchKernel",
                2.2,
                (rng.choice((1, 8, 64)), 1, 1),
                (128, 1, 1),
                22,
                0,
            )
        for nbytes in (2, 4, 8):
            add(
                f"void at::native::(anonymous namespace)::CatArrayBatchedCopy_aligned16_contig<at::native::(anonymous namespace)::"
                f"OpaqueType<{nbytes}u>, unsigned int, {rng.choice((1, 2, 3))}, 128, 1>(at::native::(anonymous namespace)::OpaqueType<{nbytes}u>*, "
                f"at::native::(anonymous namespace)::CatArrInputTensorMetadata<at::native::(anonymous namespace)::OpaqueType<{nbytes}u>, "
                f"unsigned int, 128, 1>, at::native::(anonymous namespace)::TensorSizeStride<unsigned int, 4u>, int, unsigned int) [{t}]",
                "elem",
                "cudaLaunchKernel",
                3.1,
                (4, 8, 1),
                (128, 1, 1),
                30,
                0,
            )
    for t in ("float", "c10::BFloat16"):
        for red in (
            "ArgMaxOps<float>",
            "MaxOps<float>",
            "func_wrapper_t<float, at::native::sum_functor<float, float, float>::operator()"
            "(at::TensorIterator&)::{lambda(float, float)#1}>",
        ):
            add(
                f"void at::native::reduce_kernel<512, 1, at::native::ReduceOp<{t}, at::native::{red}, unsigned int, long, 4, 4> >"
                f"(at::native::ReduceOp<{t}, at::native::{red}, unsigned int, long, 4, 4>)",
                "sample",
                "cudaLaunchKernel",
                rng.uniform(4, 40),
                (rng.choice((16, 32, 64)), 1, 1),
                (32, 16, 1),
                32,
                16,
            )
        add(
            f"void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, {t}, float, {t}, at::native::(anonymous namespace)::"
            f"SoftMaxForwardEpilogue>({t}*, {t} const*, int)",
            "sample",
            "cudaLaunchKernel",
            rng.uniform(5, 30),
            (64, 1, 1),
            (1024, 1, 1),
            38,
            0,
        )
        add(
            f"void at::native::index_elementwise_kernel<128, 4, at::native::gpu_index_kernel<at::native::index_kernel_impl<"
            f"at::native::OpaqueType<{2 if t == 'c10::BFloat16' else 4}> >(at::TensorIteratorBase&, c10::ArrayRef<long>, c10::ArrayRef<long>)"
            "::{lambda(char*, char const*, long)#1}>(at::TensorIteratorBase&, c10::ArrayRef<long>, c10::ArrayRef<long>, "
            "at::native::index_kernel_impl<at::native::OpaqueType<2> >(at::TensorIteratorBase&, c10::ArrayRef<long>, "
            "c10::ArrayRef<long>)::{lambda(char*, char const*, long)#1} const&, bool)::{lambda(int)#1}>(long, at::native::gpu_index_kernel"
            "<...>::{lambda(int)#1})",
            "elem",
            "cudaLaunchKernel",
            rng.uniform(2, 6),
            (64, 1, 1),
            (128, 1, 1),
            28,
            0,
        )
    # cuBLAS / nvjet GEMMs for the dense bits (lm_head, gates).
    for tile in (
        "128x64_64x8_2x1",
        "64x32_64x16_1x1",
        "192x128_64x4_2x1",
        "256x128_64x4_2x1",
        "128x128_64x6_1x2",
        "64x8_64x16_4x1",
    ):
        for variant in ("v_bz_coopA_TNT", "h_bz_TNT", "v_bz_splitK_TNT"):
            add(
                f"nvjet_tst_{tile}_{variant}",
                "gemm",
                "cudaLaunchKernel",
                rng.uniform(6, 60),
                (NUM_SMS, 1, 1),
                (384, 1, 1),
                168,
                213000,
            )
    add("memcpy128", "elem", "cudaLaunchKernel", 2.0, (8, 1, 1), (128, 1, 1), 16, 0)
    return kernels


# --------------------------------------------------------------------------------------------
# the model's forward: a fixed sequence of launches
# --------------------------------------------------------------------------------------------
@dataclass
class Launch:
    kernel: int  # index in the catalogue
    stream: int
    chain: tuple[str, ...]  # nested CPU ops, outermost first; the launch sits in the innermost
    pre: tuple[str, ...]  # sibling CPU ops run before the chain (no launch)
    comm: str | None = None  # NCCL record_function name (nccl:all_gather) or None


_CHAIN_BY_GROUP = {
    "gemm": (("deep_gemm::fp8_gemm_nt",), ("aten::linear", "aten::matmul", "aten::mm")),
    "gemm_grouped": (("deep_gemm::m_grouped_fp8_gemm_nt_masked",), ("deep_gemm::m_grouped_fp8_gemm_nt_contiguous",)),
    "attn": (("sgl_kernel::mla_decode",), ("flashinfer::BatchMLAPagedAttentionRun",)),
    "rope": (("sgl_kernel::apply_rope_pos_ids_cos_sin_cache",),),
    "norm": (("sgl_kernel::fused_add_rmsnorm",), ("sgl_kernel::rmsnorm",)),
    "act": (("sgl_kernel::silu_and_mul",),),
    "quant": ((),),
    "moe_gate": (("sgl_kernel::moe_fused_gate",),),
    "ep_dispatch": (("deep_ep::low_latency_dispatch",),),
    "ep_combine": (("deep_ep::low_latency_combine",),),
    "nccl": (("c10d::_allgather_base_", "record_param_comms"), ("c10d::allreduce_", "record_param_comms")),
    "elem": (
        ("aten::copy_",),
        ("aten::add_",),
        ("aten::mul",),
        ("aten::fill_",),
        ("aten::cat",),
        ("aten::index_select",),
        (),
    ),
    "sample": (("aten::argmax",), ("aten::softmax", "aten::_softmax"), ("aten::max",)),
}
_PRE_OPS = (
    "aten::empty",
    "aten::view",
    "aten::empty_like",
    "aten::slice",
    "aten::select",
    "aten::as_strided",
    "aten::t",
    "aten::transpose",
    "aten::reshape",
    "aten::unsqueeze",
    "aten::to",
    "aten::detach",
    "aten::zeros",
)


def _forward_sequence(rng: random.Random, kernels: list[Kernel], layers: int) -> list[Launch]:
    by_group: dict[str, list[int]] = {}
    for i, k in enumerate(kernels):
        by_group.setdefault(k.group, []).append(i)

    def pick(group: str) -> int:
        return rng.choice(by_group[group])

    def launch(group: str, stream: int = COMPUTE_STREAM, comm: str | None = None) -> Launch:
        k = pick(group)
        chain = rng.choice(_CHAIN_BY_GROUP[group])
        pre = tuple(rng.choice(_PRE_OPS) for _ in range(rng.choice((0, 1, 1, 2, 2, 3))))
        return Launch(k, stream, chain, pre, comm)

    seq: list[Launch] = [launch("elem"), launch("elem"), launch("gemm")]  # embedding gather etc.
    for layer in range(layers):
        seq += [
            launch("norm"),
            launch("quant"),
            launch("gemm"),
            launch("norm"),
            launch("quant"),
            launch("gemm"),
            launch("rope"),
            launch("elem"),
            launch("attn"),
            launch("quant"),
            launch("gemm"),
        ]
        if layer < 3:  # dense layers
            seq += [
                launch("nccl", COMM_STREAM, "nccl:all_reduce"),
                launch("norm"),
                launch("quant"),
                launch("gemm"),
                launch("act"),
                launch("quant"),
                launch("gemm"),
                launch("nccl", COMM_STREAM, "nccl:all_reduce"),
            ]
        else:  # MoE layers with DeepEP
            seq += [
                launch("norm"),
                launch("gemm"),
                launch("moe_gate"),
                launch("ep_dispatch", COMM_STREAM),
                launch("quant"),
                launch("gemm_grouped"),
                launch("act"),
                launch("quant"),
                launch("gemm_grouped"),
                launch("ep_combine", COMM_STREAM),
                launch("elem"),
            ]
            if rng.random() < 0.3:
                seq.append(launch("elem"))
    seq += [
        launch("norm"),
        launch("gemm"),
        launch("nccl", COMM_STREAM, "nccl:all_gather"),
        launch("sample"),
        launch("sample"),
        launch("elem"),
    ]
    # make sure every catalogue entry shows up somewhere (a few hundred distinct names in use)
    used = {s.kernel for s in seq}
    for i, k in enumerate(kernels):
        if i not in used:
            stream = COMM_STREAM if k.group in ("nccl", "ep_dispatch", "ep_combine") else COMPUTE_STREAM
            seq.append(
                Launch(
                    i,
                    stream,
                    rng.choice(_CHAIN_BY_GROUP[k.group]),
                    (),
                    "nccl:all_gather" if k.group == "nccl" else None,
                )
            )
    return seq


# --------------------------------------------------------------------------------------------
# writer
# --------------------------------------------------------------------------------------------
def _us(ns: int) -> str:
    """Integer nanoseconds as microseconds with exactly three decimals."""
    return f"{ns // 1000}.{ns % 1000:03d}"


class _Writer:
    def __init__(self, fh, first: bool = True) -> None:
        self.fh = fh
        self.buf: list[str] = []
        self.size = 0
        self.bytes = 0
        self.first = first

    def add(self, rec: str) -> None:
        self.buf.append(rec)
        self.size += len(rec)
        if self.size >= CHUNK_CHARS:
            self.flush()

    def flush(self) -> None:
        if not self.buf:
            return
        text = ",\n".join(self.buf)
        if not self.first:
            text = ",\n" + text
        self.first = False
        data = text.encode()
        self.fh.write(data)
        self.bytes += len(data)
        self.buf = []
        self.size = 0


class _Gen:
    def __init__(self, seed: int, layout: str) -> None:
        if layout not in ("oneline", "kineto"):
            raise ValueError(f"layout must be 'oneline' or 'kineto', not {layout!r}")
        self.kineto = layout == "kineto"
        self.gsep = "      " if self.kineto else " "  # Kineto's spacing between GPU arg groups
        self.rng = random.Random(seed)
        self.kernels = _kernel_catalogue(self.rng, self.gsep)
        self.seq = _forward_sequence(self.rng, self.kernels, layers=61)
        self.cpu = START_NS
        self.stream_free = {COMPUTE_STREAM: START_NS, COMM_STREAM: START_NS}
        self.ext = 0
        self.corr = 100000
        self.ev_idx = 0
        self.rf_id = 0
        self.x_events = 0
        self.records = 0
        self.counts: dict[str, int] = {}
        self.names_used: set[int] = set()
        self.step = 0
        self.cpu_w: _Writer | None = None
        self.gpu_w: _Writer | None = None

    # ---- record formatting ------------------------------------------------------------
    def _x(self, w: _Writer, cat: str, name: str, pid, tid, ts: int, dur: int, args: str) -> None:
        if self.kineto:
            rec = (
                f'  {{\n    "ph": "X", "cat": "{cat}", "name": "{name}", "pid": {pid}, "tid": {tid},\n'
                f'    "ts": {_us(ts)}, "dur": {_us(dur)},\n    "args": {{\n      {args}\n    }}\n  }}'
            )
        else:
            rec = (
                f'  {{"ph": "X", "cat": "{cat}", "name": "{name}", "pid": {pid}, "tid": {tid}, '
                f'"ts": {_us(ts)}, "dur": {_us(dur)}, "args": {{{args}}}}}'
            )
        w.add(rec)
        self.x_events += 1
        self.records += 1
        self.counts[cat] = self.counts.get(cat, 0) + 1

    def _flow(self, w: _Writer, ph: str, fid: int, pid, tid, ts: int) -> None:
        tail = ', "bp": "e"' if ph == "f" else ""
        if self.kineto:
            rec = (
                f'  {{\n    "ph": "{ph}", "id": {fid}, "pid": {pid}, "tid": {tid}, "ts": {_us(ts)},\n'
                f'    "cat": "ac2g", "name": "ac2g"{tail}\n  }}'
            )
        else:
            rec = f'  {{"ph": "{ph}", "id": {fid}, "pid": {pid}, "tid": {tid}, "ts": {_us(ts)}, "cat": "ac2g", "name": "ac2g"{tail}}}'
        w.add(rec)
        self.records += 1
        self.counts["ac2g"] = self.counts.get("ac2g", 0) + 1

    def _meta(self, w: _Writer, name: str, ts: int, pid, tid, args: str) -> None:
        if self.kineto:
            rec = (
                f'  {{\n    "name": "{name}", "ph": "M", "ts": {_us(ts)}, "pid": {pid}, "tid": {tid},\n'
                f'    "args": {{\n      {args}\n    }}\n  }}'
            )
        else:
            rec = f'  {{"name": "{name}", "ph": "M", "ts": {_us(ts)}, "pid": {pid}, "tid": {tid}, "args": {{{args}}}}}'
        w.add(rec)
        self.records += 1
        self.counts["M"] = self.counts.get("M", 0) + 1

    # ---- pieces of a step ---------------------------------------------------------------
    def _cpu_args(self, with_shapes: bool, rf: int = 0) -> str:
        self.ext += 1
        idx = self.ev_idx
        self.ev_idx += 1
        if with_shapes:
            r = self.rng
            m = r.choice((1, 8, 32, 64, 128, 256, 512))
            k = r.choice((512, 1536, 2048, 7168))
            n = r.choice((576, 2048, 4096, 7168))
            return (
                f'"External id": {self.ext},"Record function id": {rf}, "Concrete Inputs": ["", "", ""], '
                f'"Input type": ["c10::BFloat16", "c10::BFloat16", ""], "Input Strides": [[{k}, 1], [1, {k}], []], '
                f'"Input Dims": [[{m}, {k}], [{k}, {n}], []], "Ev Idx": {idx}'
            )
        return f'"External id": {self.ext},"Record function id": {rf}, "Ev Idx": {idx}'

    def _runtime(self, name: str, cat: str, ts: int, dur: int, ext: int, corr: int) -> None:
        self._x(
            self.gpu_w,
            cat,
            name,
            CPU_PID,
            CPU_TID,
            ts,
            dur,
            f'"External id": {ext},{self.gsep}"cbid": {CBID[name]}, "correlation": {corr}',
        )

    def _kernel(self, k: Kernel, stream: int, ts: int, dur: int, ext: int, corr: int) -> None:
        g = self.gsep
        self._x(
            self.gpu_w,
            "kernel",
            k.name,
            DEVICE,
            stream,
            ts,
            dur,
            f'"External id": {ext},{g}"queued": 0, "device": {DEVICE}, "context": 1,{g}"stream": {stream}, '
            f'"correlation": {corr},{k.static_args}',
        )

    def _copy(self, cat: str, name: str, stream: int, ts: int, dur: int, ext: int, corr: int, nbytes: int) -> None:
        g = self.gsep
        bw = nbytes / max(dur, 1)  # bytes per ns == GB/s
        self._x(
            self.gpu_w,
            cat,
            name,
            DEVICE,
            stream,
            ts,
            dur,
            f'"External id": {ext},{g}"device": {DEVICE}, "context": 1,{g}"stream": {stream}, "correlation": {corr},'
            f'{g}"bytes": {nbytes}, "memory bandwidth (GB/s)": {repr(round(bw, 6))}',
        )

    def _gpu_slot(self, stream: int, earliest: int, dur: int) -> int:
        start = max(self.stream_free[stream], earliest)
        self.stream_free[stream] = start + dur + self.rng.randint(300, 1500)
        return start

    def _jit(self, mean_ns: int) -> int:
        return max(500, int(mean_ns * self.rng.uniform(0.85, 1.2)))

    def _copy_launch(self, kind: str) -> tuple[int, int]:
        """A cudaMemcpyAsync/cudaMemsetAsync under an aten op; returns the GPU (start, end)."""
        r = self.rng
        op = {"htod": "aten::copy_", "dtoh": "aten::copy_", "ptop": "aten::copy_", "memset": "aten::zero_"}[kind]
        op_ts = self.cpu
        cpu_w = self.cpu_w
        args = self._cpu_args(r.random() < 0.25)
        ext = self.ext
        rt_ts = op_ts + r.randint(1500, 4000)
        rt_dur = r.randint(3000, 9000)
        op_dur = rt_ts + rt_dur + r.randint(500, 1500) - op_ts
        self._x(cpu_w, "cpu_op", op, CPU_PID, CPU_TID, op_ts, op_dur, args)
        self.corr += 1
        corr = self.corr
        if kind == "htod":
            nbytes, name, cat, api = (
                r.choice((2048, 4096, 16384, 65536)),
                "Memcpy HtoD (Pinned -> Device)",
                "gpu_memcpy",
                "cudaMemcpyAsync",
            )
            dur = 1000 + nbytes // 20
        elif kind == "dtoh":
            nbytes, name, cat, api = (
                r.choice((256, 1024, 4096)),
                "Memcpy DtoH (Device -> Pinned)",
                "gpu_memcpy",
                "cudaMemcpyAsync",
            )
            dur = 1200 + nbytes // 10
        elif kind == "ptop":
            nbytes, name, cat, api = (
                r.choice((1 << 20, 4 << 20, 16 << 20)),
                "Memcpy PtoP (Device -> Device)",
                "gpu_memcpy",
                "cudaMemcpyAsync",
            )
            dur = nbytes // r.randint(300, 700)
        else:
            nbytes, name, cat, api = (
                r.choice((4096, 65536, 1 << 20)),
                "Memset (Device)",
                "gpu_memset",
                "cudaMemsetAsync",
            )
            dur = 800 + nbytes // 1500
        gts = self._gpu_slot(COMPUTE_STREAM, rt_ts + r.randint(2000, 6000), dur)
        self._copy(cat, name, COMPUTE_STREAM, gts, dur, ext, corr, nbytes)
        self._flow(self.gpu_w, "f", corr, DEVICE, COMPUTE_STREAM, gts)
        self._runtime(api, "cuda_runtime", rt_ts, rt_dur, ext, corr)
        self._flow(self.gpu_w, "s", corr, CPU_PID, CPU_TID, rt_ts)
        self.cpu = op_ts + op_dur + r.randint(300, 1200)
        return gts, gts + dur

    def _eager_launch(self, lz: Launch) -> tuple[int, int]:
        r = self.rng
        k = self.kernels[lz.kernel]
        self.names_used.add(lz.kernel)
        cpu_w = self.cpu_w
        # sibling ops first (allocations, views)
        for name in lz.pre:
            ts = self.cpu
            dur = r.randint(700, 4000)
            self._x(cpu_w, "cpu_op", name, CPU_PID, CPU_TID, ts, dur, self._cpu_args(r.random() < 0.25))
            self.cpu = ts + dur + r.randint(200, 900)
        # the chain of nested ops holding the launch
        comm_ts = None
        if lz.comm:
            comm_ts = self.cpu
            self.rf_id += 1
            comm_args = self._cpu_args(False, self.rf_id)
            comm_ext = self.ext
            self.cpu += r.randint(800, 2000)
        starts: list[int] = []
        args: list[str] = []
        for _ in lz.chain:
            starts.append(self.cpu)
            args.append(self._cpu_args(r.random() < 0.25))
            self.cpu += r.randint(400, 2500)
        ext = self.ext
        rt_ts = self.cpu
        rt_dur = r.randint(2500, 7000) if k.launcher == "cudaLaunchKernel" else r.randint(3500, 9000)
        rt_end = rt_ts + rt_dur
        end = rt_end
        ends: list[int] = []
        for _ in lz.chain:
            end += r.randint(300, 1500)
            ends.append(end)
        ends.reverse()  # innermost ends first
        for name, ts, e, a in zip(lz.chain, starts, ends, args):
            self._x(cpu_w, "cpu_op", name, CPU_PID, CPU_TID, ts, e - ts, a)
        self.cpu = end + r.randint(300, 1000)
        if comm_ts is not None:
            self._x(cpu_w, "user_annotation", lz.comm, CPU_PID, CPU_TID, comm_ts, self.cpu - comm_ts, comm_args)
            self.cpu += r.randint(200, 600)
        # GPU side (CUPTI buffer order: activity, flow end, runtime call, flow start)
        self.corr += 1
        corr = self.corr
        dur = self._jit(k.mean_ns)
        gts = self._gpu_slot(lz.stream, rt_ts + r.randint(2000, 6000), dur)
        self._kernel(k, lz.stream, gts, dur, ext, corr)
        self._flow(self.gpu_w, "f", corr, DEVICE, lz.stream, gts)
        self._runtime(
            k.launcher, "cuda_runtime" if k.launcher.startswith("cuda") else "cuda_driver", rt_ts, rt_dur, ext, corr
        )
        self._flow(self.gpu_w, "s", corr, CPU_PID, CPU_TID, rt_ts)
        if comm_ts is not None:
            self._x(
                self.gpu_w,
                "gpu_user_annotation",
                lz.comm,
                DEVICE,
                lz.stream,
                gts,
                dur + 200,
                f'"External id": {comm_ext}',
            )
        return gts, gts + dur

    def _graph_launch(self, ann_ext: int) -> tuple[int, int]:
        r = self.rng
        self.corr += 1
        corr = self.corr
        rt_ts = self.cpu
        rt_dur = r.randint(15000, 45000)
        gpu_first = None
        gpu_last = 0
        earliest = rt_ts + r.randint(4000, 9000)
        for i, lz in enumerate(self.seq):
            k = self.kernels[lz.kernel]
            self.names_used.add(lz.kernel)
            dur = self._jit(k.mean_ns)
            gts = self._gpu_slot(lz.stream, earliest, dur)
            earliest = gts + dur // 2 if lz.stream != COMPUTE_STREAM else gts
            self._kernel(k, lz.stream, gts, dur, ann_ext, corr)
            self._flow(self.gpu_w, "f", corr, DEVICE, lz.stream, gts)  # Kineto links every graph kernel
            if i == 0:
                gpu_first = gts
            gpu_last = max(gpu_last, gts + dur)
        self._runtime("cudaGraphLaunch", "cuda_runtime", rt_ts, rt_dur, ann_ext, corr)
        self._flow(self.gpu_w, "s", corr, CPU_PID, CPU_TID, rt_ts)
        self.cpu = rt_ts + rt_dur + r.randint(500, 2000)
        return gpu_first, gpu_last

    def step_once(self) -> None:
        r = self.rng
        self.step += 1
        eager = self.step % 3 != 0  # two extend (eager) steps, then one CUDA-graph decode step
        name = "forward_extend" if eager else "forward_decode"
        ann_ts = self.cpu
        self.rf_id += 1
        ann_args = self._cpu_args(False, self.rf_id)
        ann_ext = self.ext
        self.cpu += r.randint(5000, 20000)
        first, _ = self._copy_launch("htod")
        if self.step % 3 == 0:
            self._copy_launch("memset")
        if eager and self.step % 8 == 1:
            self._copy_launch("ptop")
        if eager:
            last = 0
            for lz in self.seq:
                _, e = self._eager_launch(lz)
                last = max(last, e)
        else:
            _, last = self._graph_launch(ann_ext)
        _, dtoh_end = self._copy_launch("dtoh")
        gpu_end = max(last, dtoh_end, self.stream_free[COMM_STREAM])
        # the scheduler waits for the sampled tokens
        sync_ts = self.cpu
        sync_dur = max(2000, gpu_end - sync_ts + r.randint(1000, 4000))
        self.corr += 1
        self._runtime("cudaStreamSynchronize", "cuda_runtime", sync_ts, sync_dur, ann_ext, self.corr)
        self.cpu = sync_ts + sync_dur + r.randint(2000, 8000)
        self._x(self.cpu_w, "user_annotation", name, CPU_PID, CPU_TID, ann_ts, self.cpu - ann_ts, ann_args)
        self._x(
            self.gpu_w,
            "gpu_user_annotation",
            name,
            DEVICE,
            COMPUTE_STREAM,
            first,
            gpu_end - first,
            f'"External id": {ann_ext}',
        )
        self.cpu += r.randint(20000, 60000)  # scheduler work between steps
        for s in self.stream_free:
            self.stream_free[s] = max(self.stream_free[s], self.cpu)

    def trailer(self, w: _Writer) -> None:
        ts = START_NS
        q = '"'
        for pid, pname, label, sort in (
            (CPU_PID, "python3", "CPU", CPU_PID),
            (DEVICE, "python3", f"GPU {DEVICE}", 5000000),
        ):
            self._meta(w, "process_name", ts, pid, 0, f'"name": {q}{pname}{q}')
            self._meta(w, "process_labels", ts, pid, 0, f'"labels": {q}{label}{q}')
            self._meta(w, "process_sort_index", ts, pid, 0, f'"sort_index": {sort}')
        for stream in (COMPUTE_STREAM, COMM_STREAM):
            self._meta(w, "thread_name", ts, DEVICE, stream, f'"name": "stream {stream} "')
            self._meta(w, "thread_sort_index", ts, DEVICE, stream, f'"sort_index": {stream}')
        self._meta(w, "thread_name", ts, CPU_PID, CPU_TID, f'"name": "thread {CPU_TID} (python3)"')
        self._meta(w, "thread_sort_index", ts, CPU_PID, CPU_TID, f'"sort_index": {CPU_TID}')
        end = max(self.cpu, *self.stream_free.values())
        if self.kineto:
            recs = [
                f'  {{\n    "ph": "X", "cat": "Trace", "ts": {_us(START_NS)}, "dur": {_us(end - START_NS)},\n'
                '    "pid": "Spans", "tid": "PyTorch Profiler",\n    "name": "PyTorch Profiler (0)",\n'
                '    "args": {\n      "Op count": 0\n    }\n  }',
                f'  {{\n    "name": "process_sort_index", "ph": "M", "ts": {_us(START_NS)},\n    "pid": "Spans", "tid": 0,\n'
                '    "args": {\n      "sort_index": 536870912\n    }\n  }',
                '  {\n    "name": "Iteration Start: PyTorch Profiler", "ph": "i", "s": "g",\n'
                f'    "pid": "Traces", "tid": "Trace PyTorch Profiler", "ts": {_us(START_NS)}\n  }}',
                '  {\n    "name": "Record Window End", "ph": "i", "s": "g",\n'
                f'    "pid": "", "tid": "", "ts": {_us(end)}\n  }}',
            ]
        else:
            recs = [
                f'  {{"ph": "X", "cat": "Trace", "ts": {_us(START_NS)}, "dur": {_us(end - START_NS)}, "pid": "Spans", '
                '"tid": "PyTorch Profiler", "name": "PyTorch Profiler (0)", "args": {"Op count": 0}}',
                f'  {{"name": "process_sort_index", "ph": "M", "ts": {_us(START_NS)}, "pid": "Spans", "tid": 0, '
                '"args": {"sort_index": 536870912}}',
                f'  {{"name": "Iteration Start: PyTorch Profiler", "ph": "i", "s": "g", "pid": "Traces", '
                f'"tid": "Trace PyTorch Profiler", "ts": {_us(START_NS)}}}',
                f'  {{"name": "Record Window End", "ph": "i", "s": "g", "pid": "", "tid": "", "ts": {_us(end)}}}',
            ]
        for rec in recs:
            w.add(rec)
        self.records += len(recs)
        self.x_events += 1
        self.counts["Trace"] = 1
        self.counts["M"] = self.counts.get("M", 0) + 1
        self.counts["instant"] = 2


def _header() -> str:
    dev = []
    for i in range(8):
        dev.append(
            f'    {{\n      "id": {i}, "name": "NVIDIA B200", "totalGlobalMem": 191503138816,\n'
            '      "computeMajor": 10, "computeMinor": 0,\n'
            '      "maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": 2048,\n'
            '      "regsPerBlock": 65536, "warpSize": 32,\n'
            f'      "sharedMemPerBlock": 49152, "numSms": {NUM_SMS}\n'
            '    , "regsPerMultiprocessor": 65536, "sharedMemPerBlockOptin": 232448, "sharedMemPerMultiprocessor": 233472\n    }'
        )
    dist = (
        '{"backend": "nccl", "rank": 0, "world_size": 8, "pg_count": 2, "pg_config": [{"pg_name": "0", "pg_desc": "default_pg", '
        '"backend_config": "cuda:nccl", "pg_size": 8, "ranks": [0, 1, 2, 3, 4, 5, 6, 7]}, {"pg_name": "1", "pg_desc": "undefined", '
        '"backend_config": "cpu:gloo,cuda:gloo", "pg_size": 8, "ranks": [0, 1, 2, 3, 4, 5, 6, 7]}], "nccl_version": "2.27.3"}'
    )
    return (
        '{\n  "schemaVersion": 1,\n  "deviceProperties": [\n' + ",\n".join(dev) + "\n  ],\n"
        f'  "distributedInfo": {dist},\n'
        '  "cupti_version": 26,\n  "cuda_runtime_version": 12080,\n  "with_flops": 0,\n  "record_shapes": 1,\n'
        '  "cuda_driver_version": 12080,\n  "trace_id": "5F1C7B9A0D3E4B2A8C6E1F0A9B8D7C6E",\n'
        '  "traceEvents": [\n'
    )


def _trailer_text(name: str) -> str:
    return (
        f'\n  ],\n  "traceName": {json.dumps(name)},\n  "displayTimeUnit": "ms",\n'
        f'  "baseTimeNanoseconds": {BASE_TIME_NS}\n}}\n'
    )


def gzip_file(src: str | Path, dst: str | Path, level: int = 1) -> int:
    """Deterministic gzip (no name, mtime 0) of ``src``; returns the compressed size."""
    comp = zlib.compressobj(level, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    tmp = f"{dst}.tmp-{os.getpid()}"
    with open(src, "rb") as fi, open(tmp, "wb") as fo:
        while True:
            block = fi.read(16 << 20)
            if not block:
                break
            fo.write(comp.compress(block))
        fo.write(comp.flush())
    os.replace(tmp, dst)
    return os.path.getsize(dst)


GENERATOR_VERSION = 1


def make_trace(
    path: str | Path,
    *,
    mb: float = 320,
    events_min: int = 1_500_000,
    seed: int = 0,
    gz_path: str | Path | None = None,
    gz_level: int = 1,
    layout: str = "oneline",
    progress: bool = False,
) -> dict:
    """Write the trace to ``path`` (and a gzip copy to ``gz_path``); return what was written."""
    t0 = time.perf_counter()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    gen = _Gen(seed, layout)
    tmp = path.with_name(path.name + f".tmp-{os.getpid()}")
    spill = path.with_name(path.name + f".cupti-{os.getpid()}")
    target = int(mb * 1_000_000)
    try:
        with open(tmp, "wb") as main, open(spill, "wb") as cupti:
            head = _header().encode()
            main.write(head)
            gen.cpu_w = _Writer(main, first=True)
            gen.gpu_w = _Writer(cupti, first=True)
            last_report = 0.0
            while True:
                gen.step_once()
                approx = len(head) + gen.cpu_w.bytes + gen.cpu_w.size + gen.gpu_w.bytes + gen.gpu_w.size
                if approx >= target and gen.records >= events_min:
                    break
                if progress and time.perf_counter() - last_report > 5:
                    last_report = time.perf_counter()
                    print(
                        f"  make_trace: {approx / 1e6:.0f} MB, {gen.x_events:,} X events", file=sys.stderr, flush=True
                    )
            gen.cpu_w.flush()
            gen.gpu_w.flush()
        with open(spill, "rb") as cupti, open(tmp, "ab") as main:
            main.write(b",\n")
            shutil.copyfileobj(cupti, main, 16 << 20)
            tail = _Writer(main, first=False)
            gen.trailer(tail)
            tail.flush()
            main.write(_trailer_text(f"/tmp/sglang_profile/rank0_{seed}.pt.trace.json").encode())
        os.replace(tmp, path)
    finally:
        for p in (tmp, spill):
            if p.exists():
                p.unlink()
    size = path.stat().st_size
    info = {
        "path": str(path),
        "bytes": size,
        "layout": layout,
        "seed": seed,
        "generator_version": GENERATOR_VERSION,
        "records": gen.records,
        "x_events": gen.x_events,
        "steps": gen.step,
        "by_cat": dict(sorted(gen.counts.items())),
        "distinct_kernel_names": len(gen.names_used),
        "generate_s": round(time.perf_counter() - t0, 2),
    }
    if gz_path is not None:
        t1 = time.perf_counter()
        info["gz_path"] = str(gz_path)
        info["gz_bytes"] = gzip_file(path, gz_path, gz_level)
        info["gz_level"] = gz_level
        info["gzip_s"] = round(time.perf_counter() - t1, 2)
    return info


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", help="output .json path")
    ap.add_argument("--mb", type=float, default=320, help="minimum size in MB (10^6 bytes) of JSON (default 320)")
    ap.add_argument(
        "--events-min", type=int, default=1_500_000, help="minimum number of traceEvents records (default 1.5M)"
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--gz", action="store_true", help="also write OUT.gz (gzip level 1)")
    ap.add_argument(
        "--layout",
        choices=("oneline", "kineto"),
        default="oneline",
        help="one record per line (default) or libkineto's multi-line pretty printing",
    )
    a = ap.parse_args(argv)
    info = make_trace(
        a.out,
        mb=a.mb,
        events_min=a.events_min,
        seed=a.seed,
        gz_path=a.out + ".gz" if a.gz else None,
        layout=a.layout,
        progress=True,
    )
    print(json.dumps(info, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
