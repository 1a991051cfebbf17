"""Packages idem for Python around the compiled module ``_idem`` that the project's CMake
builds (target ``idem_python``, option ``IDEM_PYTHON``). There is no separate native build
here: the module is the same code, flags and core library as the rest of idem.

Where the module comes from, first found:
1. ``IDEM_BUILD_PYTHON_MODULE``: the path of a built ``_idem*.so``, taken as it is;
2. ``IDEM_BUILD_DIR`` (default: ``build`` at the repository's root): ``python/idem/_idem*.so``
   in it, brought up to date with ``cmake --build --target idem_python`` (the option
   ``IDEM_PYTHON`` is turned on there first when the directory lacks the module);
3. a build directory that does not exist is configured (``-DIDEM_PYTHON=ON``, Release).

(``IDEM_BUILD_*``: idem's commands ignore that prefix in the environment; any other
``IDEM_*`` variable they do not know makes them refuse to start.)
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def _built_module(build_dir: Path) -> Path | None:
    found = sorted(glob.glob(str(build_dir / "python" / "idem" / "_idem*.so")))
    return Path(found[0]) if found else None


def _find_or_build_module() -> Path:
    given = os.environ.get("IDEM_BUILD_PYTHON_MODULE")
    if given:
        return Path(given)
    build_dir = Path(os.environ.get("IDEM_BUILD_DIR", ROOT / "build"))
    if not (build_dir / "CMakeCache.txt").exists():
        subprocess.check_call(["cmake", "-S", str(ROOT), "-B", str(build_dir), "-G", "Ninja",
                               "-DCMAKE_BUILD_TYPE=Release", "-DIDEM_PYTHON=ON",
                               f"-DPYTHON_EXECUTABLE={sys.executable}"])
    elif _built_module(build_dir) is None:
        subprocess.check_call(["cmake", str(build_dir), "-DIDEM_PYTHON=ON"])
    # Up to date with the sources (a no-op when it is).
    jobs = os.environ.get("IDEM_JOBS", "2")
    subprocess.check_call(["cmake", "--build", str(build_dir), "-j", jobs,
                           "--target", "idem_python"])
    module = _built_module(build_dir)
    if module is None:
        sys.exit(f"idem: the build in {build_dir} made no python/idem/_idem*.so")
    return module


class BuildWithModule(build_py):
    """Copies the compiled module into the package being built."""

    def run(self) -> None:
        super().run()
        module = _find_or_build_module()
        target = Path(self.build_lib) / "idem" / module.name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(module, target)


class BinaryDistribution(Distribution):
    """The package holds a compiled module: its wheel is tagged for this platform."""

    def has_ext_modules(self) -> bool:
        return True


setup(
    packages=["idem"],
    package_data={"idem": ["py.typed", "*.pyi"]},
    cmdclass={"build_py": BuildWithModule},
    distclass=BinaryDistribution,
)
