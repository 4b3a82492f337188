"""The HTML report of a study: ``python -m harness report STUDY_DIR`` writes STUDY_DIR/report.html.

``report.build.build_report(study_dir, via_notebook=False)`` is the function the study calls at
its end; ``via_notebook=True`` executes notebooks/report.ipynb with papermill and exports it with
nbconvert, without code cells, to the same file.
"""
