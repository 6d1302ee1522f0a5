"""How many blocks of an entry a multiprocessor holds at once, from the resources ptxas reports
(:class:`vdbflow.devices.cuda_build.Resources`), as CUDA's occupancy calculator counts them.

Registers are allocated a warp at a time in units of 256 and each of a multiprocessor's four partitions has
16,384 of them; a block's warps are spread over the partitions.  Static shared memory is allocated in
units of 128 bytes plus 1 KiB the runtime reserves a block.  Stack (local memory) does not limit occupancy:
it is reserved in device memory for every thread the card can hold (``local_reserve``)."""

from __future__ import annotations

from dataclasses import dataclass

from vdbflow.devices.cuda_build import Resources
from vdbflow.errors import DeviceError


@dataclass(frozen=True)
class Limits:
    """A compute capability's per-multiprocessor limits."""

    warps: int  # resident warps
    blocks: int  # resident blocks
    registers: int  # 32-bit registers
    shared: int  # bytes of shared memory a multiprocessor can give its blocks
    sms_example: int  # multiprocessors of the reference card (A100, H100 SXM, B200): for local_reserve


LIMITS: dict[int, Limits] = {
    80: Limits(warps=64, blocks=32, registers=65536, shared=167936, sms_example=108),
    90: Limits(warps=64, blocks=32, registers=65536, shared=233472, sms_example=132),
    100: Limits(warps=64, blocks=32, registers=65536, shared=233472, sms_example=148),
}
REGISTER_UNIT = 256  # registers a warp are allocated in these units
PARTITIONS = 4  # a multiprocessor's schedulers, each with a quarter of the register file


def arch_number(arch: str | int) -> int:
    """An architecture as its number: ``"sm_90"``, ``"sm_90a"``, ``"compute_100f"`` or ``90`` -> 90 (100)."""
    if isinstance(arch, int):
        return arch
    digits = arch.split("_", 1)[-1].rstrip("af")
    if not digits.isdigit():
        raise DeviceError(f"expected an architecture like sm_90, got {arch!r}")
    return int(digits)


def limits(arch: str | int) -> Limits:
    """The limits of ``arch`` (``sm_90``, ``compute_90`` or 90)."""
    number = arch_number(arch)
    if number not in LIMITS:
        raise DeviceError(f"expected an architecture among {', '.join(f'sm_{a}' for a in LIMITS)}, got {arch!r}")
    return LIMITS[number]


def blocks_per_sm(r: Resources, arch: str | int, threads: int) -> int:
    """Blocks of ``threads`` threads that one multiprocessor of ``arch`` holds at once with resources ``r``."""
    lim = limits(arch)
    warps = -(-threads // 32)
    by_warps = lim.warps // warps
    per_warp = -(-max(r.registers, 1) * 32 // REGISTER_UNIT) * REGISTER_UNIT
    warps_by_registers = (lim.registers // PARTITIONS // per_warp) * PARTITIONS
    by_registers = warps_by_registers // warps
    by_shared = lim.shared // (-(-r.shared // 128) * 128 + 1024)
    return max(0, min(lim.blocks, by_warps, by_registers, by_shared))


def occupancy(r: Resources, arch: str | int, threads: int) -> float:
    """The fraction of a multiprocessor's warp slots that the resident blocks fill (0 .. 1)."""
    return blocks_per_sm(r, arch, threads) * -(-threads // 32) / limits(arch).warps


def local_reserve(r: Resources, arch: str | int) -> int:
    """Bytes of device memory the driver reserves for the stack of an entry on the reference card: a frame for
    every thread the card can hold (2,048 a multiprocessor)."""
    lim = limits(arch)
    return r.stack * lim.warps * 32 * lim.sms_example


# the entries held to two blocks an SM (launch.h VDB_BOUNDS_FILL): templates by name, and the extern "C" ones
FILL_TEMPLATES = ("sample_kernel", "sample_derived_kernel", "derive_kernel", "vjp_kernel", "grid_gradient_kernel")


def fills_the_card(name: str) -> bool:
    """Whether entry ``name`` (a name expression) must fit two blocks of 256 threads a multiprocessor."""
    if name.startswith("vdbflow::"):
        return name.split("::", 1)[1].split("<", 1)[0] in FILL_TEMPLATES
    return name != ""
