"""Release check: imports every public name and every module of qc_sb3 from an installed wheel.

Run from outside the repository, in a clean virtual environment that has only the wheel and its dependencies, so that a
package file missing from the wheel fails the import: ``python check_wheel.py``.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
from pathlib import Path

import qc_sb3


def main() -> int:
    """Imports the names and modules; prints each failure and returns how many there were."""
    here = Path.cwd().resolve()
    source = Path(qc_sb3.__file__).resolve()
    if here in source.parents and (here / "setup.py").exists():
        print(f"run from outside the repository: qc_sb3 was imported from {source}", file=sys.stderr)
        return 1
    failures = [name for name in qc_sb3.__all__ if not hasattr(qc_sb3, name)]
    for module in pkgutil.walk_packages(qc_sb3.__path__, prefix="qc_sb3."):
        if module.name.endswith(".__main__"):  # command-line entry points run on import
            continue
        try:
            importlib.import_module(module.name)
        except Exception as error:
            failures.append(f"{module.name}: {error!r}")
    from qc_sb3.zoo import ZOO_ALGORITHMS, hyperparams_file

    failures += [f"package data {hyperparams_file(algo)}" for algo in ZOO_ALGORITHMS if not hyperparams_file(algo).is_file()]
    for failure in failures:
        print(f"cannot import {failure}", file=sys.stderr)
    print(f"qc_sb3 {qc_sb3.__version__} from {source.parent}: {len(qc_sb3.__all__)} public names, "
          f"{len(failures)} failures")
    return len(failures)


if __name__ == "__main__":
    sys.exit(main())
