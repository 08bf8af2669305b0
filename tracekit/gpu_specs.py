"""Hardware profiles: SM count, HBM bandwidth, dense peak FLOP/s per dtype and link bandwidth, as data.

The shipped profiles are JSON files in ``tracekit/data/hardware/`` (one per GPU, each citing the vendor
document its numbers come from, and listing in ``unverified`` what could not be checked). A profile is
chosen by name or alias (``--hw b200``), detected from a trace's ``deviceProperties`` name, or read from
a user file: a full profile, or ``{"base": "b200", ...}`` that overrides some fields of a shipped one.

Units: bandwidths in GB/s (10^9 B/s), peaks in TFLOP/s (10^12), memory in GB (10^9 B); every tensor-core
peak is dense (no 2:4 sparsity). ``peak_dense_tflops`` maps a dtype (fp4, fp8, bf16, fp16, tf32, fp32) to
its peak, ``null`` where the GPU has no such rate.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, Optional

import msgspec
import numpy as np

from .errors import DataFileError, InputError, MissingDataError, named_or_loaded
from .errors import check_argument

DTYPES = ("fp4", "fp8", "bf16", "fp16", "tf32", "fp32")
# bytes per element, and the peak a dtype's math runs at (int8 is counted at the fp8 rate, fp6 at fp8)
_DTYPES = json.loads(resources.files("tracekit.data").joinpath("dtypes.json").read_text(encoding="utf-8"))
DTYPE_BYTES: dict[str, float] = {k: float(v) for k, v in _DTYPES["bytes"].items()}  # tracekit/data/dtypes.json
DTYPE_ALIASES: dict[str, str] = dict(_DTYPES["aliases"])
DTYPE_PEAK: dict[str, str] = dict(_DTYPES["peak"])


class Interconnect(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    name: str
    unidirectional_gbps: float  # per GPU, one direction, all links together
    note: str = ""


class HardwareProfile(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    name: str
    full_name: str
    vendor: str
    sms: int  # streaming multiprocessors (NVIDIA) or compute units (AMD): where CTAs run
    hbm_gb: float
    hbm_gbps: float
    peak_dense_tflops: dict[str, Optional[float]]
    interconnect: Interconnect
    source: str  # the vendor document the numbers come from
    aliases: list[str] = []
    device_name_patterns: list[str] = []  # regexes matched against deviceProperties[].name
    sm_unit: str = "SM"
    compute_capability: Optional[str] = None  # "9.0" (NVIDIA) / "9.4" (AMD gfx942): the row of _occupancy.json
    hbm_gbps_bus: Optional[float] = None  # bus width x memory clock as the driver reports it, where it differs
    sources: dict[str, str] = {}  # field -> document, where it differs from `source`
    note: str = ""
    unverified: list[str] = []  # fields that could not be checked against the cited document
    path: str = ""  # where it was loaded from (set by the loader)

    @property
    def hbm_bytes_per_s(self) -> float:
        return self.hbm_gbps * 1e9

    def peak_flops(self, dtype: str) -> Optional[float]:
        """Dense peak FLOP/s for the math of ``dtype`` (None where the GPU has no such rate)."""
        key = DTYPE_PEAK.get(dtype.lower(), dtype.lower())
        v = self.peak_dense_tflops.get(key)
        return None if v is None else float(v) * 1e12

    def summary(self) -> dict[str, Any]:
        return {
            "hw": self.name,
            "hw_full_name": self.full_name,
            "sms": self.sms,
            "hbm_gbps": self.hbm_gbps,
            "hw_source": self.source,
        }


_DECODER = msgspec.json.Decoder(HardwareProfile)


def canonical_dtype(dtype: str) -> str | None:
    """``torch.bfloat16``, ``BF16``, ``bfloat16`` → ``bf16``; None when the dtype is unknown."""
    key = str(dtype).strip().lower().removeprefix("torch.")
    key = DTYPE_ALIASES.get(key, key)
    return key if key in DTYPE_BYTES else None


def dtype_bytes(dtype: str, where: str = "", error=DataFileError) -> float:
    """Bytes per element (the one dtype table, tracekit/data/dtypes.json)."""
    key = canonical_dtype(dtype)
    if key is None:
        known = ", ".join(sorted(set(DTYPE_BYTES) | set(DTYPE_ALIASES)))
        raise error(f"{where}unknown dtype {dtype!r}; known: {known}")
    return DTYPE_BYTES[key]


def _hw_dir():
    return resources.files("tracekit.data").joinpath("hardware")


def _parse(doc: dict[str, Any], src: str) -> HardwareProfile:
    try:
        hw = _DECODER.decode(json.dumps(doc).encode())
    except msgspec.ValidationError as exc:
        raise DataFileError(f"{src}: {exc}; see docs/roofline.md (hardware profiles)") from exc
    bad = [k for k in hw.peak_dense_tflops if k not in DTYPES]
    if bad:
        raise DataFileError(
            f"{src}: $.peak_dense_tflops has unknown dtype(s) {', '.join(bad)}; use {', '.join(DTYPES)}"
        )
    if hw.sms < 1 or hw.hbm_gbps <= 0:
        raise DataFileError(f"{src}: $.sms and $.hbm_gbps must be positive")
    if hw.compute_capability is not None and hw.compute_capability not in _occupancy_table().get(hw.vendor, {}).get(
        "by_compute_capability", {}
    ):
        raise DataFileError(
            f"{src}: $.compute_capability {hw.compute_capability!r} has no row in"
            f" tracekit/data/hardware/_occupancy.json ({hw.vendor})"
        )
    for i, p in enumerate(hw.device_name_patterns):
        try:
            re.compile(p)
        except re.error as exc:
            raise DataFileError(
                f"{src}: $.device_name_patterns[{i}] is not a valid regular expression ({exc})"
            ) from exc
    hw.path = src
    return hw


def _read_json(text: str, src: str) -> dict[str, Any]:
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise DataFileError(f"{src} is not valid JSON ({exc})") from exc
    if not isinstance(doc, dict):
        raise DataFileError(f"{src}: a hardware profile is a JSON object")
    return doc


@lru_cache(maxsize=1)
def _shipped_docs() -> dict[str, tuple[dict[str, Any], str]]:
    out: dict[str, tuple[dict[str, Any], str]] = {}
    for f in sorted(_hw_dir().iterdir(), key=lambda p: p.name):
        if not f.name.endswith(".json") or f.name.startswith("_"):  # _occupancy.json is not a profile
            continue
        src = f"tracekit/data/hardware/{f.name}"
        out[f.name.removesuffix(".json")] = (_read_json(f.read_text(encoding="utf-8"), src), src)
    return out


def shipped_profiles() -> dict[str, HardwareProfile]:
    """Every shipped profile by its name."""
    return {name: _parse(doc, src) for name, (doc, src) in _shipped_docs().items()}


def _by_name(ref: str) -> Optional[tuple[dict[str, Any], str]]:
    key = ref.lower().removesuffix(".json")
    docs = _shipped_docs()
    if key in docs:
        return docs[key]
    for doc, src in docs.values():
        if key == str(doc.get("name", "")).lower() or key in (str(a).lower() for a in doc.get("aliases", [])):
            return doc, src
    return None


def load_profile(ref: str | Path) -> HardwareProfile:
    """A profile by shipped name or alias (case-insensitive), or from a user JSON file.

    A user file with ``"base": NAME`` starts from that shipped profile and replaces the fields it gives
    (``peak_dense_tflops`` and ``interconnect`` are merged key by key). A file that exists wins over a shipped
    name (``--hw b200.json`` is the user's file, not the shipped b200)."""
    check_argument(ref, "ref", "a hardware profile name or a path (str or Path) to a profile file", paths=True)
    p = Path(ref)
    found = None if p.is_file() else _by_name(str(ref))
    if found is not None:
        return _parse(*found)
    if not p.is_file():
        names = ", ".join(sorted(_shipped_docs()))
        raise InputError(
            f"hardware {str(ref)!r} is neither a shipped profile ({names}) nor a file; pass --hw NAME"
            " or a JSON file (docs/roofline.md)"
        )
    try:
        doc = _read_json(p.read_text(encoding="utf-8"), str(p))
    except OSError as exc:
        raise InputError(f"{p} could not be read ({exc}); check the path") from exc
    base = doc.pop("base", None)
    if base is not None:
        found = _by_name(str(base))
        if found is None:
            raise DataFileError(f"{p}: $.base names no shipped profile ({', '.join(sorted(_shipped_docs()))})")
        merged = dict(found[0])
        for k, v in doc.items():
            merged[k] = {**merged[k], **v} if isinstance(v, dict) and isinstance(merged.get(k), dict) else v
        merged.setdefault("sources", {})
        doc = merged
    return _parse(doc, str(p))


@lru_cache(maxsize=1)
def _devices_words() -> dict[str, Any]:
    doc = json.loads(resources.files("tracekit.data").joinpath("record_hints.json").read_text(encoding="utf-8"))
    return {k: v["devices"] for k, v in doc.items() if isinstance(v, dict) and "devices" in v}


def devices_phrase(meta: dict[str, Any] | None) -> str:
    """Where the file describes its GPUs, in the words of the profiler that wrote it (``record_hints.json``
    ``devices``, as :func:`tracekit.data.record_hint` reads it): deviceProperties, TARGET_INFO_GPU, rocprofv3 agents."""
    p = (meta or {}).get("profiler")
    name = p.get("name") if isinstance(p, dict) else p
    words = _devices_words()
    return str(words.get(name, words["kineto"]) if isinstance(name, str) else words["kineto"])


def device_names(meta: dict[str, Any]) -> list[str]:
    """``deviceProperties[*].name`` of the devices a trace used (all of them if it says none)."""
    props = [d for d in meta.get("device_properties") or [] if isinstance(d, dict) and isinstance(d.get("name"), str)]
    used = set(meta.get("devices_used") or [])
    chosen = [d for d in props if d.get("id") in used] or props
    return [d["name"] for d in chosen]


def detect_profile(meta: dict[str, Any]) -> Optional[HardwareProfile]:
    """The shipped profile whose device-name pattern matches the trace's device; when the trace gives no name (some
    ROCm builds write ""), the one profile with the device's SM/CU count and memory size (within 10 %); else None."""
    for name in device_names(meta):
        for hw in shipped_profiles().values():
            if any(re.search(p, name) for p in hw.device_name_patterns):
                return hw
    props = [d for d in meta.get("device_properties") or [] if isinstance(d, dict)]
    used = set(meta.get("devices_used") or [])
    dev = next((d for d in props if d.get("id") in used), props[0] if props else None)
    if not dev or not isinstance(dev.get("numSms"), int):
        return None
    mem_gib = dev.get("totalGlobalMem", 0) / 2**30 if isinstance(dev.get("totalGlobalMem"), (int, float)) else None
    fits = [
        hw
        for hw in shipped_profiles().values()
        if hw.sms == dev["numSms"]
        and (mem_gib is None or hw.hbm_gb is None or abs(hw.hbm_gb - mem_gib) <= 0.1 * hw.hbm_gb)
    ]
    if len(fits) != 1:
        return None
    how = f"detected from the device's {dev['numSms']} SMs/CUs" + (f" and {mem_gib:.0f} GiB" if mem_gib else "")
    named = sorted({n for n in device_names(meta) if n})
    why = f"{', '.join(named)} matches no profile's name" if named else "the trace names no device"
    return msgspec.structs.replace(fits[0], source=f"{how} ({why}); {fits[0].source}")


def profile_stand_in(meta: dict[str, Any], hw: Optional[HardwareProfile]) -> Optional[str]:
    """When ``hw`` (detected, :func:`detect_profile`) is not the trace's device's own model: one clause that says
    which profile stands in and why ("AMD Instinct MI308X matches no profile's name: mi300x stands in, chosen by its
    80 SMs/CUs …"); None when a device name matches the profile's patterns, or there is no profile."""
    if hw is None:
        return None
    names = sorted({n for n in device_names(meta) if n})
    if any(re.search(p, n) for p in hw.device_name_patterns for n in names):
        return None
    who = ", ".join(names) if names else f"the trace's device (no name in its {devices_phrase(meta)})"
    return (
        f"{who} has no hardware profile of its own: {hw.name} ({hw.full_name}) stands in, chosen by its SM/CU count"
        " and memory, so its clock and peaks may differ; pass --hw NAME or --hw FILE.json for the exact model"
    )


def as_profile(hw, *, name: str = "hw") -> Optional[HardwareProfile]:
    """What an analysis calls on its ``hw`` argument, so that a notebook may pass what the CLI's ``--hw`` takes:
    None stays None, a HardwareProfile is itself, a shipped name or a JSON file is loaded (:func:`load_profile`)."""
    return named_or_loaded(
        hw,
        HardwareProfile,
        load_profile,
        name=name,
        must_be="a hardware profile name, a path to a profile file or a HardwareProfile",
    )


def resolve_profile(
    hw: HardwareProfile | str | Path | None, meta: dict[str, Any] | None = None, *, what: str = "this analysis"
) -> HardwareProfile:
    """``hw`` if given (see :func:`as_profile`), else the profile detected from the trace; an InputError says what
    to pass otherwise: a MissingDataError (exit 4, the trace lacks what this needs)."""
    if hw is not None:
        return as_profile(hw)
    found = detect_profile(meta or {})
    if found is None:
        seen = ", ".join(device_names(meta or {})) or f"no {devices_phrase(meta)}"
        raise MissingDataError(
            f"{what} needs a hardware profile and the trace's device ({seen}) matches none;"
            f" pass --hw NAME ({', '.join(sorted(_shipped_docs()))}) or --hw FILE.json"
        )
    return found


def with_hbm(hw: HardwareProfile, hbm: float | str | None) -> HardwareProfile:
    """The profile with another HBM peak: a number of GB/s, or ``"bus"`` for the bus-derived figure."""
    if hbm is None:
        return hw
    if isinstance(hbm, str) and hbm.strip().lower() == "bus":
        if hw.hbm_gbps_bus is None:
            raise InputError(f"hardware profile {hw.name} has no bus-derived HBM figure (hbm_gbps_bus); pass a number")
        value = float(hw.hbm_gbps_bus)
    else:
        try:
            value = float(hbm)
        except ValueError:
            raise InputError(f"--hbm-gbps takes a number of GB/s or 'bus', not {hbm!r}") from None
    if value <= 0:
        raise InputError(f"--hbm-gbps must be positive, not {value}")
    return msgspec.structs.replace(hw, hbm_gbps=value)


def hw_profiles(name: str | None = None):
    """`tracekit hw`: one profile (a shipped name or a JSON file), or every shipped one, as a table."""
    check_argument(
        name, "name", "a hardware profile name, a path (str or Path) to a profile file or None", paths=True, none=True
    )
    import pandas as pd

    from .result import Result

    profiles = [load_profile(name)] if name else list(shipped_profiles().values())
    rows = []
    for p in profiles:
        rows.append(
            {
                "name": p.name,
                "full_name": p.full_name,
                "vendor": p.vendor,
                "sms": p.sms,
                "sm_unit": p.sm_unit,
                "compute_capability": p.compute_capability,
                "hbm_gb": p.hbm_gb,
                "hbm_gbps": p.hbm_gbps,
                **{f"{d}_tflops": p.peak_dense_tflops.get(d) for d in ("fp4", "fp8", "bf16", "fp16", "tf32", "fp32")},
                "link": p.interconnect.name,
                "link_unidirectional_gbps": p.interconnect.unidirectional_gbps,
                "source": p.source,
                "unverified": ", ".join(p.unverified),
                "path": p.path,
            }
        )
    return Result(
        command="hw",
        inputs=[],
        params={"name": name},
        summary={"profiles": len(rows)},
        tables={"profiles": pd.DataFrame(rows)},
    )


# ------------------------------------------------------------------------------------------------ occupancy


@lru_cache(maxsize=1)
def occupancy_table() -> dict[str, Any]:
    """``tracekit/data/hardware/_occupancy.json``, checked for the keys the calculator reads."""
    return _occupancy_table()


@lru_cache(maxsize=1)
def _occupancy_table() -> dict[str, Any]:
    src = "tracekit/data/hardware/_occupancy.json"
    doc = _read_json(_hw_dir().joinpath("_occupancy.json").read_text(encoding="utf-8"), src)
    for vendor in ("NVIDIA", "AMD"):
        if not isinstance(doc.get(vendor, {}).get("by_compute_capability"), dict):
            raise DataFileError(f"{src}: $.{vendor}.by_compute_capability is missing")
    return doc


class SmLimits(msgspec.Struct, kw_only=True):
    """What one SM (CU) holds at once, for the occupancy calculator (:func:`ctas_per_sm`). ``None`` where unknown
    (that limit is then not applied, and ``assumed`` says so). ``sources`` names where each field came from."""

    vendor: str
    compute_capability: Optional[str]
    warp_size: int
    max_threads_per_sm: int
    max_blocks_per_sm: Optional[int]
    registers_per_sm: Optional[int]
    registers_per_block: Optional[int]
    register_allocation_unit: int = 256
    register_sub_partitions: int = 1
    shared_memory_per_sm: Optional[int]
    shared_memory_per_block_optin: Optional[int]
    shared_memory_allocation_unit: int = 1
    reserved_shared_memory_per_block: int = 0
    max_registers_per_thread: Optional[int] = None  # the most a kernel may allocate (NVIDIA 255; CDNA2-4 512 VGPRs)
    sources: dict[str, str] = {}
    assumed: list[str] = []

    def summary(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__struct_fields__}


_DEVICE_FIELDS = {  # deviceProperties key(s) -> SmLimits field
    "warp_size": ("warpSize",),
    "max_threads_per_sm": ("maxThreadsPerMultiprocessor", "maxThreadsPerMultiProcessor"),
    "registers_per_sm": ("regsPerMultiprocessor",),
    "registers_per_block": ("regsPerBlock",),
    "shared_memory_per_sm": ("sharedMemPerMultiprocessor", "maxSharedMemoryPerMultiProcessor"),
    "shared_memory_per_block_optin": ("sharedMemPerBlockOptin",),
}


def _used_device(meta: dict[str, Any]) -> Optional[dict[str, Any]]:
    props = [d for d in meta.get("device_properties") or [] if isinstance(d, dict)]
    used = set(meta.get("devices_used") or [])
    return next((d for d in props if d.get("id") in used), props[0] if props else None)


def sm_limits(meta: dict[str, Any] | None, hw: HardwareProfile | None = None) -> SmLimits:
    """The per-SM limits of a trace's device: each field from its ``deviceProperties`` where it has it, else the
    row of ``tracekit/data/hardware/_occupancy.json`` for its compute capability (deviceProperties'
    computeMajor.computeMinor, else ``hw.compute_capability``), else that vendor's defaults. A MissingDataError
    when neither the trace nor ``hw`` names a compute capability the table knows."""
    table = _occupancy_table()
    dev = _used_device(meta or {}) or {}
    vendor = None
    if isinstance(dev.get("computeMajor"), int):
        name = str(dev.get("name") or "")
        # ROCm writes warpSize 64 (and sometimes no name); CUDA 32
        vendor = (
            "AMD" if dev.get("warpSize") == 64 or "AMD" in name or (meta or {}).get("vendor") == "AMD" else "NVIDIA"
        )
        cc = f"{dev['computeMajor']}.{dev.get('computeMinor', 0)}"
        cc_from = f"trace {devices_phrase(meta)} computeMajor.computeMinor"
    elif hw is not None and hw.compute_capability is not None:
        vendor, cc, cc_from = hw.vendor, hw.compute_capability, f"hardware profile {hw.name}"
    else:
        raise MissingDataError(
            f"the trace's {devices_phrase(meta)} give no compute capability and no hardware profile"
            " names one, so the SM's occupancy limits are unknown; pass --hw NAME"
        )
    spec = table[vendor]
    row = spec["by_compute_capability"].get(cc)
    sources: dict[str, str] = {"compute_capability": cc_from}
    assumed: list[str] = []
    if row is None:
        raise MissingDataError(
            f"compute capability {cc} ({vendor}) has no row in"
            " tracekit/data/hardware/_occupancy.json, so the SM's occupancy limits are unknown;"
            " add one (docs/roofline.md)"
        )
    if cc in spec.get("unverified", []):
        assumed.append(f"the table's row for compute capability {cc} is unverified")
    merged = {**spec["defaults"], **row}
    vals: dict[str, Any] = {}
    for f in SmLimits.__struct_fields__:
        if f in ("vendor", "compute_capability", "sources", "assumed"):
            continue
        got = next((dev[k] for k in _DEVICE_FIELDS.get(f, ()) if isinstance(dev.get(k), int) and dev[k] > 0), None)
        if got is not None:
            vals[f], sources[f] = got, f"trace {devices_phrase(meta)}"
        elif f in merged:
            vals[f], sources[f] = merged[f], f"_occupancy.json {vendor} {cc}"
        else:
            vals[f] = None
    if vendor == "AMD" and not (meta or {}).get("kernel_resources"):  # rocprofv3 records them (kernel_symbols)
        assumed.append(spec["assumed"])
        vals["register_sub_partitions"] = vals.get("register_sub_partitions") or 1
    for f in ("warp_size", "max_threads_per_sm"):
        if not vals.get(f):
            raise MissingDataError(f"the SM's {f} is unknown ({vendor} {cc}); pass --hw NAME")
    return SmLimits(
        vendor=vendor,
        compute_capability=cc,
        sources=sources,
        assumed=assumed,
        **{
            k: v
            for k, v in vals.items()
            if v is not None
            or k
            in (
                "max_blocks_per_sm",
                "registers_per_sm",
                "registers_per_block",
                "shared_memory_per_sm",
                "shared_memory_per_block_optin",
                "max_registers_per_thread",
            )
        },
    )


LIMITS = ("threads", "registers", "shared_memory", "blocks_per_sm")


def ctas_per_sm(threads, registers, shared_mem, lim: SmLimits):
    """CTAs of each kernel resident on one SM at once, as CUDA's occupancy calculator counts them (cuda_occupancy.h),
    vectorised over kernels: the least of

    * **threads**: (max threads per SM ÷ warp size) ÷ warps per block (warps rounded up);
    * **registers**: registers per warp (per thread × warp size) rounded up to the allocation unit (256), whole
      warps per register sub-partition (registers per SM ÷ 4 sub-partitions), × sub-partitions, ÷ warps per block;
    * **shared memory**: shared memory per SM ÷ (the block's shared memory + the reserved part per block, 1 KiB on
      8.0 and later, rounded up to the allocation unit);
    * **blocks_per_sm**: the cap on resident blocks (32 on 8.0/9.0/10.x, 16 or 24 on some).

    A limit whose input is unknown (registers or shared memory < 0, as on ROCm) is not applied. Returns
    ``(ctas_per_sm, limited_by, status)``: int64 ≥ 1 (1 where the block size is unknown), the name(s) of the
    binding limit(s) joined with '+', and per kernel ``ok``, ``partial`` (registers or shared memory unknown: the
    count of the limits that are known, an upper bound), ``no_block`` (threads unknown: 1 assumed) or
    ``exceeds`` (the limits admit no CTA although it ran: the table or deviceProperties disagree with the kernel;
    1 used)."""
    t = np.asarray(threads, dtype=np.int64)
    r = np.asarray(registers, dtype=np.int64)
    s = np.asarray(shared_mem, dtype=np.int64)
    big = np.iinfo(np.int64).max // 4
    ws = int(lim.warp_size)
    known = t > 0
    warps = np.where(known, -(-np.maximum(t, 1) // ws), 1)
    by_threads = (int(lim.max_threads_per_sm) // ws) // warps
    if lim.registers_per_sm is not None:
        parts = max(int(lim.register_sub_partitions), 1)
        unit = max(int(lim.register_allocation_unit), 1)
        per_warp = np.maximum(r, 0) * ws
        alloc = -(-per_warp // unit) * unit
        warps_per_part = (int(lim.registers_per_sm) // parts) // np.maximum(alloc, 1)
        by_regs = np.where(r > 0, (warps_per_part * parts) // warps, big)
        if lim.registers_per_block is not None:  # the per-block register check of the hardware (and the software)
            too_many = (per_warp * (-(-warps // parts) * parts) > lim.registers_per_block) | (
                alloc * warps > lim.registers_per_block
            )
            by_regs = np.where((r > 0) & too_many, 0, by_regs)
    else:
        by_regs = np.full(t.shape, big, dtype=np.int64)
    if lim.shared_memory_per_sm is not None:
        unit = max(int(lim.shared_memory_allocation_unit), 1)
        alloc = -(-(np.maximum(s, 0) + int(lim.reserved_shared_memory_per_block)) // unit) * unit
        by_smem = np.where((s >= 0) & (alloc > 0), int(lim.shared_memory_per_sm) // np.maximum(alloc, 1), big)
        if lim.shared_memory_per_block_optin is not None:
            by_smem = np.where((s >= 0) & (s > lim.shared_memory_per_block_optin), 0, by_smem)
    else:
        by_smem = np.full(t.shape, big, dtype=np.int64)
    cap = np.full(t.shape, big if lim.max_blocks_per_sm is None else int(lim.max_blocks_per_sm), dtype=np.int64)
    stack = np.vstack([by_threads, by_regs, by_smem, cap])
    got = stack.min(axis=0)
    binding = stack == got
    names = np.asarray(LIMITS, dtype=object)
    # one label per distinct pattern of binding limits (at most 15), not a string join per kernel
    code = (binding * (1 << np.arange(4))[:, None]).sum(axis=0)
    labels = np.empty(16, dtype=object)
    for c in range(16):
        labels[c] = "+".join(names[[bool(c >> i & 1) for i in range(4)]])
    limited_by = labels[code]
    partial = (r <= 0) | (s < 0)
    status = np.where(~known, "no_block", np.where(got < 1, "exceeds", np.where(partial, "partial", "ok"))).astype(
        object
    )
    limited_by = np.where(known, limited_by, "unknown (no block size)")
    return np.where(known & (got >= 1), got, 1).astype(np.int64), limited_by, status


def ctas_per_sm_range(threads, registers, shared_mem, lim: SmLimits):
    """CTAs per SM of each kernel as a range ``(lo, hi)`` (int64 arrays, lo ≤ hi, both ≥ 1), for launches that lack
    registers per thread or shared memory per block (ROCm Kineto traces): ``hi`` is :func:`ctas_per_sm`'s count
    from the limits whose inputs are known (an unknown limit not applied); ``lo`` is the worst case the SM's limits
    allow for the unknown inputs: the most registers per thread a block of that size may allocate and still launch
    (up to ``max_registers_per_thread``), and the most shared memory a block may take
    (``shared_memory_per_block_optin``). Where registers and shared memory are both known, lo = hi (the exact
    count). Where the worst case is not known (no per-block shared memory or register cap), lo is 1."""
    t = np.asarray(threads, dtype=np.int64)
    r = np.asarray(registers, dtype=np.int64)
    s = np.asarray(shared_mem, dtype=np.int64)
    hi, _, _ = ctas_per_sm(t, r, s, lim)
    lo = hi.copy()
    r_unknown, s_unknown = r <= 0, s < 0
    todo = (t > 0) & (r_unknown | s_unknown)
    if not todo.any():
        return lo, hi
    # the worst shared memory: the most a block may take (unknown cap: 1 CTA, the least any launch gets)
    s_worst = -1 if lim.shared_memory_per_block_optin is None else int(lim.shared_memory_per_block_optin)
    s_use = np.where(s_unknown, s_worst, s)[todo]
    r_max = lim.max_registers_per_thread
    if r_max is None or lim.registers_per_sm is None:
        worst = np.ones(int(todo.sum()), dtype=np.int64) if r_unknown[todo].any() or s_worst < 0 else None
    else:
        worst = None
    if worst is None:
        # per launch, the count at every register count 1..r_max it could have (known ones: just theirs); the least
        # count of those that still launch (≥ 1 CTA): the count falls as registers rise, so that is the count at the
        # most registers the block can hold
        cand = np.arange(1, int(r_max) + 1, dtype=np.int64)
        tt, ru = t[todo], r_unknown[todo]
        regs = np.where(ru[:, None], cand[None, :], r[todo][:, None])
        got, _, status = ctas_per_sm(
            np.broadcast_to(tt[:, None], regs.shape).ravel(),
            regs.ravel(),
            np.broadcast_to(s_use[:, None], regs.shape).ravel(),
            lim,
        )
        got = np.where(status == "exceeds", np.iinfo(np.int64).max, got).reshape(regs.shape)
        worst = got.min(axis=1)
        worst = np.where(worst == np.iinfo(np.int64).max, 1, worst)
        if s_worst < 0:
            worst = np.where(s_unknown[todo], 1, worst)
    lo[todo] = np.minimum(np.maximum(worst, 1), hi[todo])
    return lo, hi
