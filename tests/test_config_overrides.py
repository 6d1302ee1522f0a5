"""A config as a new user writes and overrides it: where a problem came from, near-miss keys and
choices, counts written as 1e6, and a section made by ``--set`` alone."""

import pytest

from vdbflow.jobs.config.load import load_config
from vdbflow.jobs.config.model import ConfigError, LocalClusterSpec

BASE = """\
volume:
  synthetic: {field: taylor_green, resolution: 16}
points:
  kind: random
  count: 1000
sampling:
  outputs: [value, jacobian, q_criterion]
output: {path: out.zarr}
"""


def _error(*overrides: str, text: str = BASE) -> str:
    with pytest.raises(ConfigError) as err:
        load_config(text=text, overrides=list(overrides))
    return str(err.value)


def test_a_bad_item_given_by_set_is_reported_at_set_not_at_the_files_line():
    message = _error("sampling.outputs=[value,vorticty]")
    assert "sampling.outputs.1 (from --set)" in message
    assert "line" not in message
    assert "did you mean 'vorticity'?" in message


def test_an_unknown_key_names_the_nearest_allowed_key():
    assert "sampling.outptus (from --set): unknown key; did you mean 'outputs'?" in _error("sampling.outptus=[value]")
    assert "did you mean 'count'?" in _error(text=BASE.replace("count: 1000", "cuont: 1000"))
    assert "points.cuont (<text>, line 6): unknown key" in _error(
        text=BASE.replace("count: 1000", "count: 1000\n  cuont: 1")
    )


def test_an_unknown_key_with_no_near_miss_lists_what_the_section_allows():
    message = _error("output.zzzzzz=1")
    assert "unknown key; expected one of" in message and "'path'" in message and "'compression'" in message


@pytest.mark.parametrize("written, count", [("1e6", 1_000_000), ("2.5e3", 2500), ("1E3", 1000), ("1_000", 1000)])
def test_counts_written_in_exponent_notation_are_taken_when_exact(written, count):
    assert load_config(text=BASE, overrides=[f"points.count={written}"]).points.count == count
    assert load_config(text=BASE.replace("count: 1000", f"count: {written}")).points.count == count


def test_a_count_with_a_fraction_is_refused_naming_the_number():
    assert "fractional part" in _error("points.count=1.5e0")
    assert "got '1e400'" in _error("points.count=1e400")  # beyond a float: the text, named as written


def test_a_section_made_by_set_alone_takes_the_default_kind():
    cfg = load_config(text=BASE, overrides=["cluster.memory_limit=1GB"])
    assert isinstance(cfg.cluster, LocalClusterSpec) and cfg.cluster.memory_limit == "1GB"
    # a section the file has keeps its own kind: the override merges into it
    cfg = load_config(text=BASE + "cluster: {kind: local, workers: 1}\n", overrides=["cluster.memory_limit=2GB"])
    assert cfg.cluster.workers == 1 and cfg.cluster.memory_limit == "2GB"
