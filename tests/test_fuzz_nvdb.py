"""Seeded structure-aware mutants of .nvdb files (scripts/fuzz_nvdb.py), each read in a subprocess batch
under an address-space limit: every one is refused with a vdbflow error or opens consistently (closest
samples equal the stored values, linear sampling runs, and - for one case in four - a write + read
round trip keeps voxels and values).  No crash, no other exception.  600 mutants as the campaign
makes them (most checksums cleared, the others read with the default checksum=True), and 300 with
their checksums kept and ignored (checksum=False): the structural checks alone must hold.  The suite
samples the campaign; `python scripts/fuzz_nvdb.py` runs it whole (docs/testing.md)."""

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "fuzz_nvdb.py"


def campaign(cases: int, seed: int, checksums: bool):
    spec = importlib.util.spec_from_file_location("fuzz_nvdb", SCRIPT)
    fuzz = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fuzz)
    return fuzz.campaign(
        cases,
        batch=1000,
        seed=seed,
        jobs=1,
        memory_gib=4.0,
        env_extra={},
        report=None,
        roundtrip_every=4,
        checksums=checksums,
    )


@pytest.mark.slow
def test_six_hundred_seeded_mutants():
    counts = campaign(600, 2026, checksums=True)
    assert sum(counts.values()) == 600, counts
    assert counts["inconsistent"] == counts["error"] == counts["crash"] == counts["sanitizer"] == 0, counts
    # the campaign reaches both sides: mutants the reader refuses and mutants it accepts
    assert counts["rejected"] > 300 and counts["accepted"] > 30, counts


@pytest.mark.slow
def test_three_hundred_mutants_with_their_checksums_ignored():
    counts = campaign(300, 2027, checksums=False)
    assert sum(counts.values()) == 300, counts
    assert counts["inconsistent"] == counts["error"] == counts["crash"] == counts["sanitizer"] == 0, counts
    assert counts["rejected"] > 90 and counts["accepted"] > 30, counts
