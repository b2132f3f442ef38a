"""Release check: an installed wheel puts only qc_sb3 at the top level and imports every public name and module.

Run from outside the repository, in a clean virtual environment that has only the wheel and its dependencies, so that a
package file missing from the wheel fails: ``python check_wheel.py REPOSITORY``. The library's modules are imported;
those of ``qc_sb3.envs`` and ``qc_sb3.benchmarks`` need extras, so their files are compared with the repository's
``envs/`` and ``benchmarks/`` (modules, configs and the paper's curves) instead.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
from importlib import metadata
from pathlib import Path

import qc_sb3

MAPPED = {"envs": "qc_sb3/envs", "benchmarks": "qc_sb3/benchmarks"}  # setup.py's package_dir
MAPPED_NAMES = ("qc_sb3.envs", "qc_sb3.benchmarks")
DATA = ("*.py", "*.yaml", "*.csv")


def main(repository: Path) -> int:
    """Checks the installed wheel against ``repository``; prints each failure and returns how many there were."""
    here = Path.cwd().resolve()
    source = Path(qc_sb3.__file__).resolve()
    if here in source.parents and (here / "setup.py").exists():
        print(f"run from outside the repository: qc_sb3 was imported from {source}", file=sys.stderr)
        return 1
    failures = [name for name in qc_sb3.__all__ if not hasattr(qc_sb3, name)]
    files = {Path(str(file)).as_posix() for file in metadata.files("qc_sb3") or [] if not str(file).startswith("..")}
    installed = {file.split("/")[0] for file in files}
    failures += [f"top-level entry {name}" for name in sorted(installed) if not name.startswith("qc_sb3")]
    for folder, package in MAPPED.items():
        for pattern in DATA:
            for path in sorted((repository / folder).rglob(pattern)):
                file = f"{package}/{path.relative_to(repository / folder).as_posix()}"
                if file not in files:
                    failures.append(f"{file} (missing from the wheel)")
    # The mapped folders need extras (their files are checked above); entry points run on import.
    library = [module for module in pkgutil.iter_modules(qc_sb3.__path__, "qc_sb3.") if module.name not in MAPPED_NAMES]
    names = [module.name for module in library]
    for package in (module for module in library if module.ispkg):
        path = importlib.import_module(package.name).__path__
        names += [module.name for module in pkgutil.walk_packages(path, f"{package.name}.")]
    for name in sorted(set(names)):
        if name.endswith(".__main__"):
            continue
        try:
            importlib.import_module(name)
        except Exception as error:
            failures.append(f"{name}: {error!r}")
    from qc_sb3.zoo import ZOO_ALGORITHMS, hyperparams_file

    failures += [f"package data {hyperparams_file(algo)}" for algo in ZOO_ALGORITHMS if not hyperparams_file(algo).is_file()]
    for failure in failures:
        print(f"wheel check failed: {failure}", file=sys.stderr)
    print(f"qc_sb3 {qc_sb3.__version__} from {source.parent}: {len(qc_sb3.__all__)} public names, "
          f"{len(failures)} failures")
    return len(failures)


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]).resolve()))
