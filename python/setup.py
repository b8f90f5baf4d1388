"""Builds tbcoll's Python package with CMake (pyproject.toml says how pip calls it).

The repository's CMake project is configured for this interpreter in $TBCOLL_PIP_BUILD_DIR (default: build-pip at
the top of the repository, reused between installs; beside build/, so with ccache and CCACHE_BASEDIR at the top,
which this sets, the compilations are those of tools/build.sh's build and come from its cache), with tests,
benchmarks and examples off and the modules finding libtbcoll in their own folder (TBCOLL_PYTHON_BUNDLE); its
modules, libtbcoll and the package's .py files go into the wheel. setuptools' own build/ and egg-info go into that
folder too, never into python/. CMAKE_ARGS adds arguments to the configure step.
"""
import glob
import os
import re
import shlex
import shutil
import subprocess
import sys

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def project_version():
    with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
        return re.search(r"project\(tbcoll VERSION ([0-9.]+)", f.read()).group(1)


BUILD = os.path.abspath(os.environ.get("TBCOLL_PIP_BUILD_DIR", os.path.join(ROOT, "build-pip")))


class CMakeBuild(build_py):
    def run(self):
        super().run()
        build = BUILD
        configure = ["cmake", "-S", ROOT, "-B", build, "-DCMAKE_BUILD_TYPE=Release", f"-DTBCOLL_PYTHON={sys.executable}",
                     "-DTBCOLL_WITH_PYTHON=ON", "-DTBCOLL_PYTHON_BUNDLE=ON", "-DTBCOLL_BUILD_TESTS=OFF",
                     "-DTBCOLL_BUILD_BENCHMARKS=OFF", "-DTBCOLL_BUILD_EXAMPLES=OFF"]
        if shutil.which("ccache"):
            os.environ.setdefault("CCACHE_BASEDIR", ROOT)
            configure += ["-DCMAKE_CXX_COMPILER_LAUNCHER=ccache", "-DCMAKE_C_COMPILER_LAUNCHER=ccache"]
        configure += shlex.split(os.environ.get("CMAKE_ARGS", ""))
        subprocess.check_call(configure)
        targets = ["tbcoll_python"]
        with open(os.path.join(build, "CMakeCache.txt")) as f:
            if "TBCOLL_TORCH_LIB:FILEPATH=/" in f.read():
                targets.append("tbcoll_torch_pg")
        subprocess.check_call(["cmake", "--build", build, "-j", str(os.cpu_count() or 2), "--target", *targets])
        out = os.path.join(self.build_lib, "tbcoll")
        os.makedirs(out, exist_ok=True)
        built = glob.glob(os.path.join(build, "python", "tbcoll", "*.so"))
        built += [os.path.join(build, "python", "tbcoll", "_version.py")]
        built += glob.glob(os.path.join(build, "libtbcoll.so*")) + glob.glob(os.path.join(build, "libtbcoll*.dylib"))
        for path in built:
            shutil.copy(path, out)  # symlinks become files: the loader finds the soname's


class BinaryDistribution(Distribution):
    def has_ext_modules(self):
        return True  # a platform wheel: it holds compiled modules


# setuptools' own work (build/, tbcoll.egg-info) goes beside CMake's, never into the source tree.
os.makedirs(os.path.join(BUILD, "setuptools"), exist_ok=True)
setup(version=project_version(), packages=["tbcoll"], package_dir={"tbcoll": "tbcoll"},
      cmdclass={"build_py": CMakeBuild}, distclass=BinaryDistribution,
      options={"build": {"build_base": os.path.join(BUILD, "setuptools", "build")},
               "egg_info": {"egg_base": os.path.join(BUILD, "setuptools")}})
