"""Counts calls across the processes of one command, for tests/test_one_path.py: this folder goes
first on the PYTHONPATH of the command the test starts, and SLUICE_CALL_LOG names a file. In
each process (the command, the notebook's kernel), when one of the modules below is imported,
its function is wrapped to append "<function> <study directory>" to that file per call: the
real functions run, counted at the seam where every caller finds them."""
import os

if os.environ.get("SLUICE_CALL_LOG"):
    import functools
    import importlib.abc
    import importlib.machinery
    import sys
    from pathlib import Path

    # module -> (function, the study directory of a call, from its arguments and result)
    COUNTED = {
        "harness.run.preflight": ("preflight", lambda args, result: result.config.study_dir),
        "report.data": ("collect", lambda args, result: args[0]),
        "harness.stats.loading": ("load_study", lambda args, result: args[0]),
        "harness.stats.runs": ("run_summary", lambda args, result: args[0].path),
    }

    def _counted(name, where, function):
        @functools.wraps(function)
        def counted(*args, **kwargs):
            result = function(*args, **kwargs)
            with open(os.environ["SLUICE_CALL_LOG"], "a", encoding="utf-8") as log:
                log.write(f"{name} {Path(where(args, result)).resolve()}\n")
            return result
        return counted

    class _CountingFinder(importlib.abc.MetaPathFinder):
        def find_spec(self, fullname, path, target=None):
            if fullname not in COUNTED:
                return None
            spec = importlib.machinery.PathFinder.find_spec(fullname, path)
            if spec is None or spec.loader is None:
                return None
            execute = spec.loader.exec_module

            def execute_and_wrap(module):
                execute(module)
                name, where = COUNTED[fullname]
                setattr(module, name, _counted(name, where, getattr(module, name)))
            spec.loader.exec_module = execute_and_wrap
            return spec

    sys.meta_path.insert(0, _CountingFinder())
