"""The round-five campaign kinds of publishing, resume and the CUDA build cache (scripts/fault_campaign.py
``--kinds pubrecords,unitrecords,cachetrust``, cases in scripts/hostile_publish_cases.py) in the suite:
90 seeded cases, each in its own process, every one ending as its oracle accepts (docs/reliability.md)."""

import importlib.util
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "fault_campaign.py"


@pytest.fixture(scope="module")
def campaign():
    sys.path.insert(0, str(SCRIPT.parent))
    spec = importlib.util.spec_from_file_location("fault_campaign", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["fault_campaign"] = module
    spec.loader.exec_module(module)
    yield module
    sys.path.remove(str(SCRIPT.parent))


@pytest.mark.slow
def test_90_cases_of_tampered_records_and_caches_end_as_their_oracles_accept(campaign):
    kinds = list(campaign.ROUND_FIVE_PUBLISH)
    counts, bugs = campaign.run_campaign(90, kinds, seed=2049, jobs=2, progress=False)
    assert not bugs, "\n".join(
        f"{b['kind']} {b['seed']} {b['index']} {b['outcome']}: {b['detail'][:300]}" for b in bugs
    )
    assert sum(counts.values()) == 90
    # the oracles are not vacuous: each kind both refused (left, rewrote, rebuilt) and accepted good input
    assert counts["pubrecords", "refused"] > 5 and counts["pubrecords", "same"] > 0
    assert counts["unitrecords", "refused"] > 5
    assert counts["cachetrust", "refused"] > 5 and counts["cachetrust", "same"] > 0
