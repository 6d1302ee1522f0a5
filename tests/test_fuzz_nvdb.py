"""Seeded structure-aware mutants of .nvdb files (scripts/fuzz_nvdb.py), each read in a subprocess batch
under an address-space limit: every one is refused with a vdbflow error or opens consistently (closest
samples equal the stored values, linear sampling runs, and - for one case in four - a write + read
round trip keeps voxels and values).  No crash, no other exception.  2,000 mutants as the campaign
makes them (most checksums cleared, the others read with the default checksum=True), and 1,000 with
their checksums kept and ignored (checksum=False): the structural checks alone must hold."""

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
def test_two_thousand_seeded_mutants():
    counts = campaign(2000, 2026, checksums=True)
    assert sum(counts.values()) == 2000, counts
    assert counts["inconsistent"] == counts["error"] == counts["crash"] == counts["sanitizer"] == 0, counts
    # the campaign reaches both sides: mutants the reader refuses and mutants it accepts
    assert counts["rejected"] > 1000 and counts["accepted"] > 100, counts


@pytest.mark.slow
def test_a_thousand_mutants_with_their_checksums_ignored():
    counts = campaign(1000, 2027, checksums=False)
    assert sum(counts.values()) == 1000, counts
    assert counts["inconsistent"] == counts["error"] == counts["crash"] == counts["sanitizer"] == 0, counts
    assert counts["rejected"] > 300 and counts["accepted"] > 100, counts
