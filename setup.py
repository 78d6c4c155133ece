"""Build of the one compiled extension, zmqload._engine, against the system libzmq.

libzmq is found with pkg-config. pyzmq's wheel bundles a private libzmq without headers,
so the engine cannot link to that one (docs/ARCHITECTURE.md).

ZMQLOAD_DEBUG=1 builds the checked engine instead (`make test-engine-debug`): Cython's
bounds, wraparound and initialized checks on, -O0 -g, AddressSanitizer and UBSan. It goes to
build/debug/ (generated C, objects, and a package tree in build/debug/lib), never in place,
so the optimised engine next to the sources is not replaced by it.
"""
import os
import shlex
import subprocess
import sys
import warnings

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

MISSING_LIBZMQ = (
    "zmqload: libzmq headers not found via pkg-config; install them first "
    "(Debian/Ubuntu: sudo apt-get install libzmq3-dev pkg-config; macOS: brew install zeromq pkg-config; "
    "conda: conda install zeromq pkg-config)"
)

# What setuptools and wheel say on every build but a user cannot act on, kept out of `make`'s
# output: pyproject.toml's [tool.setuptools] tables (package discovery and data) called "beta"
# by setuptools before 67; wheel's bdist_wheel, which setuptools before 70.1 imports, announcing
# its move; the editable install's note on a package folder in the working directory (the
# checkout itself: the editable install points there).
for _message in (r"Support for `\[tool\.setuptools\]` in `pyproject\.toml` is still \*beta\*",
                 r"The 'wheel' package is no longer the canonical location of the 'bdist_wheel' command",
                 r"\s*Please be careful with folders in your working directory with the same"):
    warnings.filterwarnings("ignore", message=_message)

DEBUG = os.environ.get("ZMQLOAD_DEBUG", "") not in ("", "0")
DEBUG_DIR = os.path.join("build", "debug")

# The hot loops index record chunks unchecked: the release build is what is measured.
RELEASE = {
    "directives": {"boundscheck": False, "wraparound": False, "initializedcheck": False},
    "compile": ["-O3"],
    "link": [],
}
SANITIZERS = "-fsanitize=address,undefined"
CHECKED = {
    "directives": {"boundscheck": True, "wraparound": True, "initializedcheck": True},
    # -fno-sanitize-recover: UBSan findings abort like ASan's instead of printing and going on.
    "compile": ["-O0", "-g", "-UNDEBUG", "-fno-omit-frame-pointer", SANITIZERS, "-fno-sanitize-recover=all"],
    "link": [SANITIZERS],
}


def pkg_config(*args):
    try:
        out = subprocess.run(["pkg-config", *args, "libzmq"], check=True,
                             capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError):
        sys.exit(MISSING_LIBZMQ)
    return shlex.split(out)


def libzmq_flags():
    cflags = pkg_config("--cflags")
    libs = pkg_config("--libs")
    return {
        "include_dirs": [f[2:] for f in cflags if f.startswith("-I")],
        "library_dirs": [f[2:] for f in libs if f.startswith("-L")],
        "libraries": [f[2:] for f in libs if f.startswith("-l")],
    }


def extensions():
    from Cython.Build import cythonize

    build = CHECKED if DEBUG else RELEASE
    flags = libzmq_flags()
    engine = Extension(
        "zmqload._engine",
        sources=["zmqload/_engine.pyx"],
        include_dirs=["csrc", *flags["include_dirs"]],
        library_dirs=flags["library_dirs"],
        libraries=flags["libraries"],
        extra_compile_args=build["compile"],
        extra_link_args=build["link"],
    )
    # The checked build's C goes apart too: cythonize reuses a .c newer than the .pyx
    # whatever directives made it, so a shared one would leak into the next release build.
    return cythonize([engine], language_level=3, include_path=["zmqload"],
                     compiler_directives=build["directives"],
                     build_dir=os.path.join(DEBUG_DIR, "src") if DEBUG else None)


class BuildExt(build_ext):
    """In the checked build, ignores --inplace: the extension goes to build/debug/lib."""

    def finalize_options(self):
        super().finalize_options()
        if DEBUG:
            self.inplace = False
            self.build_lib = os.path.join(DEBUG_DIR, "lib")
            self.build_temp = os.path.join(DEBUG_DIR, "temp")


setup(
    ext_modules=extensions(),
    cmdclass={"build_ext": BuildExt},
    # build_py puts the pure-Python package next to the checked extension.
    options={"build": {"build_lib": os.path.join(DEBUG_DIR, "lib")}} if DEBUG else {},
)
