"""Write vdbflow/_core.pyi, the type stub of the compiled extension, from the built module itself
(nanobind's stubgen), so that type checkers see the kernels' entry points and facts as they are.
Values of module constants are left out (they depend on the build and the CPU: CPU_TARGET, ...).

    python scripts/core_stub.py            # rewrite vdbflow/_core.pyi
    python scripts/core_stub.py --check    # exit 1 when the committed stub differs from the module
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from pathlib import Path

STUB = Path(__file__).resolve().parents[1] / "vdbflow" / "_core.pyi"
CONSTANT = re.compile(r"^(\w+): (\w+) = .*$")


def generate() -> str:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "_core.pyi"
        subprocess.run(
            [sys.executable, "-m", "nanobind.stubgen", "-q", "-m", "vdbflow._core", "-o", str(out)], check=True
        )
        text = out.read_text()
    lines = [CONSTANT.sub(r"\1: \2", line) for line in text.splitlines()]
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str]) -> int:
    text = generate()
    if "--check" in argv:
        if not STUB.is_file() or STUB.read_text() != text:
            print(f"{STUB} differs from the built extension: run python scripts/core_stub.py", file=sys.stderr)
            return 1
        return 0
    STUB.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
