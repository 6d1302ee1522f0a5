"""The command line: ``vdbflow demo`` runs end to end and reports against the analytic field."""

import re

from click.testing import CliRunner

from vdbflow.cli import main


def test_demo_runs_and_reports():
    result = CliRunner().invoke(main, ["demo", "--resolution", "24", "--points", "2000", "--show", "3"],
                                terminal_width=200)
    assert result.exit_code == 0, result.output
    assert "velocity" in result.output and "jacobian" in result.output
    m = re.search(r"median \|J - J_exact\|max = ([0-9.e+-]+)", result.output)
    assert m, result.output
    assert float(m.group(1)) < 0.5  # trilinear gradient error at h = 2*pi/24 is O(h)


def test_help_on_every_command():
    for args in (["--help"], ["demo", "--help"]):
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 0 and "Usage" in result.output
