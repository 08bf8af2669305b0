"""GEMM library names shortened to their tile (tracekit/data/kernel_names.json): CUTLASS 2 with an epilogue or a
dtype in the instruction, CUTLASS 3 in its library and its templated form, and cuBLAS nvjet."""

from tracekit.names import distinct_names, short_name

CUTLASS3_TEMPLATE = (
    "void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<cute::tuple<int, int, int, int>, "
    "cutlass::gemm::collective::CollectiveMma<cutlass::gemm::MainloopSm90TmaGmmaWarpSpecializedCooperative<4, "
    "cute::tuple<cute::C<2>, cute::C<1>, cute::C<1> >, cutlass::gemm::KernelTmaWarpSpecializedCooperative>, "
    "cute::tuple<cute::C<128>, cute::C<256>, cute::C<64> >, cutlass::bfloat16_t, cute::tuple<long, cute::C<1>, long>, "
    "cutlass::bfloat16_t>, cutlass::epilogue::collective::CollectiveEpilogue<> , void> >"
    "(cutlass::gemm::kernel::GemmUniversal<>::Params)"
)


def test_cutlass2_with_dtype_and_epilogue():
    name = (
        "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x6_tn_align8>"
        "(cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x6_tn_align8::Params)"
    )
    assert short_name(name) == "cutlass tensorop_bf16_s16816gemm<64x64_64x6_tn>"


def test_cutlass3_library_name():
    assert (
        short_name(
            "cutlass3x_sm90_tensorop_gemm_bf16_bf16_f32_bf16_bf16_128x256x64_1x2x1_0_tnn_align8_"
            "warpspecialized_cooperative_epi_tma"
        )
        == "cutlass3x_sm90_gemm<128x256x64_1x2x1_tnn>"
    )


def test_cutlass3_template_names_the_mainloop_and_the_tile_not_the_cluster():
    assert short_name(CUTLASS3_TEMPLATE) == "GemmUniversal<Sm90, 128x256x64>"


def test_nvjet():
    assert short_name("nvjet_tst_64x64_64x16_2x1_2cta_v_bz_bias_TNT") == "nvjet<64x64_64x16_2x1_TNT>"


def test_different_tiles_stay_distinct():
    a = CUTLASS3_TEMPLATE
    b = a.replace("cute::C<256>, cute::C<64>", "cute::C<128>, cute::C<64>")
    assert len(set(distinct_names([a, b]))) == 2


def test_colliding_cxx_templates_get_their_template_arguments_when_short():
    """Two PyTorch kernels that read the same show their template arguments where those fit ``WIDTH``; wider (here
    69 characters), the short form with the words that tell them apart (a table cell of one or two lines, not ten:
    review of issue 39)."""
    a = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<int>, std::array<char*, 1ul> >(int)"
    b = a.replace("FillFunctor<int>", "FillFunctor<long>")
    assert distinct_names([a, b]) == [
        "vectorized_elementwise_kernel<FillFunctor> [int]",
        "vectorized_elementwise_kernel<FillFunctor> [long]",
    ]
    c, d = "void k<4, F<int> >(int)", "void k<4, F<long> >(int)"
    assert distinct_names([c, d]) == ["k<4, F<int>>", "k<4, F<long>>"]
