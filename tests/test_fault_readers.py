"""The round-five reader kinds of the fault campaign (scripts/fault_readers.py, issue 49) in the suite: seeded
cases of inputs read through the fault-injecting ``faulty://`` store and of strided backend selections, each
in its own process; every case must end as its oracle accepts, and the oracles must both refuse and read."""

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


@pytest.fixture(scope="module")
def campaign():
    sys.path.insert(0, str(SCRIPTS))
    spec = importlib.util.spec_from_file_location("fault_campaign", SCRIPTS / "fault_campaign.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["fault_campaign"] = module
    spec.loader.exec_module(module)
    yield module
    sys.path.remove(str(SCRIPTS))


@pytest.mark.slow
def test_faulty_stores_and_strided_selections_end_as_their_oracles_accept(campaign):
    counts, bugs = campaign.run_campaign(36, list(campaign.ROUND_FIVE_READERS), seed=2049, jobs=2, progress=False)
    assert not bugs, "\n".join(f"{b['kind']} {b['index']} {b['outcome']}: {b['detail'][:300]}" for b in bugs)
    assert sum(counts.values()) == 36
    assert counts["urlfaults", "refused"] > 3 and counts["urlfaults", "same"] + counts["urlfaults", "warned"] > 3
    assert counts["strided", "same"] > 5


def test_the_faulty_store_injects_what_it_is_told(campaign, tmp_path):
    """The store's faults are real: a misreported size, no version, a failed read and a replaced object
    each reach vdbflow's reader as a StorageError or an UnversionedWarning (the oracle is not vacuous)."""
    import fault_readers

    import vdbflow
    from vdbflow.errors import StorageError
    from vdbflow.io.location import UnversionedWarning

    fs = fault_readers._faulty_fs()(skip_instance_cache=True)
    vdbflow.Volume.from_dense(np.arange(1, 513, dtype=np.float32).reshape(8, 8, 8)).to_nvdb(tmp_path / "v.nvdb")
    fs.pipe_file("/t/v.nvdb", (tmp_path / "v.nvdb").read_bytes())
    faults = fault_readers.FAULTS
    for setting, error in (
        ({"size": lambda _: 2**63}, "report a size"),
        ({"fail_at": 1, "error": ConnectionError}, "connection was reset"),
        ({"replace_at": 1, "replacement": (tmp_path / "v.nvdb").read_bytes()}, "stay the same object"),
    ):
        faults.clear()
        faults.update(suffix="v.nvdb", **setting)
        type(fs).reads = 0
        with pytest.raises(StorageError, match=error):
            vdbflow.open("faulty://t/v.nvdb")
    faults.clear()
    faults.update(suffix="v.nvdb", unversioned=True)
    with pytest.warns(UnversionedWarning):
        vdbflow.open("faulty://t/v.nvdb")
    faults.clear()
