"""Kernel families by what the kernel is: its own function name, not words in its template
arguments. Expected families come from tests/data/kernel_names.tsv, where each row is a person's
judgement of one real kernel (or op) name; the traces' own names are read here with the json module."""

from __future__ import annotations

import csv
from pathlib import Path

import polars as pl
import pytest

import oracle
from dashboard.engine.analyses.kernels import FAMILIES, FAMILY_RULES, family_expr, family_of
from dashboard.engine.rules.names import demangle, parse

TSV = Path(__file__).parent / "data" / "kernel_names.tsv"
BUNDLED = Path(__file__).parent.parent / "sample_traces"  # the bundled collections (the H200's among them)


def table() -> list[tuple[str, str, str]]:
    with open(TSV, newline="") as fh:
        rows = [r for r in csv.reader(fh, delimiter="\t", quoting=csv.QUOTE_NONE) if r and not r[0].startswith("#")]
    return [(name, family, source) for name, family, source in rows]


ROWS = table()


def test_the_table_holds_every_kernel_name_of_the_bundled_traces_and_public_libraries():
    names = {name for name, _, _ in ROWS}
    in_traces = {
        e["name"]
        for path in sorted([*oracle.DATA.glob("*.gz"), *BUNDLED.glob("*/*.json.gz")])
        for e in oracle.complete(oracle.raw(path))
        if e.get("cat") in ("kernel", "Kernel")
    }
    assert in_traces <= names
    assert len(ROWS) >= 150 and len(names) == len(ROWS)
    assert len(names - in_traces) >= 50  # names from public libraries, beyond the bundled traces
    assert {family for _, family, _ in ROWS} <= set(FAMILIES)


@pytest.mark.parametrize("name, family, source", ROWS, ids=[f"{i}-{r[0][:50]}" for i, r in enumerate(ROWS)])
def test_each_real_name_falls_in_the_family_a_person_gave_it(name, family, source):
    assert family_of(name) == family, f"{source}: {parse(name).qualname}"


def test_family_expr_classifies_a_whole_column_like_family_of_name_by_name():
    names = [name for name, _, _ in ROWS]
    got = pl.DataFrame({"name": names}).select(family_expr(pl.col("name").cast(pl.Categorical))).to_series().to_list()
    assert got == [family for _, family, _ in ROWS]


def test_gpu_memcpy_and_memset_rows_are_copy_and_memset_whatever_their_name():
    frame = pl.DataFrame(
        {"name": ["Memcpy HtoD (Pinned -> Device)", "odd", "odd"], "cat": ["gpu_memcpy", "gpu_memset", "kernel"]}
    )
    assert frame.select(family_expr(pl.col("name"), pl.col("cat"))).to_series().to_list() == ["copy", "memset", "other"]


def test_template_arguments_do_not_make_a_kernel_a_gemm():
    # the old substring rule saw 'cutlass' and 'gemm' anywhere in the name
    assert (
        family_of(
            "void tensorrt_llm::kernels::finalizeMoeRoutingKernel<cutlass::bfloat16_t, float>(cutlass::bfloat16_t const*)"
        )
        == "reduction"
    )
    assert family_of("fbgemm::permute_2D_sparse_data") == "embedding"
    assert family_of("void my_kernel<cutlass::gemm::GemmShape<128, 128, 32> >(float*)") == "other"


def test_a_cutlass_launcher_is_named_by_the_kernel_it_launches():
    gemm = parse(
        "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x6_tn_align8>(cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x6_tn_align8::Params)"  # noqa: E501 (a real name, kept whole)
    )
    assert (gemm.qualname, gemm.launcher) == (
        "cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x6_tn_align8",
        "cutlass::Kernel2",
    )
    fa3 = parse(
        "void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<int, float> > >(flash::FlashAttnFwdSm90<int, float>::Params)"
    )
    assert (fa3.qualname, fa3.launcher, fa3.template_args) == (
        "flash::FlashAttnFwdSm90",
        "cutlass::device_kernel",
        ("int", "float"),
    )


def test_signatures_lose_return_type_parameters_and_template_arguments_but_keep_namespaces():
    k = parse("std::enable_if<!(false), void>::type internal::gemvx::kernel<int, float>(cublasGemvParams<float>)")
    assert (k.namespace, k.base, k.template_args) == ("internal::gemvx", "kernel", ("int", "float"))
    k = parse(
        "void at::native::(anonymous namespace)::CatArrayBatchedCopy<float, unsigned int, 2, 128, 1>(float*, int)"
    )
    assert (k.namespace, k.base) == ("at::native::(anonymous namespace)", "CatArrayBatchedCopy")
    assert parse("Memcpy DtoD (Device -> Device)").qualname == "Memcpy DtoD (Device -> Device)"
    assert parse("aten::_scaled_dot_product_flash_attention").qualname == "aten::_scaled_dot_product_flash_attention"
    cut = parse("void flash_fwd_kernel<Flash_fwd_kernel_traits<(int)128, (int)128, (int)64, (i...")
    assert cut.qualname == "flash_fwd_kernel"


def test_mangled_composable_kernel_names_read_like_cxxfilt_prints_them():
    # expected text written from c++filt's output for the same symbols (return type and parameters dropped)
    assert demangle(
        "_ZN5aiter24add_rmsnorm_quant_kernelIDF16bDF16bLi256ELi16ELb0ELb0ELb1ELi1EEEvPT0_PT_PfS4_S4_S4_diiiiiiib"
    ) == ("aiter::add_rmsnorm_quant_kernel<std::bfloat16_t, std::bfloat16_t, 256, 16, false, false, true, 1>")
    assert demangle(
        "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEESt5arrayIPcLm1EEEEviT0_T1_"
    ) == ("at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, 1ul>>")
    ck = parse(
        "_ZN7ck_tile6kentryILi2ENS_38FmhaBatchPrefillWithPagedKVCacheKernelINS_40BlockFmhaBatchPrefillPipelineQRKSVSAsyncE"
    )
    assert (ck.qualname, ck.launcher) == ("ck_tile::FmhaBatchPrefillWithPagedKVCacheKernel", "ck_tile::kentry")


def test_a_mangled_name_cxxfilt_rejects_still_gives_its_function_name():
    # SGLang's activation kernel: a C++20 template-param-decl (Tn) and a function address argument
    name = (
        "_ZN7sgl_hip10activation18act_and_mul_kernelI14__hip_bfloat16TnPFT_RKS3_EXadL_Z4siluIS2_ES3_S5_EEEEvPS3_PS4_i"
    )
    assert demangle(name) == "sgl_hip::activation::act_and_mul_kernel<__hip_bfloat16, &silu<__hip_bfloat16>>"
    assert demangle("_ZN5aiter24add_rms") is None and parse("_ZN5aiter24add_rms").base == "_ZN5aiter24add_rms"


def test_every_rule_has_a_reason_and_a_known_family():
    assert all(rule.reason and rule.family in FAMILIES for rule in FAMILY_RULES)
