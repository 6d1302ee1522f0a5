"""The command line: ``--help`` on every command, and the entry point installed as ``vdbflow``."""

import shutil
import subprocess

from click.testing import CliRunner

from vdbflow.cli import main


def test_help_on_every_command():
    commands = sorted(main.commands)
    assert {"run", "demo", "convert", "info", "clean"} <= set(commands)
    for args in [["--help"]] + [[c, "--help"] for c in commands]:
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 0 and "Usage" in result.output, (args, result.output)


def test_console_script_is_installed():
    exe = shutil.which("vdbflow")
    assert exe is not None
    out = subprocess.run([exe, "--version"], capture_output=True, text=True, check=True).stdout
    assert out.startswith("vdbflow, version")
