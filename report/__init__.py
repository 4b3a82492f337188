"""The HTML report of a study: ``python -m harness report STUDY_DIR`` writes STUDY_DIR/report.html.

``report.build.build_report(study_dir)`` collects the study's figures once (report.data) and
writes the report; the study notebook calls it at its end and shows the built sections.
``build_report_via_notebook`` executes notebooks/report.ipynb with papermill and exports it with
nbconvert, without code cells, to the same file.
"""
