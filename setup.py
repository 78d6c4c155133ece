"""Build of the one compiled extension, zmqload._engine. It needs no libzmq to build and links to
none: the engine opens the run's libzmq (--libzmq) when a process first needs it
(csrc/zl_libzmq.h), so a C compiler and Python's headers are all a build needs.

ZMQLOAD_DEBUG=1 builds the checked engine instead (`make test-engine-debug`): Cython's
bounds, wraparound and initialized checks on, -O0 -g, AddressSanitizer and UBSan. It goes to
build/debug/ (generated C, objects, and a package tree in build/debug/lib), never in place,
so the optimised engine next to the sources is not replaced by it.
"""

import os
import sys
import warnings

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

# What setuptools and wheel say on every build but a user cannot act on, kept out of `make`'s
# output: pyproject.toml's [tool.setuptools] tables (package discovery and data) called "beta"
# by setuptools before 67; wheel's bdist_wheel, which setuptools before 70.1 imports, announcing
# its move; the editable install's note on a package folder in the working directory (the
# checkout itself: the editable install points there).
for _message in (
    r"Support for `\[tool\.setuptools\]` in `pyproject\.toml` is still \*beta\*",
    r"The 'wheel' package is no longer the canonical location of the 'bdist_wheel' command",
    r"\s*Please be careful with folders in your working directory with the same",
):
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
    "compile": [
        "-O0",
        "-g",
        "-UNDEBUG",
        "-fno-omit-frame-pointer",
        SANITIZERS,
        "-fno-sanitize-recover=all",
    ],
    "link": [SANITIZERS],
}


def extensions():
    from Cython.Build import cythonize

    build = CHECKED if DEBUG else RELEASE
    engine = Extension(
        "zmqload._engine",
        sources=["zmqload/_engine.pyx"],
        include_dirs=["csrc"],
        # dlopen: libdl on glibc before 2.34 (an empty stub after it), in libSystem on macOS
        libraries=[] if sys.platform == "darwin" else ["dl"],
        extra_compile_args=build["compile"],
        extra_link_args=build["link"],
    )
    # The checked build's C goes apart too: cythonize reuses a .c newer than the .pyx
    # whatever directives made it, so a shared one would leak into the next release build.
    return cythonize(
        [engine],
        language_level=3,
        include_path=["zmqload"],
        compiler_directives=build["directives"],
        build_dir=os.path.join(DEBUG_DIR, "src") if DEBUG else None,
    )


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
