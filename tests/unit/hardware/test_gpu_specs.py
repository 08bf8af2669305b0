"""Hardware profiles (tracekit/data/hardware/*.json): shipped, cited, dense, detectable, overridable."""

from __future__ import annotations

import json
from importlib import resources

import pytest

from tracekit.errors import MissingDataError, DataFileError, InputError
from tracekit.gpu_specs import DTYPES, detect_profile, load_profile, resolve_profile, shipped_profiles, with_hbm

NAMES = {"b200", "b300", "gb200", "h100", "h200", "h20", "a100", "mi300x", "mi350x", "mi355x"}


def meta(name: str) -> dict:
    return {"device_properties": [{"id": 0, "name": name, "numSms": 1}], "devices_used": [0]}


def test_every_profile_ships_loads_and_cites_its_source():
    profiles = shipped_profiles()
    assert set(profiles) == NAMES
    files = {p.name for p in resources.files("tracekit.data").joinpath("hardware").iterdir()}
    assert {f"{n}.json" for n in NAMES} <= files  # what package-data must carry into the wheel
    for p in profiles.values():
        assert p.source.strip() and p.full_name and p.vendor in ("NVIDIA", "AMD")
        assert p.sms > 0 and p.hbm_gbps > 0 and p.hbm_gb > 0 and p.interconnect.unidirectional_gbps > 0
        assert set(p.peak_dense_tflops) == set(DTYPES), p.name
        # dense peaks: low precision never slower than high precision
        peaks = [p.peak_dense_tflops[d] for d in ("fp4", "fp8", "bf16", "tf32")]
        known = [v for v in peaks if v is not None]
        assert known == sorted(known, reverse=True), p.name
        for field in p.unverified:
            assert field.split(".")[0] in HardwareProfileFields, (p.name, field)


HardwareProfileFields = {"sms", "hbm_gb", "hbm_gbps", "peak_dense_tflops", "interconnect", "hbm_gbps_bus"}


def test_values_we_rely_on():
    b200 = load_profile("b200")
    assert (b200.sms, b200.hbm_gbps, b200.interconnect.unidirectional_gbps) == (148, 8000, 900)
    assert b200.peak_dense_tflops["fp8"] == 4500 == 2 * b200.peak_dense_tflops["bf16"]
    assert b200.peak_dense_tflops["fp4"] == 2 * b200.peak_dense_tflops["fp8"]
    h100, h200 = load_profile("h100"), load_profile("h200")
    assert h100.peak_dense_tflops == h200.peak_dense_tflops and h100.peak_dense_tflops["bf16"] == 989.4
    assert (h100.hbm_gbps, h200.hbm_gbps, h100.sms) == (3350, 4800, 132)
    assert load_profile("a100").peak_dense_tflops["fp8"] is None  # no FP8 on Ampere
    assert load_profile("mi300x").sm_unit == "CU" and load_profile("mi300x").sms == 304


def test_numbers_that_could_not_be_checked_say_so():
    h20 = load_profile("h20")
    assert "UNVERIFIED" in h20.note and {"peak_dense_tflops", "hbm_gbps", "sms"} <= set(h20.unverified)
    assert "sms" in load_profile("b300").unverified


def test_names_and_aliases_are_case_insensitive():
    assert load_profile("B200").name == "b200"
    assert load_profile("MI300X").name == "mi300x"
    assert load_profile("hgx-b200").name == "b200"


@pytest.mark.parametrize(
    "device, want",
    [
        ("NVIDIA B200", "b200"),
        ("NVIDIA GB200", "gb200"),
        ("NVIDIA B300 SXM6 AC", "b300"),
        ("NVIDIA H100 80GB HBM3", "h100"),
        ("NVIDIA H200", "h200"),
        ("NVIDIA H20", "h20"),
        ("NVIDIA A100-SXM4-80GB", "a100"),
        ("AMD Instinct MI300X", "mi300x"),
        ("AMD Instinct MI355X", "mi355x"),
    ],
)
def test_detected_from_device_properties(device, want):
    assert detect_profile(meta(device)).name == want


def test_unknown_device_needs_hw():
    assert detect_profile(meta("NVIDIA RTX 4090")) is None
    assert detect_profile({}) is None
    with pytest.raises(MissingDataError, match="--hw"):  # the trace lacks what roofline needs: exit 4
        resolve_profile(None, meta("NVIDIA RTX 4090"), what="roofline")
    assert resolve_profile("h100", meta("NVIDIA RTX 4090")).name == "h100"  # --hw wins


def test_unknown_name_is_an_input_error():
    with pytest.raises(InputError, match="b200"):
        load_profile("tpu-v9")


def test_user_file_full_and_based(tmp_path):
    doc = json.loads(resources.files("tracekit.data").joinpath("hardware", "h100.json").read_text())
    doc.update(name="h100-pcie", sms=114, hbm_gbps=2000)
    full = tmp_path / "h100_pcie.json"
    full.write_text(json.dumps(doc))
    p = load_profile(full)
    assert (p.name, p.sms, p.hbm_gbps, p.path) == ("h100-pcie", 114, 2000, str(full))

    based = tmp_path / "mine.json"
    based.write_text(
        json.dumps({"base": "b200", "name": "b200-bus", "hbm_gbps": 7672, "peak_dense_tflops": {"fp8": 4000}})
    )
    p = load_profile(based)
    assert (p.name, p.hbm_gbps, p.sms) == ("b200-bus", 7672, 148)
    assert p.peak_dense_tflops["fp8"] == 4000 and p.peak_dense_tflops["bf16"] == 2250  # merged key by key


def test_bad_user_file_names_path_and_field(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"base": "b200", "sms": "many"}))
    with pytest.raises(DataFileError, match=r"bad\.json.*\$\.sms"):
        load_profile(bad)
    bad.write_text(json.dumps({"base": "b200", "peak_dense_tflops": {"fp7": 1}}))
    with pytest.raises(DataFileError, match="fp7"):
        load_profile(bad)
    bad.write_text(json.dumps({"base": "nope"}))
    with pytest.raises(DataFileError, match=r"\$\.base"):
        load_profile(bad)
    bad.write_text("{not json")
    with pytest.raises(DataFileError, match="not valid JSON"):
        load_profile(bad)


def test_hbm_override_and_bus_figure():
    b200 = load_profile("b200")
    assert with_hbm(b200, "bus").hbm_gbps == 7672  # 7680-bit bus x 3996 MHz x 2
    assert with_hbm(b200, 7000).hbm_gbps == 7000 and b200.hbm_gbps == 8000  # not mutated
    assert with_hbm(b200, None) is b200
    with pytest.raises(InputError, match="bus"):
        with_hbm(load_profile("h100"), "bus")
    with pytest.raises(InputError):
        with_hbm(b200, "fast")


def test_peak_flops_maps_dtypes():
    b200 = load_profile("b200")
    assert b200.peak_flops("fp8") == b200.peak_flops("e4m3") == b200.peak_flops("int8") == 4.5e15
    assert b200.peak_flops("nvfp4") == 9e15 and b200.peak_flops("BF16") == 2.25e15
    assert load_profile("a100").peak_flops("fp8") is None


def test_a_device_without_a_name_is_found_by_its_sm_count_and_memory():
    """The vLLM MI300 trace's deviceProperties name is empty: 'no deviceProperties' was the error."""
    from tracekit.gpu_specs import detect_profile

    meta = {
        "device_properties": [{"id": 0, "name": "", "numSms": 304, "totalGlobalMem": 206141652992}],
        "devices_used": [0],
    }
    hw = detect_profile(meta)
    assert hw is not None and hw.name == "mi300x" and "names no device" in hw.source
    meta["device_properties"][0]["numSms"] = 132  # H100 and H200 both: memory tells them apart
    meta["device_properties"][0]["totalGlobalMem"] = 150 * 2**30
    assert detect_profile(meta).name == "h200"
    meta["device_properties"][0]["totalGlobalMem"] = 40 * 2**30  # no profile fits: nothing is guessed
    assert detect_profile(meta) is None
