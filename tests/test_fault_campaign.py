"""The fault campaign (scripts/fault_campaign.py) sampled in the suite: 100 seeded cases of hostile unit
strings, metadata records, Zarr volume stores and series, each in its own process under memory and
time limits, and a few cases of jobs under signals, concurrent runs, hostile configs and (as root)
full disks.  Every case must end in an outcome its oracle accepts (docs/reliability.md).  The whole
campaign (thousands of cases) is `python scripts/fault_campaign.py` (docs/testing.md)."""

import importlib.util
import os
import sys
from pathlib import Path

import numpy as np
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


def _no_bugs(bugs: list[dict]) -> str:
    return "\n".join(f"{b['kind']} {b['seed']} {b['index']} {b['outcome']}: {b['detail'][:300]}" for b in bugs)


@pytest.mark.slow
def test_100_cases_of_hostile_inputs_end_as_their_oracles_accept(campaign):
    counts, bugs = campaign.run_campaign(100, list(campaign.CHEAP), seed=2026, jobs=2, progress=False)
    assert not bugs, _no_bugs(bugs)
    assert sum(counts.values()) == 100
    # the oracles are not vacuous: each kind both refused hostile inputs and read good ones back
    assert counts["stores", "refused"] > 6 and counts["stores", "same"] > 1
    assert counts["units", "warned"] > 6 and counts["units", "same"] > 0
    assert counts["series", "refused"] > 1
    assert counts["metadata", "same"] + counts["metadata", "refused"] > 3


@pytest.mark.slow
def test_jobs_under_signals_concurrent_runs_and_configs(campaign):
    kinds = ["signals", "concurrent", "config"] + (["disk"] if os.geteuid() == 0 else [])
    counts, bugs = campaign.run_campaign(4 * len(kinds), kinds, seed=7, jobs=2, progress=False)
    assert not bugs, _no_bugs(bugs)
    assert sum(counts.values()) == 4 * len(kinds)


def test_the_plan_shares_cases_among_kinds(campaign):
    order = campaign.plan(1000, list(campaign.KINDS))
    assert len(order) == 1000 and len(set(order)) == 1000
    shares = {k: sum(1 for kind, _ in order if kind == k) / 1000 for k in campaign.KINDS}
    total = sum(kind.share for kind in campaign.KINDS.values())
    for k, kind in campaign.KINDS.items():
        assert abs(shares[k] - kind.share / total) < 0.01


def test_the_oracles_catch_what_they_are_for(campaign, tmp_path, monkeypatch):
    """A store reader that ignored a missing chunk would be caught as 'wrong', and a units module that
    raised as an 'error' (not a pass)."""
    from vdbflow.core import units

    rng = np.random.default_rng(0)
    monkeypatch.setattr(units, "normalize", lambda text: 1.5)
    with pytest.raises(campaign.Wrong, match="gave float"):
        campaign.case_units(rng, tmp_path)

    import vdbflow

    monkeypatch.setattr(campaign, "_mutate_store", lambda rng, store: ("chunk values/0 deleted", False))
    scaled = campaign._scaled(campaign._small_volume())  # what a reader filling a missing chunk returns
    monkeypatch.setattr(vdbflow, "open_zarr", lambda path: scaled)
    with pytest.raises(campaign.Wrong, match="opened with other contents"):
        campaign.case_stores(np.random.default_rng(1), tmp_path)


def test_40_cases_of_races_reads_mid_replace_planner_peaks_and_bad_text(campaign):
    """Issue 40's surfaces, a sampled slice: races between check and act, files replaced while read,
    the planner against a chunk's measured peak, and text that is not valid UTF-8."""
    counts, bugs = campaign.run_campaign(40, list(campaign.ROUND_FOUR), seed=2027, jobs=2, progress=False)
    assert not bugs, _no_bugs(bugs)
    assert sum(counts.values()) == 40
    assert counts["races", "refused"] > 0 and counts["planner", "same"] > 0


def test_the_round_four_oracles_catch_what_they_are_for(campaign, tmp_path, monkeypatch):
    """A publish that deleted what appeared after its check, a reader that mixed two files and a planner
    that counted only the written bytes are each caught as 'wrong'."""
    from vdbflow.core import atomic
    from vdbflow.io import volumes
    from vdbflow.jobs import plan
    from vdbflow.jobs.publish import output

    for module, name in ((atomic, "renameat2"), (output, "renameat2"), (volumes, "_check_replaceable")):
        monkeypatch.setattr(module, name, getattr(module, name))  # the cases patch these (they run in a child)
    monkeypatch.setattr(output, "put_back_exchanged", lambda out, final: atomic.remove_tree(out) or "gone")
    monkeypatch.setattr(output, "not_a_result", lambda path: None)  # the old code: no check after the exchange
    monkeypatch.setattr(campaign, "INTRUDERS", ("files",))  # a directory of someone's files, every case
    found = []
    for index in range(60):
        work = tmp_path / str(index)
        work.mkdir()
        try:
            campaign.case_races(np.random.default_rng([5, index]), work)
        except campaign.Wrong as err:
            found.append(str(err))
    assert any("published over files" in f or "was changed" in f for f in found), found

    monkeypatch.setattr(plan.JobPlan, "held_per_point", property(lambda self: self.bytes_per_point))
    with pytest.raises(campaign.Wrong, match="the plan counts|the plan's working set"):
        for index in range(40):  # some draw outputs whose intermediates exceed their written bytes
            work = tmp_path / f"p{index}"
            work.mkdir()
            campaign.case_planner(np.random.default_rng([9, index]), work)
