"""The README's quickstart runs; the sdist and the wheel install into clean venvs."""
import os
import re
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PKG = os.path.dirname(HERE)
REPO = os.path.dirname(os.path.dirname(PKG))


def test_readme_quickstart_runs(tmp_path):
    text = open(os.path.join(PKG, "README.md")).read()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert blocks, "the README has no python block"
    script = tmp_path / "quickstart.py"
    script.write_text(blocks[0])
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=120, cwd=str(tmp_path))
    assert out.returncode == 0, out.stderr
    assert "sending ada@example.org" in out.stdout
    assert "hello ada" in out.stdout
    assert "notified {'id': 1}" in out.stdout


SMOKE = ("import sqlite3, tocsin, os, tempfile; p = os.path.join(tempfile.mkdtemp(), 'a.db'); "
         "db = tocsin.open(p); q = db.queue('q'); q.enqueue({'a': 1}); j = q.claim('w'); "
         "assert j.payload == {'a': 1} and j.ack(); "
         "loads = hasattr(sqlite3.Connection, 'enable_load_extension'); c = sqlite3.connect(p); "
         "loads and tocsin.load(c); "
         "assert not loads or c.execute('select tocsin_version()').fetchone()[0] == tocsin.__version__; "
         "print('ok', tocsin.__version__, tocsin.__file__)")


def _venv(tmp_path, name):
    # from the interpreter running the suite: the wheel built here carries its tag
    # (cp39, cp313, ...); the venv is based on that interpreter's installation
    d = tmp_path / name
    subprocess.run([sys.executable, "-m", "venv", str(d)], check=True, timeout=300)
    return str(d / "bin" / "python")


@pytest.mark.skipif(not os.path.isdir(os.path.join(REPO, "core")), reason="needs the checkout")
def test_sdist_and_wheel_install_into_clean_venvs(tmp_path):
    dist = tmp_path / "dist"
    # the sdist (carrying its copy of the core), then a wheel built from that sdist
    subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--sdist", "--outdir",
                    str(dist), PKG], check=True, timeout=600, capture_output=True)
    sdists = [f for f in os.listdir(dist) if f.endswith(".tar.gz")]
    assert len(sdists) == 1
    sdist = str(dist / sdists[0])
    listing = subprocess.run(["tar", "tzf", sdist], capture_output=True, text=True, check=True).stdout
    assert "/_core/src/tocsin_all.c" in listing and "/_core/VERSION" in listing
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-build-isolation",
                    "--no-deps", "-w", str(dist), sdist], check=True, timeout=600, cwd=str(tmp_path))
    wheels = [f for f in os.listdir(dist) if f.endswith(".whl")]
    assert len(wheels) == 1
    # each into a clean venv, run from a directory outside the checkout
    for name, artefact, extra in (("wheel", str(dist / wheels[0]), []),
                                  ("sdist", sdist, [])):
        py = _venv(tmp_path, "venv-" + name)
        if name == "sdist":
            # --upgrade: a venv of 3.9 starts with a setuptools older than pyproject's >=61
            subprocess.run([py, "-m", "pip", "install", "-q", "--upgrade", "setuptools", "wheel"],
                           check=True, timeout=600)
            extra = ["--no-build-isolation"]
        subprocess.run([py, "-m", "pip", "install", "-q", *extra, artefact], check=True,
                       timeout=600, cwd=str(tmp_path))
        out = subprocess.run([py, "-c", SMOKE], capture_output=True, text=True, timeout=120,
                             cwd=str(tmp_path))
        assert out.returncode == 0, out.stderr
        assert out.stdout.startswith("ok ") and str(tmp_path / ("venv-" + name)) in out.stdout
