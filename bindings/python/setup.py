"""Build of the tocsin Python package.

Inside the repository checkout, `sync_core()` copies ../../core and ../../VERSION into
this directory (`_core/`, `tocsin/_version.py`) before building, so an sdist carries
the core and builds anywhere. Outside the checkout (from an sdist) the copy is used.

Two native artefacts are built from the same core:
  tocsin/_tocsin*.so    the CPython module, linked to the system's shared libsqlite3
                        (one SQLite per process, shared with the stdlib sqlite3 module)
  tocsin/_ext/tocsin.so the loadable SQLite extension (entry point sqlite3_tocsin_init),
                        for tocsin.load(conn) and any other SQLite host
"""
import os
import shutil
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))
CORE_COPY = os.path.join(HERE, "_core")


def sync_core():
    """Copies the core and the version from the checkout, when there is one
    (TOCSIN_CORE_DIR names another core directory to build against)."""
    src = os.environ.get("TOCSIN_CORE_DIR") or os.path.join(REPO, "core")
    version_file = os.path.join(REPO, "VERSION")
    if not (os.path.isdir(os.path.join(src, "src")) and os.path.isfile(version_file)):
        return
    for part in ("include", "src"):
        dst = os.path.join(CORE_COPY, part)
        if os.path.isdir(dst):
            shutil.rmtree(dst)
        shutil.copytree(os.path.join(src, part), dst)
    shutil.copyfile(version_file, os.path.join(CORE_COPY, "VERSION"))


def read_version():
    with open(os.path.join(CORE_COPY, "VERSION"), encoding="ascii") as f:
        version = f.read().strip()
    target = os.path.join(HERE, "tocsin", "_version.py")
    text = '"""Written by setup.py from the repository\'s VERSION file."""\n__version__ = "%s"\n' % version
    try:
        with open(target, encoding="ascii") as f:
            current = f.read()
    except OSError:
        current = None
    if current != text:
        with open(target, "w", encoding="ascii") as f:
            f.write(text)
    return version


sync_core()
if not os.path.isfile(os.path.join(CORE_COPY, "src", "tocsin_all.c")):
    sys.exit("tocsin: the C core is missing (no ../../core checkout and no _core/ copy)")
VERSION = read_version()

LOADABLE = "tocsin._ext.tocsin"


class BuildExt(build_ext):
    """Names the loadable extension tocsin.so (no interpreter tag): SQLite derives
    the entry point sqlite3_tocsin_init from that file name."""

    def run(self):
        if self.inplace:
            os.makedirs(os.path.join(HERE, "tocsin", "_ext"), exist_ok=True)
        super().run()

    SUFFIX = ".dll" if sys.platform == "win32" else ".so"

    def get_ext_filename(self, fullname):
        if fullname == LOADABLE:
            return os.path.join("tocsin", "_ext", "tocsin" + self.SUFFIX)
        return super().get_ext_filename(fullname)

    def get_ext_fullpath(self, ext_name):
        path = super().get_ext_fullpath(ext_name)
        if ext_name == LOADABLE:
            path = os.path.join(os.path.dirname(path), "tocsin" + self.SUFFIX)
        return path

    def get_export_symbols(self, ext):
        if ext.name == LOADABLE:
            return ["sqlite3_tocsin_init"]
        return super().get_export_symbols(ext)


# Hidden visibility: the CPython module exports PyInit__tocsin only (the core inside
# it is TOCSIN_EMBED, so none of its functions leave the module), the loadable
# extension sqlite3_tocsin_init only (hosts load it with RTLD_GLOBAL).
c_args = ["-std=gnu11", "-O2", "-fvisibility=hidden"] if sys.platform != "win32" else []
core_inc = [os.path.join("_core", "include"), os.path.join("_core", "src")]
# Every core file: a changed core rebuilds both modules (setuptools compares
# only `sources` otherwise, and would keep a stale build).
core_files = sorted(
    os.path.join("_core", part, name)
    for part in ("include", "src")
    for name in os.listdir(os.path.join(HERE, "_core", part))
)

extensions = [
    Extension(
        "tocsin._tocsin",
        sources=["src/_tocsinmodule.c", "_core/src/tocsin_all.c"],
        include_dirs=core_inc,
        libraries=["sqlite3"],
        define_macros=[("TOCSIN_EMBED", "1")],
        extra_compile_args=c_args,
        depends=core_files,
    ),
    Extension(
        LOADABLE,
        sources=["src/tocsin_ext.c"],
        include_dirs=core_inc,
        extra_compile_args=c_args,
        depends=core_files,
    ),
]

setup(
    version=VERSION,
    ext_modules=extensions,
    cmdclass={"build_ext": BuildExt},
)
