"""Hostile unit strings (from files' metadata records and stores' attrs): a UnitsWarning and the string
kept, before pint evaluates anything - never a hang, a memory blow-up or a raw exception."""

import json
import warnings

import numpy as np
import pytest

import vdbflow
from vdbflow import synthetic
from vdbflow.core import units as U

HOSTILE = {
    "power-tower": "9**9**9",
    "power-tower-6": "2**2**2**2**2**2",
    "caret-tower": "m^2^3",
    "dangling": "1/",
    "zero": "m/0",
    "zero-power": "m^(1/0)",
    "factors": " ".join(["m"] * 2000),
    "nested": "(" * 3000 + "m" + ")" * 3000,
    "nested-9": "(" * 9 + "m" + ")" * 9,
    "long": "m" * 300,
    "big-power": "m^40",
    "power-of-powers": "((m^4)^4)^4",
    "number-power": "10**400",
    "grouped-power": "(2**2)**(2**2)",
    "big-number": "1e999 m",
    "overflow": "1e29*1e29*1e29*1e29*1e29*1e29*1e29*1e29*1e29*1e29*1e29",
    "cf-power": "m99999999999",
    "words": "m^16 squared",
    "operators": "m | s",
    "nothing": "0 m",
    "unknown": "zorks",
}


@pytest.mark.parametrize("text", HOSTILE.values(), ids=HOSTILE.keys())
def test_a_hostile_unit_string_is_kept_with_a_warning(text):
    with pytest.warns(U.UnitsWarning, match="expected a unit string pint can read"):
        assert U.normalize(text) == text
    with pytest.warns(U.UnitsWarning):
        assert U.divide(text, "m") == f"{text}/m"
    with pytest.warns(U.UnitsWarning):
        assert U.multiply("m", text) == f"(m) ({text})"
    with pytest.warns(U.UnitsWarning):
        assert U.power(text, 2) == f"({text})^2"
    assert U.same(text, text) and not U.same(text, "m")


@pytest.mark.parametrize("text", ["m/0", "m^(1/0)", "1/0 m"])
def test_what_pint_raises_on_grammatical_text_is_an_unknown_unit(text):
    with pytest.warns(U.UnitsWarning, match=r"\(pint cannot read it\)"):
        assert U.normalize(text) == text


def test_a_long_string_is_shown_cut_short_in_the_warning():
    with pytest.warns(U.UnitsWarning, match=r"\(6001 characters\) \(longer than 256 characters\)") as caught:
        U.normalize("(" * 3000 + "m" + ")" * 3000)
    assert len(str(caught[0].message)) < 300


@pytest.mark.parametrize("text", ["m^32", "m^-32", "m^(1/2)", "kg m-3", "1e+06 m/s", "1e-06 m", "°C", "square meter"])
def test_units_at_the_edge_of_the_grammar_still_read(text):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert U.normalize(text) is not None
        assert U.same(text, text)


def test_powers_of_parsed_units_stay_bounded():
    with pytest.warns(U.UnitsWarning, match="raised to 1000000000, beyond 32"):
        assert U.power("m", 10**9) == "(m)^1000000000"
    with pytest.warns(U.UnitsWarning, match="finite quantity"):
        assert U.power("m^16", 16) == "(m^16)^16"  # m^256
    with pytest.warns(U.UnitsWarning, match="finite quantity"):
        assert U.multiply(*["1e20"] * 20) == " ".join(["(1e20)"] * 20)  # 1e400
    assert U.power("m^4", 4) == "m^16"
    text = "m^4"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", U.UnitsWarning)
        for _ in range(10):  # powers of powers: text, never a growing exponent
            text = U.power(text, 8)
    assert text.startswith("(((") and text.endswith("^8")


@pytest.fixture(scope="module")
def tg():
    return synthetic.flow_volume(synthetic.taylor_green(), resolution=12)


@pytest.fixture(scope="module")
def pts():
    return np.random.default_rng(5).uniform(1.0, 5.0, (50, 3))


@pytest.mark.parametrize("units, length_units", [("9**9**9", "m"), ("m/s", "2**2**2**2**2**2"), ("1/", "m/0")])
def test_sampling_a_volume_of_hostile_units_warns_and_keeps_them(tg, pts, units, length_units):
    vol = tg.select_leaves(np.arange(tg.leaf_count))
    vol.units, vol.length_units = units, length_units
    with pytest.warns(U.UnitsWarning):
        ds = vol.sample_grad(pts)
    assert ds["velocity"].attrs["units"] == units and ds["x"].attrs["units"] == length_units
    np.testing.assert_array_equal(ds["velocity_jacobian"].values, tg.sample_grad(pts)["velocity_jacobian"].values)


def test_hostile_units_in_a_files_metadata_record_are_kept(tg, pts, tmp_path):
    vol = tg.select_leaves(np.arange(tg.leaf_count))
    vol.units, vol.length_units = "9**9**9", "(" * 3000 + "m" + ")" * 3000
    vdbflow.save(tmp_path / "v.nvdb", {"velocity": vol})
    back = vdbflow.open(tmp_path / "v.nvdb")
    assert (back.units, back.length_units) == (vol.units, vol.length_units)
    with pytest.warns(U.UnitsWarning):
        ds = back.sample_grad(pts)
    assert ds["velocity"].attrs["units"] == "9**9**9"


def test_hostile_units_in_a_stores_attrs_are_kept(tg, pts, tmp_path):
    tg.to_zarr(tmp_path / "v.zarr")
    attrs = json.loads((tmp_path / "v.zarr" / ".zattrs").read_text())
    attrs.update(volume_units="9**9**9", length_units="2**2**2**2**2**2")
    (tmp_path / "v.zarr" / ".zattrs").write_text(json.dumps(attrs))
    back = vdbflow.open(tmp_path / "v.zarr")
    with pytest.warns(U.UnitsWarning):
        ds = back.sample_grad(pts)
    assert ds["velocity"].attrs["units"] == "9**9**9" and ds["x"].attrs["units"] == "2**2**2**2**2**2"
