"""pip install ./python (pyproject.toml) into a fresh virtual environment: tbcoll imports there without PYTHONPATH,
with its version, and its torch backend is the C++ one where that was built."""
import os
import subprocess
import sys
import tempfile

from conftest import BUILD, HERE

ROOT = os.path.dirname(os.path.dirname(HERE))


def test_pip_install_then_import_without_pythonpath():
    with tempfile.TemporaryDirectory() as tmp:
        venv = os.path.join(tmp, "venv")
        subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", venv], check=True)
        python = os.path.join(venv, "bin", "python")
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        env["TBCOLL_WORLD_SIZE"] = "1"  # a world of one, asked for: no warning before the printed line
        env["TBCOLL_PIP_BUILD_DIR"] = os.path.join(os.path.dirname(os.path.abspath(BUILD)), "build-pip")
        proc = subprocess.run([python, "-m", "pip", "install", "--no-build-isolation", "--no-deps", "-q",
                               os.path.join(ROOT, "python")], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, timeout=1200)
        assert proc.returncode == 0, proc.stdout
        # The install built outside the source tree: nothing of setuptools' left in python/ (to be committed).
        left = [n for n in os.listdir(os.path.join(ROOT, "python")) if n == "build" or n.endswith(".egg-info")]
        assert not left, f"pip install left {left} in python/"
        check = ("import tbcoll, tbcoll.torch_backend as tb, numpy as np; c = tbcoll.init(rank=0, size=1); "
                 "x = np.ones(3, np.float32); c.all_reduce(x); print(tbcoll.__version__, tb.IMPLEMENTATION, "
                 "tbcoll.__file__, x.sum())")
        out = subprocess.run([python, "-c", check], env=env, cwd=tmp, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, timeout=120).stdout
        with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
            version = f.read().split("project(tbcoll VERSION ")[1].split()[0]
        words = out.split()
        assert words[:2] == [version, "c++"] and words[2].startswith(venv) and words[3] == "3.0", out
