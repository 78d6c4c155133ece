"""Build of the one compiled extension, zmqload._engine, against the system libzmq.

libzmq is found with pkg-config. pyzmq's wheel bundles a private libzmq without headers,
so the engine cannot link to that one (docs/ARCHITECTURE.md).
"""
import shlex
import subprocess
import sys

from setuptools import Extension, setup

MISSING_LIBZMQ = (
    "zmqload: libzmq headers not found via pkg-config; install them first "
    "(Debian/Ubuntu: sudo apt-get install libzmq3-dev pkg-config; macOS: brew install zeromq pkg-config; "
    "conda: conda install zeromq pkg-config)"
)


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

    flags = libzmq_flags()
    engine = Extension(
        "zmqload._engine",
        sources=["zmqload/_engine.pyx"],
        include_dirs=["csrc", *flags["include_dirs"]],
        library_dirs=flags["library_dirs"],
        libraries=flags["libraries"],
        extra_compile_args=["-O3"],
    )
    return cythonize([engine], language_level=3, include_path=["zmqload"])


setup(ext_modules=extensions())
