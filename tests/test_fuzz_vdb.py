"""1,000 seeded structure-aware mutants of .vdb files (scripts/fuzz_vdb.py: the committed seeds of
tests/data/openvdb, mutated where the reader reads its numbers, plus bit flips, spans, splices,
truncations, crafted headers and zip bombs), each read in a subprocess batch under an address-space
limit: every one is refused with a vdbflow error or opens consistently (list_grids agrees, bytes and
file read the same, closest samples equal the stored values, linear sampling runs, and for one case in
four a .nvdb round trip keeps voxels and values).  No crash, no other exception."""

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "fuzz_vdb.py"


def _fuzz():
    spec = importlib.util.spec_from_file_location("fuzz_vdb", SCRIPT)
    fuzz = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fuzz)
    return fuzz


@pytest.mark.slow
def test_one_thousand_seeded_mutants():
    counts = _fuzz().campaign(1000, batch=500, seed=2026, jobs=1, memory_gib=4.0, report=None, roundtrip_every=4)
    assert sum(counts.values()) == 1000, counts
    assert counts["inconsistent"] == counts["error"] == counts["crash"] == 0, counts
    # the campaign reaches both sides: mutants the reader refuses and mutants it accepts
    assert counts["rejected"] > 500 and counts["accepted"] > 50, counts


def test_the_seeds_are_read_and_their_fields_found():
    fuzz = _fuzz()
    seeds = fuzz.seed_files()
    assert len(seeds) == 3 and sum(len(s) for s in seeds) < 200_000
    for s in seeds:
        assert len(fuzz.fields(s)) > 100  # header, metadata, descriptors, transforms, nodes, chunk sizes
