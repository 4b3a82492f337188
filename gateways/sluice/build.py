"""Sluice's compiled hot path: one build, run in place (``python gateways/sluice/build.py``) or
as part of the package's build (setup.py: ``pip install ./gateways/sluice``).

The same .py files run as plain Python; compiled, the .pxd files beside them type the classes,
attributes and calls of the request path. The byte layer (``_bytescan.pyx``) is Cython only: its
pure-Python reference is ``bytescan.py``, which runs when it is not built. ``BuildCompiled``
(setuptools' build_ext) puts the extension modules in sluice/_compiled/ with a digest of the
sources they were built from: ``sluice`` loads them only while that digest matches (and never
with SLUICE_PURE_PYTHON=1). Without a C compiler it says so and builds nothing, so the package
installs as pure Python. Both ways share build/ (C files, objects, modules): the second build of
the same sources compiles nothing.

In place (also ``pip install -e``): each module renamed into place, so a running Sluice keeps the
one it has mapped, the digest last. ``python build.py`` is idempotent (an unchanged build is not
redone); it needs Cython and a C compiler, and without them says so and exits 1 (Sluice still
runs).
"""
import os
import shutil
import sys
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
PKG = os.path.join(HERE, "sluice")
OUT = os.path.join(PKG, "_compiled")

os.environ["SLUICE_PURE_PYTHON"] = "1"  # this process only reads the package's metadata
from sluice import BUILT_MODULES, COMPILED_MODULES, EXTENSION_MODULES, _sources_digest  # noqa: E402

DIRECTIVES = {
    "language_level": 3,
    "binding": False,          # methods as plain C methods: cheaper calls from uvloop and httptools
    "embedsignature": False,
}


def extensions():
    """The modules to compile, named as they are imported (their paths relative to this folder)."""
    from setuptools import Extension
    return ([Extension(f"sluice.{m}", [f"sluice/{m}.py"]) for m in COMPILED_MODULES]
            + [Extension(f"sluice.{m}", [f"sluice/{m}.pyx"]) for m in EXTENSION_MODULES])


def command():
    """setuptools' build_ext, building into <build_lib>/sluice/_compiled/ with its SOURCES; with
    --inplace (``python build.py``, ``pip install -e``) into sluice/_compiled/ beside the sources."""
    from setuptools.command.build_ext import build_ext
    from setuptools.errors import CCompilerError, ExecError, PlatformError

    class BuildCompiled(build_ext):
        def run(self):
            from Cython.Build import cythonize
            # the C files replace the sources of setuptools' own extension objects, which carry
            # what it set on them
            for ext, c in zip(self.extensions, cythonize(self.extensions, quiet=True,
                                                         compiler_directives=DIRECTIVES,
                                                         build_dir=os.path.join(HERE, "build", "c"))):
                ext.sources = c.sources
            out = os.path.join(self.build_lib, "sluice", "_compiled")
            stamp = os.path.join(out, "SOURCES")
            if os.path.exists(stamp):
                os.unlink(stamp)          # no stamp until every module is built again
            inplace, self.inplace = self.inplace, False   # the copy in place waits for the stamp
            try:
                super().run()
            except (CCompilerError, ExecError, PlatformError) as e:   # no compiler, no headers
                shutil.rmtree(out, ignore_errors=True)
                print(f"sluice: cannot compile ({e}); Sluice runs as pure Python", file=sys.stderr)
                return
            finally:
                self.inplace = inplace
            wanted = {self.get_ext_filename(m) for m in BUILT_MODULES}
            for name in os.listdir(out):  # a module no longer compiled must not shadow its .py
                if name not in wanted:
                    os.unlink(os.path.join(out, name))
            with open(stamp, "w") as f:
                f.write(_sources_digest(PKG) + "\n")
            if self.inplace:
                self.copy_extensions_to_source()

        def get_ext_fullpath(self, ext_name):
            head, name = os.path.split(super().get_ext_fullpath(ext_name))
            return os.path.join(head, "_compiled", name)

        def copy_extensions_to_source(self):
            built = os.path.join(self.build_lib, "sluice", "_compiled")
            os.makedirs(OUT, exist_ok=True)
            stamp = os.path.join(OUT, "SOURCES")
            if os.path.exists(stamp):
                os.unlink(stamp)  # no process loads the build while it is being replaced
            wanted = {self.get_ext_filename(m) for m in BUILT_MODULES}
            for name in wanted:
                # a new file renamed into place: a running Sluice keeps the module it has mapped
                tmp = os.path.join(OUT, f".{name}.new")
                shutil.copy2(os.path.join(built, name), tmp)
                os.replace(tmp, os.path.join(OUT, name))
            for name in os.listdir(OUT):  # a module no longer compiled must not shadow its .py
                if name not in wanted:
                    os.unlink(os.path.join(OUT, name))
            shutil.copy2(os.path.join(built, "SOURCES"), stamp + ".new")
            os.replace(stamp + ".new", stamp)

    return BuildCompiled


def _built(digest):
    """The build in sluice/_compiled/ is of these sources, for this interpreter."""
    from importlib.machinery import EXTENSION_SUFFIXES
    try:
        with open(os.path.join(OUT, "SOURCES")) as f:
            current = f.read().strip() == digest
    except OSError:
        return False
    return current and all(os.path.exists(os.path.join(OUT, m + EXTENSION_SUFFIXES[0]))
                           for m in BUILT_MODULES)


def main():
    digest = _sources_digest(PKG)
    if _built(digest):
        print(f"sluice: compiled modules up to date ({OUT})")
        return 0
    try:
        import Cython  # noqa: F401
        from setuptools import setup
    except ImportError as e:
        print(f"sluice: cannot compile ({e}); Sluice runs as pure Python", file=sys.stderr)
        return 1
    os.chdir(HERE)  # module names follow the paths: sluice/<m>.py -> sluice.<m>
    # setuptools reads pyproject.toml here, as the package's build does; older ones call that beta
    warnings.filterwarnings("ignore", message=r"Support for `\[tool.setuptools\]`")
    setup(ext_modules=extensions(), cmdclass={"build_ext": command()},
          script_name="build.py", script_args=["-q", "build_ext", "--inplace"])
    if not _built(digest):
        return 1                          # the command said why
    print(f"sluice: compiled {', '.join(BUILT_MODULES)} into {OUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
