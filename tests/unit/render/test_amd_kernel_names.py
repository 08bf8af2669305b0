"""AMD kernel names (Tensile/hipBLASLt, MIOpen igemm, ck_tile, aiter, sgl-kernel, Triton, RCCL) shortened by the data
rules of tracekit/data/kernel_names.json, on the real names of the corpus's ROCm traces (tests/data/amd_kernel_names.txt:
the distinct kernel names of tracelens mi210/sglang/vLLM/rocprof MI350 and hta mi250 traces)."""

from pathlib import Path

import pytest

from tracekit.names import WIDTH, distinct_names, short_name

NAMES = [
    line
    for line in (Path(__file__).parents[2] / "data" / "amd_kernel_names.txt").read_text().splitlines()
    if line and not line.startswith("#")
]
# PyTorch's own kernels read as on NVIDIA (their short forms are unchanged there); the bound is for the AMD libraries'
PYTORCH = ("void at::native::", "void (anonymous namespace)::", "void at::native::(anonymous namespace)::")

HIPBLASLT = (
    "Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT256x32x64_MI16x16x1_SN_LDSB1_AFC1_AFEM1_AFEM1_ASEM1_CLR1_CADS0_"
    "DTLA0_DTLB0_DTVA0_DTVB0_EPS0_FDSI0_GRPM1_GRVWA8_GRVWB8_GSUAMBSK_GLS0_ISA942_IU1_K1_LDSTI0_LBSPPA512_LBSPPB256_"
    "LBSPPM0_LPA16_LPB16_LPM0_LRVW8_LWPMn1_MIAV0_MIWT4_2_MO40_NTn1_NTA0_NTB0_NTC0_NTD4_NTM0_NEPBS16_NLCA1_NLCB1_ONLL1_"
    "PGR2_PLR1_PKA1_SIA3_SS1_SPO0_SRVW0_SSO0_SVW8_SK0_SKFTR0_SKXCCM0_TLDS1_ULSGRO0_USL1_UIOFGRO0_USFGROn1_VSn1_VWA8_"
    "VWB2_WSGRA0_WSGRB0_WS64_WG64_4_1"
)
CK_RMSNORM = (
    "_ZN7ck_tile6kentryILi1ENS_12Rmsnorm2dFwdINS_27Rmsnorm2dFwdPipelineOnePassINS_27Rmsnorm2dFwdPipelineProblemIDF16bDF16"
    "bfDF16bDF16bDF16bffNS_19Generic2dBlockShapeINS_8sequenceIJLi1ELi3072EEEENS5_IJLi1ELi128EEEENS5_IJLi1ELi8EEEEEENS_1"
    "8Rmsnorm2dFwdTraitsILb1ELb0ELb0ELb0ELNS_21Rmsnorm2dFusedAddEnumE1ELNS_23Rmsnorm2dFusedQuantEnumE0ELNS_22Rmsnorm2dSe"
    "nsitiveEnumE0EEEEENS_33Rmsnorm2dFwdPipelineDefaultPolicyEEENS_17Default2DEpilogueINS_24Default2DEpilogueProblemIfDF"
    "16bLb0ELb1ELb0EEEvEEEEJNSM_5KargsEEEEvDpT1_"
)
AITER = "_ZN5aiter24add_rmsnorm_quant_kernelIDF16bDF16bLi256ELi16ELb0ELb0ELb1ELi1EEEvPT0_PT_PfS4_S4_S4_diiiiiiib"


def test_the_names_file_holds_the_corpus_names():
    assert len(NAMES) == len(set(NAMES)) > 300
    assert sum(n.startswith("Cijk_") for n in NAMES) > 150


@pytest.mark.parametrize(
    "name, short",
    [
        (HIPBLASLT, "hipBLASLt MT256x32x64 Alik_Bljk BBS_BH MI16x16"),
        (HIPBLASLT.replace("_SK0_", "_SK3_"), "hipBLASLt MT256x32x64 Alik_Bljk BBS_BH MI16x16 SK3"),
        (
            "Cijk_Alik_Bljk_SB_Bias_AS_SAV_UserArgs_MT64x16x32_MI16x16x1_SN_LDSB0_AFC1_AFEM1_WS64_WG64_4_1",
            "hipBLASLt MT64x16x32 Alik_Bljk SB MI16x16",
        ),
        (
            "Cijk_Ailk_Bljk_HHS_BH_MT128x128x32_MI32x32x8x1_SN_GRVW8_SK2_WG32_8_1",
            "Tensile MT128x128x32 Ailk_Bljk HHS_BH MI32x32 SK2",
        ),
        ("Cijk_SB_BiasB_HAS_ScaleAlphaVec_PostGSU2_VW2", "Tensile PostGSU2 SB"),
        (
            "igemm_fwd_gtcx2_nhwc_bf16_bx0_ex1_bt256x64x8_wt64x16x4_ws1x1_wr2x2_ta1x1x8x1_1x8x1x32_tb1x1x2x1_1x8x1x32_me",
            "igemm_fwd nhwc bf16 bt256x64x8 wt64x16x4",
        ),
        (CK_RMSNORM, "ck_tile Rmsnorm2dFwd<OnePass, 1x3072, add1, quant0>"),
        (
            "_ZN7ck_tile6kentryILi64ELi1ENS_13FmhaFwdKernelINS_28BlockFmhaPipelineQRKSVSAsyncIvEEEEEEvv",
            "ck_tile FmhaFwdKernel",
        ),
        (AITER, "aiter add_rmsnorm_quant_kernel"),
        (
            "_ZN7sgl_hip10activation18act_and_mul_kernelI14__hip_bfloat16TnPFT_RKS3_EXadL_Z4siluIS2_ES3_S5_EEEEvPS3_PS4_i",
            "act_and_mul_kernel<silu>",
        ),
        ("triton_poi_fused_add_bitwise_and_bitwise_not_bitwise_or_ge_lt_mul_sub_0", "triton_poi_fused_add_\u2026_0"),
        ("_matmul_ogs_NNT_bf16xbf16xmxfp4_16x128x256x1_swiglu", "_matmul_ogs_NNT_bf16xbf16xmxfp4_16x128x256x1_swiglu"),
        ("kernel_unified_attention_2d", "kernel_unified_attention_2d"),
        ("ncclDevKernel_Generic_1(ncclDevKernelArgsStorage<4096ul>)", "ncclDevKernel_Generic_1"),
        (
            "void wvSplitK_hf_sml_<__hip_bfloat16, 64, 2, 16, 8, 2, 1>(int, int, int, __hip_bfloat16 const*, "
            "__hip_bfloat16 const*, __hip_bfloat16*, int, int)",
            "wvSplitK_hf_sml_",
        ),
    ],
)
def test_hand_checked_short_forms(name, short):
    assert short_name(name) == short


def test_every_amd_library_name_fits_the_bound():
    too_wide = [(short_name(n), n[:80]) for n in NAMES if not n.startswith(PYTORCH) and len(short_name(n)) > WIDTH]
    assert too_wide == []


def test_no_tensile_or_mangled_name_is_left_whole():
    left = [n[:80] for n in NAMES if n.startswith(("Cijk_", "_Z", "igemm_")) and short_name(n) == n]
    assert left == []


def test_different_names_stay_distinct_in_one_table():
    shown = distinct_names(NAMES)
    assert len(set(shown)) == len(NAMES)
    # names that share a short form are told apart by their differing words, not by their 450-character whole name
    apart = [s for n, s in zip(NAMES, shown) if n.startswith(("Cijk_", "_Z", "igemm_"))]
    assert max(map(len, apart)) <= 80


def test_two_tensile_kernels_with_one_tile_read_differently():
    a = HIPBLASLT
    b = a.replace("_NTA0_", "_NTA4_").replace("_NEPBS16_", "_NEPBS8_")
    assert distinct_names([a, b]) == [
        "hipBLASLt MT256x32x64 Alik_Bljk BBS_BH MI16x16 [NTA0]",
        "hipBLASLt MT256x32x64 Alik_Bljk BBS_BH MI16x16 [NTA4]",
    ]


def test_mangled_names_are_told_apart_by_their_template_numbers():
    other = AITER.replace("Li256ELi16", "Li64ELi8")
    assert distinct_names([AITER, other]) == [
        "aiter add_rmsnorm_quant_kernel [256]",
        "aiter add_rmsnorm_quant_kernel [64]",
    ]
    fused = CK_RMSNORM.replace("FusedAddEnumE1", "FusedAddEnumE0")
    assert distinct_names([CK_RMSNORM, fused]) == [
        "ck_tile Rmsnorm2dFwd<OnePass, 1x3072, add1, quant0>",
        "ck_tile Rmsnorm2dFwd<OnePass, 1x3072, add0, quant0>",
    ]
