"""The run directory's files: the one way llm-drill opens what it reads and writes what it writes there.

:mod:`drill.rundir.files` opens every input file (drill files, scenarios, trace-replay CSVs, span files,
every file of a run directory) and writes the report files into a run directory. The layout of a run
directory is still :mod:`drill.rundir.directory`.
"""
